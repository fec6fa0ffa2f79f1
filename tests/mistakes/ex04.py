"""Realistic wrong answers for exercise 04 (feed-forward networks)."""

from . import Wrong

ASSIGNMENT = "04_feed_forward"

WRONG = [
    # --- Task 1: llama_ffn (find and fix) -----------------------------------------------------------------
    Wrong("llama-answer", "still what the given version computes", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w3.T
    up = x @ w1.T
    return (gate * torch.sigmoid(gate) * up) @ w2.T  # sigmoid(gate) * gate is SiLU
'''),
    Wrong("llama-answer", "still what the given version computes", '''
def llama_ffn(x, w1, w2, w3):
    # w1, w2, w3 = gate, up, down in order?  w2 has the wrong shape for that, so w3 must be the gate
    up = x @ w1.T
    z = x @ w3.T
    return ((z / (1 + torch.exp(-z))) * up) @ w2.T
'''),
    Wrong("llama-answer", "the weights are used without transposing", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1
    return (gate * torch.sigmoid(gate) * (x @ w3)) @ w2
'''),
    Wrong("llama-answer", "SiLU is applied to both projections", '''
def llama_ffn(x, w1, w2, w3):
    silu = lambda z: z * torch.sigmoid(z)
    return (silu(x @ w1.T) * silu(x @ w3.T)) @ w2.T
'''),
    Wrong("llama-answer", "sigmoid(x @ w1.T) (the original GLU)", '''
def llama_ffn(x, w1, w2, w3):
    gate = torch.sigmoid(x @ w1.T)  # the gate opens between 0 and 1
    return (gate * (x @ w3.T)) @ w2.T
'''),
    Wrong("llama-answer", "SiLU is applied after the product", '''
def llama_ffn(x, w1, w2, w3):
    h = (x @ w1.T) * (x @ w3.T)
    return (h * torch.sigmoid(h)) @ w2.T
'''),
    Wrong("llama-answer", "project them back with @ w2.T", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1.T
    return gate * torch.sigmoid(gate) * (x @ w3.T)
'''),
    # --- Task 2: top_k_swiglu (extend) ---------------------------------------------------------------------
    Wrong("top-k-answer", "ranked by their signed value", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    idx = h.topk(k, dim=-1).indices
    return (h * torch.zeros_like(h).scatter(-1, idx, 1.0)) @ w_down
'''),
    Wrong("top-k-answer", "ranked by the gate SiLU(x W_gate) alone", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    gate = a * torch.sigmoid(a)
    idx = gate.abs().topk(k, dim=-1).indices  # the most open gates
    gate = torch.zeros_like(gate).scatter(-1, idx, gate.gather(-1, idx))
    return (gate * (x @ w_up)) @ w_down
'''),
    Wrong("top-k-answer", "over the positions (dimension −2)", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    idx = h.abs().topk(k, dim=0).indices
    return (h * torch.zeros_like(h).scatter(0, idx, 1.0)) @ w_down
'''),
    Wrong("top-k-answer", "k + 1 units", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    threshold = h.abs().sort(dim=-1, descending=True).values[..., k:k + 1]
    h = torch.where(h.abs() >= threshold, h, torch.zeros_like(h)) if k < h.shape[-1] else h
    return h @ w_down
'''),
    Wrong("top-k-answer", "one threshold is used for the whole batch", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    n_positions = h.numel() // h.shape[-1]
    cutoff = h.abs().flatten().topk(k * n_positions).values[-1]  # keep k per position on average
    return (h * (h.abs() >= cutoff)) @ w_down
'''),
    Wrong("top-k-answer", "are dropped and the rest kept", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    idx = h.abs().topk(k, dim=-1).indices
    return h.scatter(-1, idx, 0.0) @ w_down  # zero out the top k
'''),
    Wrong("top-k-answer", "project them back with @ w_down", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    idx = h.abs().topk(k, dim=-1).indices
    return h * torch.zeros_like(h).scatter(-1, idx, 1.0)
'''),
    Wrong("top-k-answer", "silu", '''
import torch.nn.functional as F

def top_k_swiglu(x, w_gate, w_up, w_down, k):
    h = F.silu(x @ w_gate) * (x @ w_up)
    idx = h.abs().topk(k, dim=-1).indices
    return (h * torch.zeros_like(h).scatter(-1, idx, 1.0)) @ w_down
'''),
    # --- Task 3: geglu_backward (derive) -------------------------------------------------------------------
    Wrong("geglu-answer", "GELU′(a) is missing its second term", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u = grad_h * gate
    grad_a = grad_h * u * cdf  # d/da of a·Φ(a) ≈ Φ(a)
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            (gate * u).T @ g)
'''),
    Wrong("geglu-answer", "derivative of GELU's tanh approximation", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    c = math.sqrt(2 / math.pi)
    t = torch.tanh(c * (a + 0.044715 * a**3))
    gate = 0.5 * a * (1 + torch.erf(a / math.sqrt(2)))
    gelu_prime = 0.5 * (1 + t) + 0.5 * a * (1 - t**2) * c * (1 + 3 * 0.044715 * a**2)
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * gelu_prime
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            (gate * u).T @ g)
'''),
    Wrong("geglu-answer", "φ is not normalised", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2)
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf + a * pdf)
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            (gate * u).T @ g)
'''),
    Wrong("geglu-answer", "grad_x follows only the gate's path", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf + a * pdf)
    return (grad_a @ w_gate.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u, (gate * u).T @ g
'''),
    Wrong("geglu-answer", "grad_w_down has the transposed shape", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf + a * pdf)
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            g.T @ (gate * u))
'''),
    Wrong("geglu-answer", "sums the contributions of all of them", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    a, u = x @ w_gate, x @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gate = a * cdf
    grad_h = grad_out @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf + a * pdf)
    grad_x = grad_a @ w_gate.T + grad_u @ w_up.T
    outer = lambda p, q: p.unsqueeze(-1) * q.unsqueeze(-2)  # one outer product per position
    return grad_x, outer(x, grad_a), outer(x, grad_u), outer(gate * u, grad_out)
'''),
    Wrong("geglu-answer", "swapped", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf + a * pdf)
    grad_x = grad_a @ w_gate.T + grad_u @ w_up.T
    return grad_x.reshape(x.shape), xs.T @ grad_u, xs.T @ grad_a, (gate * u).T @ g
'''),
    Wrong("geglu-answer", "autograd", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w_gate, w_up, w_down)]
    a = leaves[0] @ leaves[1]
    y = (0.5 * a * (1 + torch.erf(a / math.sqrt(2))) * (leaves[0] @ leaves[2])) @ leaves[3]
    return torch.autograd.grad(y, leaves, grad_out)
'''),
    # --- Task 4: predictions ------------------------------------------------------------------------------
    Wrong("predictions-answer", "rounds UP to a multiple of 256", '''
def predictions():
    return {"hidden_width": 6826, "ffn_params": 3 * 2560 * 6826, "ffn_share": 0.6667,
            "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "that rounds down", '''
def predictions():
    return {"hidden_width": 6656, "ffn_params": 53_084_160, "ffn_share": 0.6694, "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "4D is the width of a plain", '''
def predictions():
    return {"hidden_width": 4 * 2560, "ffn_params": 53_084_160, "ffn_share": 0.6694,
            "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "SwiGLU has three", '''
def predictions():
    return {"hidden_width": 6912, "ffn_params": 2 * 2560 * 6912, "ffn_share": 0.5745,
            "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "the exact budget", '''
def predictions():
    return {"hidden_width": 6912, "ffn_params": 8 * 2560**2, "ffn_share": 0.6667, "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "its share of attention and FFN together", '''
def predictions():
    return {"hidden_width": 6912, "ffn_params": 53_084_160, "ffn_share": 3 * 6912 / (4 * 2560),
            "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "SiLU is not ReLU", '''
def predictions():
    return {"hidden_width": 6912, "ffn_params": 53_084_160, "ffn_share": 0.6694, "gate_output": 0.0}
'''),
    Wrong("predictions-answer", "it multiplies the feature u = 4", '''
def predictions():
    return {"hidden_width": 6912, "ffn_params": 53_084_160, "ffn_share": 0.6694, "gate_output": -0.2689}
'''),
]

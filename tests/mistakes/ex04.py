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
    Wrong("llama-answer", "w1, w3 and w2 are used without transposing", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1
    return (gate * torch.sigmoid(gate) * (x @ w3)) @ w2
'''),
    Wrong("llama-answer", "SiLU is applied to both projections", '''
def llama_ffn(x, w1, w2, w3):
    silu = lambda z: z * torch.sigmoid(z)
    return (silu(x @ w1.T) * silu(x @ w3.T)) @ w2.T
'''),
    Wrong("llama-answer", "your gate computes the sigmoid σ(z) (the original GLU's gate)", '''
def llama_ffn(x, w1, w2, w3):
    gate = torch.sigmoid(x @ w1.T)  # the gate opens between 0 and 1
    return (gate * (x @ w3.T)) @ w2.T
'''),
    Wrong("llama-answer", "the activation is applied after the product", '''
def llama_ffn(x, w1, w2, w3):
    h = (x @ w1.T) * (x @ w3.T)
    return (h * torch.sigmoid(h)) @ w2.T
'''),
    Wrong("llama-answer", "project them back with @ w2.T", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1.T
    return gate * torch.sigmoid(gate) * (x @ w3.T)
'''),
    Wrong("llama-answer", "your gate computes GELU(z) = z·Φ(z)", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1.T
    gelu = 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2)))  # the usual FFN activation
    return (gelu * (x @ w3.T)) @ w2.T
'''),
    Wrong("llama-answer", "w2 is used without transposing", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1.T  # (..., F)
    up = x @ w3.T  # (..., F)
    hidden = gate * torch.sigmoid(gate) * up
    return hidden @ w2  # w2 is (D, F): back to D
'''),
    Wrong("llama-answer", "uses w1 as the gate, w2 (not transposed) as the up projection, w3 (not transposed) as the down projection", '''
def llama_ffn(x, w1, w2, w3):
    # w1, w2, w3 = gate, up, down, as the names are numbered
    gate = x @ w1.T  # (F, D) stored (out, in)
    up = x @ w2  # (D, F)
    return (gate * torch.sigmoid(gate) * up) @ w3  # (F, D)
'''),
    Wrong("llama-answer", "the activation is missing", '''
def llama_ffn(x, w1, w2, w3):
    return ((x @ w1.T) * (x @ w3.T)) @ w2.T  # the gate multiplies the up projection
'''),
    Wrong("llama-answer", "a sign slip inside the exponential", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1.T
    silu = gate / (1 + torch.exp(gate))  # z * sigmoid(z)
    return (silu * (x @ w3.T)) @ w2.T
'''),
    Wrong("llama-answer", "you added the input x to the output", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1.T
    hidden = gate * torch.sigmoid(gate) * (x @ w3.T)
    return x + hidden @ w2.T  # the FFN's residual connection
'''),
    Wrong("llama-answer", "your gate computes z·σ(β·z) with β about 1.7, GELU's sigmoid approximation", '''
def llama_ffn(x, w1, w2, w3):
    gate = x @ w1.T
    swish = gate * torch.sigmoid(1.702 * gate)  # Swish with its usual beta
    return (swish * (x @ w3.T)) @ w2.T
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
    Wrong("top-k-answer", "the kept units carry |h_i|, not h_i", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    top = h.abs().topk(k, dim=-1)
    kept = torch.zeros_like(h).scatter(-1, top.indices, top.values)
    return kept @ w_down
'''),
    Wrong("top-k-answer", "the threshold is shared by the batch", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    threshold = h.abs().topk(k, dim=-1).values.min()  # the k-th largest
    return torch.where(h.abs() >= threshold, h, torch.zeros_like(h)) @ w_down
'''),
    Wrong("top-k-answer", "your gate computes the sigmoid σ(z)", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    gate = torch.sigmoid(x @ w_gate)  # how open each gate is
    h = gate * (x @ w_up)
    idx = h.abs().topk(k, dim=-1).indices
    return (h * torch.zeros_like(h).scatter(-1, idx, 1.0)) @ w_down
'''),
    Wrong("top-k-answer", "the kept units carry the gate SiLU(x W_gate)_i alone", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    gate = a * torch.sigmoid(a)
    h = gate * (x @ w_up)
    keep = torch.zeros_like(h).scatter(-1, h.abs().topk(k, dim=-1).indices, 1.0)
    return (gate * keep) @ w_down  # the kept slots
'''),
    Wrong("top-k-answer", "the kept units are rescaled", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    keep = torch.zeros_like(h).scatter(-1, h.abs().topk(k, dim=-1).indices, 1.0)
    kept = h * keep
    # keep the total contribution the same
    kept = kept * h.abs().sum(-1, keepdim=True) / kept.abs().sum(-1, keepdim=True)
    return kept @ w_down
'''),
    Wrong("top-k-answer", "ranked by |h_i| times the size of their row of W_down", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    contribution = h.abs() * w_down.norm(dim=-1)  # |h_i| times the size of its value vector
    keep = torch.zeros_like(h).scatter(-1, contribution.topk(k, dim=-1).indices, 1.0)
    return (h * keep) @ w_down
'''),
    Wrong("top-k-answer", "ranked by the gate's pre-activation |x W_gate|", '''
def top_k_swiglu(x, w_gate, w_up, w_down, k):
    a = x @ w_gate
    h = a * torch.sigmoid(a) * (x @ w_up)
    idx = a.abs().topk(k, dim=-1).indices  # the most strongly driven gates
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
    Wrong("geglu-answer", "the second term of GELU′ is φ(a); it is a φ(a)", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf + pdf)  # d/da [a Φ(a)]
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            (gate * u).T @ g)
'''),
    Wrong("geglu-answer", "the second term of GELU′ has the wrong sign", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf - a * pdf)
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            (gate * u).T @ g)
'''),
    Wrong("geglu-answer", "is divided by the number of positions", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    n = xs.shape[0]
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf + a * pdf)
    grad_x = (grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape)
    return grad_x, xs.T @ grad_a / n, xs.T @ grad_u / n, (gate * u).T @ g / n  # averaged over positions
'''),
    Wrong("geglu-answer", "∂L/∂u multiplies by GELU′(a)", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gelu_prime = cdf + a * pdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gelu_prime, grad_h * u * gelu_prime
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            ((a * cdf) * u).T @ g)
'''),
    Wrong("geglu-answer", "grad_w_down uses u alone", '''
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
            u.T @ g)  # y = h @ w_down, and h's up part is u
'''),
    Wrong("geglu-answer", "the √2 inside erf is missing", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    cdf = 0.5 * (1 + torch.erf(a))  # Φ(a)
    pdf = torch.exp(-a**2 / 2) / math.sqrt(2 * math.pi)
    gate = a * cdf
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * (cdf + a * pdf)
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            (gate * u).T @ g)
'''),
    Wrong("geglu-answer", "your GELU is the tanh approximation", '''
def geglu_backward(x, w_gate, w_up, w_down, grad_out):
    D = x.shape[-1]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    c = math.sqrt(2 / math.pi)
    t = torch.tanh(c * (a + 0.044715 * a**3))
    gate = 0.5 * a * (1 + t)  # GELU as Gemma computes it
    gelu_prime = 0.5 * (1 + t) + 0.5 * a * (1 - t**2) * c * (1 + 3 * 0.044715 * a**2)
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * gate, grad_h * u * gelu_prime
    return ((grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape), xs.T @ grad_a, xs.T @ grad_u,
            (gate * u).T @ g)
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
    Wrong("predictions-answer", "not the smallest one at least 8D/3", '''
def predictions():
    # Llama 3's rule: 8D/3, times the 1.3 multiplier, up to a multiple of 256
    return {"hidden_width": 9216, "ffn_params": 3 * 2560 * 9216, "ffn_share": 0.7297,
            "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "that is attention's share", '''
def predictions():
    return {"hidden_width": 6912, "ffn_params": 53_084_160, "ffn_share": 1 - 0.6694,
            "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "that counts 3 D × D attention matrices", '''
def predictions():
    ffn = 3 * 2560 * 6912
    return {"hidden_width": 6912, "ffn_params": ffn, "ffn_share": ffn / (3 * 2560**2 + ffn),
            "gate_output": -1.0758}
'''),
    Wrong("predictions-answer", "the sigmoid of −1 (about a quarter), not of +1", '''
def predictions():
    silu = -1 * (1 / (1 + math.exp(-1)))  # z · σ(z) at z = -1
    return {"hidden_width": 6912, "ffn_params": 53_084_160, "ffn_share": 0.6694,
            "gate_output": silu * 4}
'''),
    Wrong("predictions-answer", "that gate is GELU(z) = z·Φ(z)", '''
def predictions():
    gelu = -1 * 0.5 * (1 + math.erf(-1 / math.sqrt(2)))
    return {"hidden_width": 6912, "ffn_params": 53_084_160, "ffn_share": 0.6694,
            "gate_output": gelu * 4}
'''),
    Wrong("predictions-answer", "that gate is tanh(z)", '''
def predictions():
    return {"hidden_width": 6912, "ffn_params": 53_084_160, "ffn_share": 0.6694,
            "gate_output": math.tanh(-1) * 4}  # the gate squashes its input
'''),
    Wrong("predictions-answer", "that is 3 · D · F with a hidden width F for which this holds: that rounds down", '''
def predictions():
    width = 6656  # 8D/3 rounded to a multiple of 256
    ffn = 3 * 2560 * width
    return {"hidden_width": 6912, "ffn_params": ffn, "ffn_share": 0.6694, "gate_output": -1.0758}
'''),
]

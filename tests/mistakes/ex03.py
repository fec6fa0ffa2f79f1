"""Realistic wrong answers for exercise 03 (attention)."""

from . import Wrong

ASSIGNMENT = "03_attention"

WRONG = [
    # --- Task 1: sliding_window_attention -------------------------------------------------------------
    Wrong("sliding-answer", "window + 1 keys", '''
def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    i = torch.arange(S - T, S)[:, None]
    j = torch.arange(S)[None, :]
    allowed = (j <= i) & (i - j <= window)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v
'''),
    Wrong("sliding-answer", "window + 1 keys", '''
def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    ones = torch.ones(T, S, dtype=torch.bool)
    allowed = ones.tril(S - T).triu(S - T - window)  # band below the diagonal
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v
'''),
    Wrong("sliding-answer", "a band on both sides", '''
def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    q_pos = torch.arange(S - T, S)
    k_pos = torch.arange(S)
    allowed = (q_pos[:, None] - k_pos[None, :]).abs() < window
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v
'''),
    Wrong("sliding-answer", "the queries are placed at positions 0", '''
def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    q_pos = torch.arange(T)
    k_pos = torch.arange(S)
    diff = q_pos[:, None] - k_pos[None, :]
    allowed = (diff >= 0) & (diff < window)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v
'''),
    Wrong("sliding-answer", "blocked scores were set to 0", '''
def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    diff = torch.arange(S - T, S)[:, None] - torch.arange(S)[None, :]
    allowed = (diff >= 0) & (diff < window)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores * allowed  # zero out what the window blocks
    return torch.softmax(scores, dim=-1) @ v
'''),
    Wrong("sliding-answer", "the mask is applied after the softmax", '''
def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    diff = torch.arange(S - T, S)[:, None] - torch.arange(S)[None, :]
    allowed = (diff >= 0) & (diff < window)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return (weights * allowed) @ v
'''),
    Wrong("sliding-answer", "the scores are not scaled", '''
def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    diff = torch.arange(S - T, S)[:, None] - torch.arange(S)[None, :]
    allowed = (diff >= 0) & (diff < window)
    scores = (q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
'''),
    Wrong("sliding-answer", "the mask is inverted", '''
def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    diff = torch.arange(S - T, S)[:, None] - torch.arange(S)[None, :]
    mask = (diff >= 0) & (diff < window)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
'''),
    Wrong("sliding-answer", "scaled_dot_product_attention", '''
import torch.nn.functional as F

def sliding_window_attention(q, k, v, window):
    T, S = q.shape[-2], k.shape[-2]
    diff = torch.arange(S - T, S)[:, None] - torch.arange(S)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(diff >= 0) & (diff < window))
'''),
    # --- Task 2: gqa_forward (find and fix) -----------------------------------------------------------
    Wrong("gqa-answer", "still the given version's grouping", '''
def gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads
    q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2)
    q = q.contiguous().view(B, n_rep, n_kv_heads, T, d_h)  # contiguous before view
    k, v = k.unsqueeze(1), v.unsqueeze(1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    pos = torch.arange(T, device=x.device)
    scores = scores.masked_fill(pos[:, None] < pos[None, :], float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    out = out.reshape(B, n_heads, T, d_h).transpose(1, 2)
    return out.reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("gqa-answer", "still the given version's grouping", '''
def gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads
    q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat(1, n_rep, 1, 1)
    v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat(1, n_rep, 1, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("gqa-answer", "the shapes do not broadcast", '''
def gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads
    q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2)
    q = q.view(B, n_kv_heads, n_rep, T, d_h)  # fixed: group first
    k, v = k.unsqueeze(1), v.unsqueeze(1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    pos = torch.arange(T, device=x.device)
    scores = scores.masked_fill(pos[:, None] < pos[None, :], float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    out = out.reshape(B, n_heads, T, d_h).transpose(1, 2)
    return out.reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("gqa-answer", "the heads are merged wrongly", '''
def gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads
    q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("gqa-answer", "the causal mask is missing", '''
def gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads
    q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_h), dim=-1)
    return (weights @ v).transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("gqa-answer", "1/√d_model", '''
def gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, D = x.shape
    d_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads
    q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("gqa-answer", "blocks the wrong side", '''
def gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads
    q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    pos = torch.arange(T)
    scores = scores.masked_fill(pos[:, None] > pos[None, :], float("-inf"))  # block the past?
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("gqa-answer", "w_o is used without transposing", '''
def gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads
    q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_rep, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o
'''),
    # --- Task 3: attention_backward -------------------------------------------------------------------
    Wrong("backward-answer", "missing its second term", '''
def attention_backward(q, k, v, grad_out, mask=None):
    B, H_kv, S, _ = k.shape
    n_rep = q.shape[1] // H_kv
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = q.shape[-1] ** -0.5
    scores = q @ k_all.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_s = p * (grad_out @ v_all.transpose(-2, -1))  # chain rule through softmax
    grad_q = grad_s @ k_all * scale
    grad_k = grad_s.transpose(-2, -1) @ q * scale
    return grad_q, grad_k.view(B, H_kv, n_rep, S, -1).sum(2), grad_v.view(B, H_kv, n_rep, S, -1).sum(2)
'''),
    Wrong("backward-answer", "SUMS the contributions", '''
def attention_backward(q, k, v, grad_out, mask=None):
    n_rep = q.shape[1] // k.shape[1]
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k_all.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ v_all.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))
    return grad_s @ k_all * scale, grad_s.transpose(-2, -1) @ q * scale, grad_v
'''),
    Wrong("backward-answer", "Your sum groups heads h, h + n_kv_heads", '''
def attention_backward(q, k, v, grad_out, mask=None):
    B, H_kv, S, _ = k.shape
    n_rep = q.shape[1] // H_kv
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k_all.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ v_all.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))
    grad_k = grad_s.transpose(-2, -1) @ q * scale
    grad_k = grad_k.view(B, n_rep, H_kv, S, -1).sum(1)
    grad_v = grad_v.view(B, n_rep, H_kv, S, -1).sum(1)
    return grad_s @ k_all * scale, grad_k, grad_v
'''),
    Wrong("backward-answer", "not their mean", '''
def attention_backward(q, k, v, grad_out, mask=None):
    B, H_kv, S, _ = k.shape
    n_rep = q.shape[1] // H_kv
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k_all.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ v_all.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))
    grad_k = grad_s.transpose(-2, -1) @ q * scale
    return (grad_s @ k_all * scale, grad_k.view(B, H_kv, n_rep, S, -1).mean(2),
            grad_v.view(B, H_kv, n_rep, S, -1).mean(2))
'''),
    Wrong("backward-answer", "the scale 1/√d_k is missing from grad_q and grad_k", '''
def attention_backward(q, k, v, grad_out, mask=None):
    B, H_kv, S, _ = k.shape
    n_rep = q.shape[1] // H_kv
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ v_all.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))
    grad_q = grad_s @ k_all
    grad_k = (grad_s.transpose(-2, -1) @ q).view(B, H_kv, n_rep, S, -1).sum(2)
    return grad_q, grad_k, grad_v.view(B, H_kv, n_rep, S, -1).sum(2)
'''),
    Wrong("backward-answer", "grad_v should be Pᵀ dO", '''
def attention_backward(q, k, v, grad_out, mask=None):
    B, H_kv, S, _ = k.shape
    n_rep = q.shape[1] // H_kv
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k_all.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    grad_v = p @ grad_out  # O = P V, so dV = P dO
    grad_p = grad_out @ v_all.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))
    grad_k = grad_s.transpose(-2, -1) @ q * scale
    return (grad_s @ k_all * scale, grad_k.view(B, H_kv, n_rep, S, -1).sum(2),
            grad_v.view(B, H_kv, n_rep, S, -1).sum(2))
'''),
    Wrong("backward-answer", "runs over the wrong dimension", '''
def attention_backward(q, k, v, grad_out, mask=None):
    B, H_kv, S, _ = k.shape
    n_rep = q.shape[1] // H_kv
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k_all.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ v_all.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(-2, keepdim=True))
    grad_k = grad_s.transpose(-2, -1) @ q * scale
    return (grad_s @ k_all * scale, grad_k.view(B, H_kv, n_rep, S, -1).sum(2),
            grad_v.view(B, H_kv, n_rep, S, -1).sum(2))
'''),
    Wrong("backward-answer", "the mask is missing from the forward computation", '''
def attention_backward(q, k, v, grad_out, mask=None):
    B, H_kv, S, _ = k.shape
    n_rep = q.shape[1] // H_kv
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.softmax(q @ k_all.transpose(-2, -1) * scale, -1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ v_all.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))
    if mask is not None:
        grad_s = grad_s * mask  # no gradient to blocked scores
    grad_k = grad_s.transpose(-2, -1) @ q * scale
    return (grad_s @ k_all * scale, grad_k.view(B, H_kv, n_rep, S, -1).sum(2),
            grad_v.view(B, H_kv, n_rep, S, -1).sum(2))
'''),
    Wrong("backward-answer", "autograd", '''
def attention_backward(q, k, v, grad_out, mask=None):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    n_rep = q.shape[1] // k.shape[1]
    scores = q @ k.repeat_interleave(n_rep, 1).transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, -1) @ v.repeat_interleave(n_rep, 1)
    return torch.autograd.grad(out, (q, k, v), grad_out)
'''),
    Wrong("backward-answer", "should be float32", '''
def attention_backward(q, k, v, grad_out, mask=None):
    q, k, v, grad_out = q.double(), k.double(), v.double(), grad_out.double()  # precision
    B, H_kv, S, _ = k.shape
    n_rep = q.shape[1] // H_kv
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k_all.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    grad_v = p.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ v_all.transpose(-2, -1)
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))
    grad_k = grad_s.transpose(-2, -1) @ q * scale
    return (grad_s @ k_all * scale, grad_k.view(B, H_kv, n_rep, S, -1).sum(2),
            grad_v.view(B, H_kv, n_rep, S, -1).sum(2))
'''),
    # --- Task 4: predictions --------------------------------------------------------------------------
    Wrong("predictions-answer", "the tiled layout of .repeat", '''
def predictions():
    return {"kv_head": 0, "score_std": 16.0, "causal_uniform_weight": 0.2, "score_gib": 8.0}
'''),
    Wrong("predictions-answer", "divide the head index by n_rep", '''
def predictions():
    return {"kv_head": 3, "score_std": 16.0, "causal_uniform_weight": 0.2, "score_gib": 8.0}
'''),
    Wrong("predictions-answer", "the standard deviation is its square root", '''
def predictions():
    return {"kv_head": 2, "score_std": 256, "causal_uniform_weight": 0.2, "score_gib": 8.0}
'''),
    Wrong("predictions-answer", "AFTER dividing by √d_k", '''
def predictions():
    return {"kv_head": 2, "score_std": 1.0, "causal_uniform_weight": 0.2, "score_gib": 8.0}
'''),
    Wrong("predictions-answer", "see only keys 0 … 4", '''
def predictions():
    return {"kv_head": 2, "score_std": 16.0, "causal_uniform_weight": 0.1, "score_gib": 8.0}
'''),
    Wrong("predictions-answer", "may attend to its own position", '''
def predictions():
    return {"kv_head": 2, "score_std": 16.0, "causal_uniform_weight": 1 / 4, "score_gib": 8.0}
'''),
    Wrong("predictions-answer", "a GiB is 2³⁰ bytes", '''
def predictions():
    return {"kv_head": 2, "score_std": 16.0, "causal_uniform_weight": 0.2,
            "score_gib": 32 * 8192 * 8192 * 4 / 1e9}
'''),
    Wrong("predictions-answer", "float32 takes 4 bytes", '''
def predictions():
    return {"kv_head": 2, "score_std": 16.0, "causal_uniform_weight": 0.2, "score_gib": 4.0}
'''),
]

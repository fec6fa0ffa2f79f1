"""Realistic wrong answers for exercise 13 (the speedrun)."""

from . import Wrong

ASSIGNMENT = "13_speedrun"

WRONG = [
    # --- Task 1: newton_schulz ------------------------------------------------------------------------
    Wrong("newton-schulz-answer", "the Gram matrix is on the wrong side", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + X @ (b * A + c * A @ A)
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "the values blow up", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    for _ in range(steps):  # the iteration drives every singular value to 1
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.T
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "Dividing by the largest entry", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / (X.abs().max() + 1e-7)  # entries in [-1, 1]
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.T
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "the coefficients are in the wrong order", '''
def newton_schulz(G, steps=5):
    c, b, a = 3.4445, -4.7750, 2.0315  # highest power first
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / (torch.linalg.matrix_norm(X) + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.T
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "one step too many", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / (torch.linalg.matrix_norm(X) + 1e-7)
    for _ in range(steps + 1):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.T
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "one step too few", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / (torch.linalg.matrix_norm(X) + 1e-7)
    step = 1
    while step < steps:
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
        step += 1
    if transposed:
        X = X.T
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "returned a float32 tensor", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / (torch.linalg.matrix_norm(X) + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if transposed else X
'''),
    Wrong("newton-schulz-answer", "not transposed back", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    if X.shape[0] > X.shape[1]:
        X = X.T  # keep the Gram matrix small
    X = X / (torch.linalg.matrix_norm(X) + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "classic cubic iteration", '''
def newton_schulz(G, steps=5):
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / (torch.linalg.matrix_norm(X) + 1e-7)
    for _ in range(steps):
        X = 1.5 * X - 0.5 * (X @ X.T) @ X
    if transposed:
        X = X.T
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "a zero G", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / X.norm()
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.T
    return X.to(G.dtype)
'''),
    Wrong("newton-schulz-answer", "the iteration must run in float32", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G / (torch.linalg.matrix_norm(G) + 1e-7)  # stays in G's dtype
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.T
    return X
'''),
    Wrong("newton-schulz-answer", "this is the exact U Vᵀ", '''
def newton_schulz(G, steps=5):
    U, S, Vh = torch.linalg.svd(G.float(), full_matrices=False)
    return (U @ Vh).to(G.dtype)  # exactly orthogonal, no iteration needed
'''),
    Wrong("newton-schulz-answer", "which does the work this task asks you to do", '''
from course_lib.training import newton_schulz as _course_ns

def newton_schulz(G, steps=5):
    return _course_ns(G, steps)
'''),
    Wrong("newton-schulz-answer", "divided by its spectral norm", '''
def newton_schulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float()
    transposed = X.shape[0] > X.shape[1]
    if transposed:
        X = X.T
    X = X / (torch.linalg.matrix_norm(X, ord=2) + 1e-7)  # largest singular value 1
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.T
    return X.to(G.dtype)
'''),
    # --- Task 2: muon_step ----------------------------------------------------------------------------
    Wrong("muon-step-answer", "this is still what the given version computes", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    momentum = beta * momentum + (1 - beta) * grad
    update = orthogonalize(d) * 0.2 * math.sqrt(min(rows, cols))
    weight = weight * (1 - weight_decay) - lr * update
    return weight, momentum
'''),
    Wrong("muon-step-answer", "two of the given version's bugs remain", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum = beta * momentum + (1 - beta) * grad  # fixed: update the buffer first
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    update = orthogonalize(d) * 0.2 * math.sqrt(min(rows, cols))
    weight = weight * (1 - weight_decay) - lr * update
    return weight, momentum
'''),
    Wrong("muon-step-answer", "as it was BEFORE this step's gradient entered it", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    new_momentum = beta * momentum + (1 - beta) * grad
    update = orthogonalize(d) * 0.2 * math.sqrt(max(rows, cols))
    weight = weight * (1 - lr * weight_decay) - lr * update
    return weight, new_momentum
'''),
    Wrong("muon-step-answer", "the scale uses √min(rows, cols)", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    momentum = beta * momentum + (1 - beta) * grad
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    scale = 0.2 * math.sqrt(min(weight.shape))
    weight = weight * (1 - lr * weight_decay) - lr * scale * orthogonalize(d)
    return weight, momentum
'''),
    Wrong("muon-step-answer", "not multiplied by the learning rate", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum = beta * momentum + (1 - beta) * grad
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    update = orthogonalize(d) * 0.2 * math.sqrt(max(rows, cols))
    weight = weight * (1 - weight_decay) - lr * update
    return weight, momentum
'''),
    Wrong("muon-step-answer", "the weight decay is applied after the update", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum = beta * momentum + (1 - beta) * grad
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    update = orthogonalize(d) * 0.2 * math.sqrt(max(rows, cols))
    weight = weight - lr * update
    weight = weight * (1 - lr * weight_decay)
    return weight, momentum
'''),
    Wrong("muon-step-answer", "the momentum's weights are exchanged", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum = torch.lerp(momentum, grad, beta)
    d = torch.lerp(grad, momentum, beta) if nesterov else momentum
    update = orthogonalize(d) * 0.2 * math.sqrt(max(rows, cols))
    weight = weight * (1 - lr * weight_decay) - lr * update
    return weight, momentum
'''),
    Wrong("muon-step-answer", "used even when nesterov=False", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum = beta * momentum + (1 - beta) * grad
    d = beta * momentum + (1 - beta) * grad  # Nesterov's look-ahead
    update = orthogonalize(d) * 0.2 * math.sqrt(max(rows, cols))
    weight = weight * (1 - lr * weight_decay) - lr * update
    return weight, momentum
'''),
    Wrong("muon-step-answer", "changed its input `momentum` in place", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum.mul_(beta).add_(grad, alpha=1 - beta)
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    update = orthogonalize(d) * 0.2 * math.sqrt(max(rows, cols))
    weight = weight * (1 - lr * weight_decay) - lr * update
    return weight, momentum.clone()
'''),
    Wrong("muon-step-answer", "the Nesterov direction is g + β m", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum = beta * momentum + (1 - beta) * grad
    d = grad + beta * momentum if nesterov else momentum  # as in torch.optim.SGD
    update = orthogonalize(d) * 0.2 * math.sqrt(max(rows, cols))
    weight = weight * (1 - lr * weight_decay) - lr * update
    return weight, momentum
'''),
    Wrong("muon-step-answer", "which does the work this task asks you to do", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    p = torch.nn.Parameter(weight.clone())
    opt = Muon([p], lr=lr, momentum=beta, nesterov=nesterov, weight_decay=weight_decay)
    opt.state[p]["momentum_buffer"] = momentum.clone()
    p.grad = grad.clone()
    opt.step()
    return p.detach().clone(), opt.state[p]["momentum_buffer"].clone()
'''),
    Wrong("muon-step-answer", "the weight decay is added to the gradient", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    grad = grad + weight_decay * weight  # weight decay
    momentum = beta * momentum + (1 - beta) * grad
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    update = orthogonalize(d) * 0.2 * math.sqrt(max(rows, cols))
    return weight - lr * update, momentum
'''),
    Wrong("muon-step-answer", "the scale misses its factor 0.2", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum = beta * momentum + (1 - beta) * grad
    d = beta * momentum + (1 - beta) * grad if nesterov else momentum
    update = orthogonalize(d) * math.sqrt(max(rows, cols))
    weight = weight * (1 - lr * weight_decay) - lr * update
    return weight, momentum
'''),
    Wrong("muon-step-answer", "the gradient itself is orthogonalised", '''
def muon_step(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    rows, cols = weight.shape
    momentum = beta * momentum + (1 - beta) * grad
    update = orthogonalize(grad) * 0.2 * math.sqrt(max(rows, cols))
    weight = weight * (1 - lr * weight_decay) - lr * update
    return weight, momentum
'''),
    # --- Task 3: qk_norm_attention --------------------------------------------------------------------
    Wrong("qk-norm-attention-answer", "q and k are not normalised", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = q.view(B, T, n_heads, d_h).transpose(1, 2)
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "only the queries are normalised", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = q.view(B, T, n_heads, d_h).transpose(1, 2)
    q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps)
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "the values are normalised too", '''
def rms(t, eps):
    return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps)

def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    heads = (x @ w_qkv.T).view(B, T, n_heads + 2 * n_kv_heads, d_h).transpose(1, 2)
    heads = rms(heads, eps)  # every head of q, k and v
    q, k, v = heads.split([n_heads, n_kv_heads, n_kv_heads], dim=1)
    k = k.repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "normalised over all the heads' features at once", '''
def rms(t, eps):
    return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps)

def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q, k = rms(q, eps), rms(k, eps)  # normalise the projections
    q = q.view(B, T, n_heads, d_h).transpose(1, 2)
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2).repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "ε is added outside the square root", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = q.view(B, T, n_heads, d_h).transpose(1, 2)
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    q = q / (q.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    k = k / (k.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    k = k.repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "the mean is subtracted first", '''
def norm(t, eps):
    t = t - t.mean(-1, keepdim=True)
    return t / torch.sqrt(t.var(-1, unbiased=False, keepdim=True) + eps)

def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = norm(q.view(B, T, n_heads, d_h), eps).transpose(1, 2)
    k = norm(k.view(B, T, n_kv_heads, d_h), eps).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    k = k.repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "which does the work this task asks you to do", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = F.rms_norm(q.view(B, T, n_heads, d_h), (d_h,), eps=eps).transpose(1, 2)
    k = F.rms_norm(k.view(B, T, n_kv_heads, d_h), (d_h,), eps=eps).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    k = k.repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "the scores are scaled twice", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = q.view(B, T, n_heads, d_h).transpose(1, 2) / math.sqrt(d_h)  # scaled query
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    q = q / torch.sqrt(q.pow(2).mean(-1, keepdim=True) + eps) / math.sqrt(d_h)
    k = k / torch.sqrt(k.pow(2).mean(-1, keepdim=True) + eps)
    k = k.repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "divided by their length", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = q.view(B, T, n_heads, d_h).transpose(1, 2)
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + eps)  # unit vectors
    k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + eps)
    k = k.repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "across the heads", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = q.view(B, T, n_heads, d_h).transpose(1, 2)  # (B, H, T, D_h)
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    q = q / torch.sqrt(q.pow(2).mean(1, keepdim=True) + eps)
    k = k / torch.sqrt(k.pow(2).mean(1, keepdim=True) + eps)
    k = k.repeat_interleave(n_heads // n_kv_heads, 1)
    v = v.repeat_interleave(n_heads // n_kv_heads, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "which does the work this task asks you to do", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = q.view(B, T, n_heads, d_h).transpose(1, 2)
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    q = q / torch.sqrt(q.pow(2).mean(-1, keepdim=True) + eps)
    k = k / torch.sqrt(k.pow(2).mean(-1, keepdim=True) + eps)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    Wrong("qk-norm-attention-answer", "the kv heads tiled", '''
def qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    B, T, _ = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = (x @ w_qkv.T).split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h], -1)
    q = q.view(B, T, n_heads, d_h).transpose(1, 2)
    k = k.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    q = q / torch.sqrt(q.pow(2).mean(-1, keepdim=True) + eps)
    k = k / torch.sqrt(k.pow(2).mean(-1, keepdim=True) + eps)
    k = k.repeat(1, n_heads // n_kv_heads, 1, 1)
    v = v.repeat(1, n_heads // n_kv_heads, 1, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, n_heads * d_h) @ w_o.T
'''),
    # --- Task 4: softcap ------------------------------------------------------------------------------
    Wrong("softcap-answer", "c · tanh(z) saturates", '''
def softcap(logits, cap):
    return cap * torch.tanh(logits)
'''),
    Wrong("softcap-answer", "clamped to [−cap, cap]", '''
def softcap(logits, cap):
    return logits.clamp(-cap, cap)
'''),
    Wrong("softcap-answer", "not multiplied back by the cap", '''
def softcap(logits, cap):
    return torch.tanh(logits / cap)
'''),
    Wrong("softcap-answer", "a temperature", '''
def softcap(logits, cap):
    return logits / cap  # the cap scales the logits down
'''),
    Wrong("softcap-answer", "only the logits beyond the cap are changed", '''
def softcap(logits, cap):
    capped = cap * torch.tanh(logits / cap)
    return torch.where(logits.abs() > cap, capped, logits)
'''),
    Wrong("softcap-answer", "changed its input `logits` in place", '''
def softcap(logits, cap):
    logits /= cap
    return cap * logits.tanh_()
'''),
    Wrong("softcap-answer", "returned a float64 tensor", '''
def softcap(logits, cap):
    return cap * torch.tanh(logits.double() / cap)  # in double precision
'''),
    Wrong("softcap-answer", "multiplied by the cap inside the tanh", '''
def softcap(logits, cap):
    return cap * torch.tanh(cap * logits)
'''),
    Wrong("softcap-answer", "clamped to [−cap, cap]", '''
def softcap(logits, cap):
    return F.hardtanh(logits, -cap, cap)
'''),
    # --- Task 5: lr_wsd -------------------------------------------------------------------------------
    Wrong("lr-wsd-answer", "can start before the warmup has ended", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    cooldown_steps = max(1, round(cooldown * total_steps))
    start = total_steps - cooldown_steps
    if step < start:
        return lr
    return lr + (min_lr - lr) * (step - start) / cooldown_steps
'''),
    Wrong("lr-wsd-answer", "rounded down", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    start = max(warmup_steps, total_steps - max(1, int(cooldown * total_steps)))
    if step < start:
        return lr
    return lr + (min_lr - lr) * (step - start) / (total_steps - start)
'''),
    Wrong("lr-wsd-answer", "decays to 0 instead of min_lr", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    start = max(warmup_steps, total_steps - max(1, round(cooldown * total_steps)))
    if step < start:
        return lr
    return lr * (total_steps - step) / (total_steps - start)
'''),
    Wrong("lr-wsd-answer", "follows a cosine", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    start = max(warmup_steps, total_steps - max(1, round(cooldown * total_steps)))
    if step < start:
        return lr
    progress = (step - start) / (total_steps - start)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))
'''),
    Wrong("lr-wsd-answer", "reaches min_lr one step early", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    last = total_steps - 1  # the last step of the run
    if step >= last:
        return min_lr
    start = max(warmup_steps, total_steps - max(1, round(cooldown * total_steps)))
    if step < start:
        return lr
    return lr + (min_lr - lr) * (step - start) / (last - start)
'''),
    Wrong("lr-wsd-answer", "the warmup starts at 0", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * step / warmup_steps
    if step >= total_steps:
        return min_lr
    start = max(warmup_steps, total_steps - max(1, round(cooldown * total_steps)))
    if step < start:
        return lr
    return lr + (min_lr - lr) * (step - start) / (total_steps - start)
'''),
    Wrong("lr-wsd-answer", "there is no stable phase", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return lr + (min_lr - lr) * progress
'''),
    Wrong("lr-wsd-answer", "which does the work this task asks you to do", '''
from course_lib.training import lr_at

def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    return lr_at(step, lr=lr, min_lr=min_lr, warmup_steps=warmup_steps,
                 total_steps=total_steps, cooldown=cooldown)
'''),
    Wrong("lr-wsd-answer", "keeps falling below min_lr", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    start = max(warmup_steps, total_steps - max(1, round(cooldown * total_steps)))
    if step < start:
        return lr
    return lr + (min_lr - lr) * (step - start) / (total_steps - start)
'''),
    Wrong("lr-wsd-answer", "rounded up", '''
def lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    start = max(warmup_steps, total_steps - math.ceil(cooldown * total_steps))
    if step < start:
        return lr
    return lr + (min_lr - lr) * (step - start) / (total_steps - start)
'''),
    # --- Task 6: predictions --------------------------------------------------------------------------
    Wrong("predictions-answer", "`ns_at_one`: the quintic is not built to keep 1 fixed", '''
def predictions():
    return {"ns_at_one": 1.0, "muon_rms": 0.2, "qk_max_score": 8.0,
            "capped_logit": 28.92, "wsd_lr": 0.011}
'''),
    Wrong("predictions-answer", "the scale uses the LARGER side", '''
def predictions():
    return {"ns_at_one": 0.701, "muon_rms": 0.1, "qk_max_score": 8.0,
            "capped_logit": 28.92, "wsd_lr": 0.011}
'''),
    Wrong("predictions-answer", "not 1 long", '''
def predictions():
    return {"ns_at_one": 0.701, "muon_rms": 0.2, "qk_max_score": 1.0,
            "capped_logit": 28.92, "wsd_lr": 0.011}
'''),
    Wrong("predictions-answer", "soft-capping never reaches the cap", '''
def predictions():
    return {"ns_at_one": 0.701, "muon_rms": 0.2, "qk_max_score": 8.0,
            "capped_logit": 30.0, "wsd_lr": 0.011}
'''),
    Wrong("predictions-answer", "inside the cool-down", '''
def predictions():
    return {"ns_at_one": 0.701, "muon_rms": 0.2, "qk_max_score": 8.0,
            "capped_logit": 28.92, "wsd_lr": 0.02}
'''),
    Wrong("predictions-answer", "falls to min_lr, not to 0", '''
def predictions():
    return {"ns_at_one": 0.701, "muon_rms": 0.2, "qk_max_score": 8.0,
            "capped_logit": 28.92, "wsd_lr": 0.01}
'''),
    Wrong("predictions-answer", "still divided by √D_h", '''
def predictions():
    return {"ns_at_one": 0.701, "muon_rms": 0.2, "qk_max_score": 64.0,
            "capped_logit": 28.92, "wsd_lr": 0.011}
'''),
    Wrong("predictions-answer", None, '''
def predictions():
    return {"ns_at_one": 0.701, "muon_rms": 0.2, "qk_max_score": 8.0,
            "capped_logit": 25.0, "wsd_lr": 0.011}
'''),
]

"""Realistic wrong answers for exercise 06 (the residual stream)."""

from . import Wrong

ASSIGNMENT = "06_residual_stream"

_GOOD_PREDICTIONS = '{"paths": 4096, "stream_rms": 5 ** 0.5, "post_norm_gradient": 3 ** -6, "concat_width": 16896}'

WRONG = [
    # --- Task 1: deep_norm_residual -----------------------------------------------------------------------
    Wrong("deep-norm-answer", "α multiplies the sublayer's output", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    s = x + alpha * sublayer(x)
    mu = s.mean(-1, keepdim=True)
    var = ((s - mu) ** 2).mean(-1, keepdim=True)
    return (s - mu) / torch.sqrt(var + eps) * weight + bias
'''),
    Wrong("deep-norm-answer", "α is missing", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    s = x + sublayer(x)  # post-norm
    mu = s.mean(-1, keepdim=True)
    var = ((s - mu) ** 2).mean(-1, keepdim=True)
    return (s - mu) / torch.sqrt(var + eps) * weight + bias
'''),
    Wrong("deep-norm-answer", "α is applied after the norm", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    s = x + sublayer(x)
    mu = s.mean(-1, keepdim=True)
    var = ((s - mu) ** 2).mean(-1, keepdim=True)
    return alpha * ((s - mu) / torch.sqrt(var + eps) * weight + bias)
'''),
    Wrong("deep-norm-answer", "this is pre-norm", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    normed = (x - mu) / torch.sqrt(var + eps) * weight + bias
    return alpha * x + sublayer(normed)
'''),
    Wrong("deep-norm-answer", "the sublayer reads a normalized copy of x", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    def layer_norm(v):
        mu = v.mean(-1, keepdim=True)
        var = ((v - mu) ** 2).mean(-1, keepdim=True)
        return (v - mu) / torch.sqrt(var + eps) * weight + bias
    return layer_norm(alpha * x + sublayer(layer_norm(x)))
'''),
    Wrong("deep-norm-answer", "the sublayer reads α · x", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    x = alpha * x  # up-weight the stream
    s = x + sublayer(x)
    mu = s.mean(-1, keepdim=True)
    var = ((s - mu) ** 2).mean(-1, keepdim=True)
    return (s - mu) / torch.sqrt(var + eps) * weight + bias
'''),
    Wrong("deep-norm-answer", "Bessel's correction", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    s = alpha * x + sublayer(x)
    return (s - s.mean(-1, keepdim=True)) / torch.sqrt(s.var(-1, keepdim=True) + eps) * weight + bias
'''),
    Wrong("deep-norm-answer", "ε is outside the square root", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    s = alpha * x + sublayer(x)
    mu = s.mean(-1, keepdim=True)
    sigma = s.std(-1, keepdim=True, unbiased=False)
    return (s - mu) / (sigma + eps) * weight + bias
'''),
    Wrong("deep-norm-answer", "the mean is not subtracted", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    s = alpha * x + sublayer(x)
    return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * weight + bias
'''),
    Wrong("deep-norm-answer", "the bias β is not added", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    s = alpha * x + sublayer(x)
    mu = s.mean(-1, keepdim=True)
    var = ((s - mu) ** 2).mean(-1, keepdim=True)
    return (s - mu) / torch.sqrt(var + eps) * weight
'''),
    Wrong("deep-norm-answer", "changed its input `x` in place", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    update = sublayer(x)
    x *= alpha
    s = x + update
    mu = s.mean(-1, keepdim=True)
    var = ((s - mu) ** 2).mean(-1, keepdim=True)
    return (s - mu) / torch.sqrt(var + eps) * weight + bias
'''),
    Wrong("deep-norm-answer", "the layer_norm operation", '''
def deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5):
    s = alpha * x + sublayer(x)
    return torch.nn.functional.layer_norm(s, (x.shape[-1],), weight, bias, eps)
'''),
    # --- Task 2: pre_norm_residual_backward --------------------------------------------------------------
    Wrong("backward-answer", "no identity term", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * (grad_out @ proj.T)
    grad_x = (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    d = x.shape[-1]
    return grad_x, (x_hat * weight).reshape(-1, d).T @ grad_out.reshape(-1, d)
'''),
    Wrong("backward-answer", "instead of its transpose", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * (grad_out @ proj)
    grad_x = grad_out + (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    d = x.shape[-1]
    return grad_x, (x_hat * weight).reshape(-1, d).T @ grad_out.reshape(-1, d)
'''),
    Wrong("backward-answer", "treated as a constant", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    grad_x = grad_out + weight * (grad_out @ proj.T) / r
    d = x.shape[-1]
    u = x / r * weight
    return grad_x, u.reshape(-1, d).T @ grad_out.reshape(-1, d)
'''),
    Wrong("backward-answer", "average over the D features", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * (grad_out @ proj.T)
    grad_x = grad_out + (wg - x_hat * (x_hat * wg).sum(-1, keepdim=True)) / r
    d = x.shape[-1]
    return grad_x, (x_hat * weight).reshape(-1, d).T @ grad_out.reshape(-1, d)
'''),
    Wrong("backward-answer", "J instead of Jᵀ", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    grad_u = grad_out @ proj.T
    grad_x = grad_out + weight * (grad_u - x_hat * (x_hat * grad_u).mean(-1, keepdim=True)) / r
    d = x.shape[-1]
    return grad_x, (x_hat * weight).reshape(-1, d).T @ grad_out.reshape(-1, d)
'''),
    Wrong("backward-answer", "grad_proj is transposed", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * (grad_out @ proj.T)
    grad_x = grad_out + (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    d = x.shape[-1]
    return grad_x, grad_out.reshape(-1, d).T @ (x_hat * weight).reshape(-1, d)
'''),
    Wrong("backward-answer", "grad_proj uses x;", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * (grad_out @ proj.T)
    grad_x = grad_out + (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    d = x.shape[-1]
    return grad_x, x.reshape(-1, d).T @ grad_out.reshape(-1, d)
'''),
    Wrong("backward-answer", "sums the contributions of all of them", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * (grad_out @ proj.T)
    grad_x = grad_out + (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    u = x_hat * weight
    return grad_x, u.unsqueeze(-1) * grad_out.unsqueeze(-2)  # the outer product u ⊗ g
'''),
    Wrong("backward-answer", "r must include ε", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    r = x.pow(2).mean(-1, keepdim=True).sqrt()
    x_hat = x / r
    wg = weight * (grad_out @ proj.T)
    grad_x = grad_out + (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    d = x.shape[-1]
    return grad_x, (x_hat * weight).reshape(-1, d).T @ grad_out.reshape(-1, d)
'''),
    Wrong("backward-answer", "uses `Tensor.backward`", '''
def pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6):
    x = x.detach().requires_grad_()
    proj = proj.detach().requires_grad_()
    u = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    (x + u @ proj).backward(grad_out)
    return x.grad, proj.grad
'''),
    # --- Task 3: residual_scaled_init_ (find and fix) ---------------------------------------------------
    Wrong("init-answer", "the bug is not fixed yet", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for name, param in model.named_parameters():
        if name.endswith(("w_o.weight", "w_down.weight")):
            nn.init.normal_(param, mean=0.0, std=std / math.sqrt(2 * n_layers))
        elif param.dim() == 2:
            nn.init.normal_(param, mean=0.0, std=std)
        elif name.endswith("bias"):
            nn.init.zeros_(param)
        else:  # the norms' gains
            nn.init.zeros_(param)
'''),
    Wrong("init-answer", "wrong spread", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for name, param in model.named_parameters():
        if name.endswith(("w_o.weight", "w_down.weight")):
            nn.init.normal_(param, mean=0.0, std=std / math.sqrt(2 * n_layers))
        elif param.dim() == 2:
            nn.init.normal_(param, mean=0.0, std=std)
        else:  # a norm must start at 1, so vectors start at 1
            nn.init.ones_(param)
'''),
    Wrong("init-answer", "counts blocks, 1/√N", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for name, param in model.named_parameters():
        if "norm" in name:
            continue
        if name.endswith(("w_o.weight", "w_down.weight")):
            nn.init.normal_(param, mean=0.0, std=std / math.sqrt(n_layers))
        elif param.dim() == 2:
            nn.init.normal_(param, mean=0.0, std=std)
        else:
            nn.init.zeros_(param)
'''),
    Wrong("init-answer", "divided the standard deviation by 2N", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            scaled = name.split(".")[-1] in ("w_o", "w_down")
            nn.init.normal_(module.weight, 0.0, std / (2 * n_layers) if scaled else std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)
'''),
    Wrong("init-answer", "the embedding keeps PyTorch's default", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            scaled = name.split(".")[-1] in ("w_o", "w_down")
            nn.init.normal_(module.weight, 0.0, std / math.sqrt(2 * n_layers) if scaled else std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
'''),
    Wrong("init-answer", "biases keep PyTorch's default", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for name, param in model.named_parameters():
        if name.endswith(("w_o.weight", "w_down.weight")):
            nn.init.normal_(param, mean=0.0, std=std / math.sqrt(2 * n_layers))
        elif param.dim() == 2:
            nn.init.normal_(param, mean=0.0, std=std)
'''),
    Wrong("init-answer", "the `std` argument is ignored", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            sigma = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("w_o", "w_down")) else 0.02
            nn.init.normal_(module.weight, 0.0, sigma)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, 0.02)
'''),
    Wrong("init-answer", "you scaled every linear layer", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, std / math.sqrt(2 * n_layers))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)
'''),
    Wrong("init-answer", "re-initialised the norms' gains", '''
def residual_scaled_init_(model, n_layers, std=0.02):
    for name, param in model.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(param)
        elif name.endswith(("w_o.weight", "w_down.weight")):
            nn.init.normal_(param, 0.0, std / math.sqrt(2 * n_layers))
        else:
            nn.init.normal_(param, 0.0, std)
'''),
    Wrong("init-answer", "uses `course_lib.init.gpt2_init_`", '''
from course_lib import init as course_init

def residual_scaled_init_(model, n_layers, std=0.02):
    course_init.gpt2_init_(model, n_layers, std=std)
'''),
    # --- Task 4: predictions ---------------------------------------------------------------------------
    Wrong("predictions-answer", "count branches, not blocks", f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "paths": 2 ** 6}}
'''),
    Wrong("predictions-answer", "RMS values do not add", f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "stream_rms": 1 + 16 * 0.5}}
'''),
    Wrong("predictions-answer", "count the writes", f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "stream_rms": (1 + 8 * 0.25) ** 0.5}}
'''),
    Wrong("predictions-answer", "does not keep growing", f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "post_norm_gradient": 3.0 ** -(1 + 2 + 3 + 4 + 5 + 6)}}
'''),
    Wrong("predictions-answer", "identity also passes through the norm", f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "post_norm_gradient": 1.0}}
'''),
    Wrong("predictions-answer", "each block appends two outputs", f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "concat_width": 512 * 17}}
'''),
    Wrong("predictions-answer", "the embeddings are the first part", f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "concat_width": 512 * 32}}
'''),
    Wrong("predictions-answer", "should be a number", f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "paths": "2^12"}}
'''),
    Wrong("predictions-answer", None, f'''
def predictions():
    return {{**{_GOOD_PREDICTIONS}, "stream_rms": 2.0}}
'''),
]

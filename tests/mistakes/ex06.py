"""Realistic wrong answers for exercise 06 (the residual stream)."""

from . import Wrong

ASSIGNMENT = "06_residual_stream"

_GOOD_PREDICTIONS = '{"paths": 4096, "stream_rms": 5 ** 0.5, "post_norm_gradient": 3 ** -6, "concat_width": 16896}'

WRONG = [
    # --- Task 1: pre_norm_residual ----------------------------------------------------------------------
    Wrong("pre-norm-answer", "this is post-norm", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    s = x + sublayer(x)
    return s / torch.sqrt(s.pow(2).mean(dim=-1, keepdim=True) + eps) * weight
'''),
    Wrong("pre-norm-answer", "the residual adds the normalized input", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return x + sublayer(x)
'''),
    Wrong("pre-norm-answer", "the residual connection is missing", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return sublayer(normed)
'''),
    Wrong("pre-norm-answer", "ε goes inside the square root", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    return x + sublayer(x / (rms + eps) * weight)
'''),
    Wrong("pre-norm-answer", "not over the whole tensor", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    rms = torch.sqrt(torch.mean(x ** 2) + eps)
    return x + sublayer(weight * x / rms)
'''),
    Wrong("pre-norm-answer", "the gain `weight` is not applied", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    return x + sublayer(x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))
'''),
    Wrong("pre-norm-answer", "changed its input `x` in place", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    update = sublayer(x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
    x += update
    return x
'''),
    Wrong("pre-norm-answer", "keepdim", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    rms = torch.sqrt(x.pow(2).mean(-1) + eps)
    return x + sublayer(x / rms * weight)
'''),
    Wrong("pre-norm-answer", "does not subtract the mean", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    centred = x - x.mean(-1, keepdim=True)
    return x + sublayer(centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight)
'''),
    Wrong("pre-norm-answer", "you normalized the output as well", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    def norm(v):
        return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps) * weight
    return norm(x + sublayer(norm(x)))
'''),
    Wrong("pre-norm-answer", "should be float32", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    x64 = x.double()  # the statistics in double precision, to be safe
    normed = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    return x64 + sublayer(normed.to(x.dtype))
'''),
    Wrong("pre-norm-answer", "the rms_norm operation", '''
def pre_norm_residual(x, sublayer, weight, eps=1e-6):
    return x + sublayer(torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps))
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

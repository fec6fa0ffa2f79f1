"""Realistic wrong answers for exercise 05 (normalization)."""

from . import Wrong

ASSIGNMENT = "05_normalization"

WRONG = [
    # --- Task 1: layer_norm -------------------------------------------------------------------------
    Wrong("layer-norm-answer", "Bessel", '''
def layer_norm(x, weight, bias, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * weight + bias
'''),
    Wrong("layer-norm-answer", "ε is outside the square root", '''
def layer_norm(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    sigma = ((x - mu) ** 2).mean(-1, keepdim=True).sqrt()
    return (x - mu) / (sigma + eps) * weight + bias
'''),
    Wrong("layer-norm-answer", "ε is missing", '''
def layer_norm(x, weight, bias, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    return centred / centred.pow(2).mean(-1, keepdim=True).sqrt() * weight + bias
'''),
    Wrong("layer-norm-answer", "BatchNorm", '''
def layer_norm(x, weight, bias, eps=1e-5):
    mu = x.mean(0, keepdim=True)
    var = ((x - mu) ** 2).mean(0, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias
'''),
    Wrong("layer-norm-answer", "the mean is not subtracted", '''
def layer_norm(x, weight, bias, eps=1e-5):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight + bias
'''),
    Wrong("layer-norm-answer", "the square root is missing", '''
def layer_norm(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / (var + eps) * weight + bias
'''),
    Wrong("layer-norm-answer", "the bias is added before scaling", '''
def layer_norm(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return ((x - mu) / torch.sqrt(var + eps) + bias) * weight
'''),
    Wrong("layer-norm-answer", "should be float32", '''
def layer_norm(x, weight, bias, eps=1e-5):
    x = x.double()  # more precision can't hurt
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight.double() + bias.double()
'''),
    Wrong("layer-norm-answer", "changed its input `x` in place", '''
def layer_norm(x, weight, bias, eps=1e-5):
    x -= x.mean(-1, keepdim=True)
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight + bias
'''),
    Wrong("layer-norm-answer", "keepdim", '''
def layer_norm(x, weight, bias, eps=1e-5):
    mu = x.mean(-1)
    var = ((x - mu) ** 2).mean(-1)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias
'''),
    Wrong("layer-norm-answer", "delegates", '''
def layer_norm(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
'''),
    Wrong("layer-norm-answer", "delegates", '''
from torch.nn.functional import group_norm as _normalize_groups

def layer_norm(x, weight, bias, eps=1e-5):
    flat = x.reshape(-1, x.shape[-1])
    out = _normalize_groups(flat, 1, eps=eps).reshape(x.shape)
    return out * weight + bias
'''),
    # --- Task 2: rms_norm_backward ------------------------------------------------------------------
    Wrong("backward-answer", "J g instead of Jᵀ g", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    grad_x = weight * (grad_out - x_hat * (x_hat * grad_out).mean(-1, keepdim=True)) / r
    return grad_x, (grad_out * x_hat).reshape(-1, x.shape[-1]).sum(0)
'''),
    Wrong("backward-answer", "r must include ε", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    r = x.pow(2).mean(-1, keepdim=True).sqrt()
    x_hat = x / r
    wg = weight * grad_out
    grad_x = (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    return grad_x, (grad_out * x_hat).reshape(-1, x.shape[-1]).sum(0)
'''),
    Wrong("backward-answer", "only the direct term", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * grad_out / r, (grad_out * x / r).reshape(-1, x.shape[-1]).sum(0)
'''),
    Wrong("backward-answer", "average over the D features", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * grad_out
    grad_x = (wg - x_hat * (x_hat * wg).sum(-1, keepdim=True)) / r
    return grad_x, (grad_out * x_hat).reshape(-1, x.shape[-1]).sum(0)
'''),
    Wrong("backward-answer", "wrong sign", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * grad_out
    grad_x = (wg + x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    return grad_x, (grad_out * x_hat).reshape(-1, x.shape[-1]).sum(0)
'''),
    Wrong("backward-answer", "grad_weight uses x", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * grad_out
    grad_x = (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    return grad_x, (grad_out * x).reshape(-1, x.shape[-1]).sum(0)
'''),
    Wrong("backward-answer", "sums the contributions of all of them", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    wg = weight * grad_out
    grad_x = (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) / r
    return grad_x, (grad_out * x_hat).sum(0)
'''),
    Wrong("backward-answer", "Tensor.backward", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    x = x.detach().requires_grad_()
    w = weight.detach().requires_grad_()
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    y.backward(grad_out)
    return x.grad, w.grad
'''),
    Wrong("backward-answer", "torch.func", '''
def rms_norm_backward(x, weight, grad_out, eps=1e-6):
    def f(x_, w_):
        return x_ / torch.sqrt(x_.pow(2).mean(-1, keepdim=True) + eps) * w_
    _, pullback = torch.func.vjp(f, x, weight)
    return pullback(grad_out)
'''),
    # --- Task 3: merge_moments (find and fix the bug) ------------------------------------------------
    Wrong("merge-answer", "the bug is not fixed yet", '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = count_a + count_b
    mean = (count_a * mean_a + count_b * mean_b) / count
    var = (count_a * var_a + count_b * var_b) / count
    return count, mean, var
'''),
    Wrong("merge-answer", "as if the groups had the same size", '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = count_a + count_b
    mean = (mean_a + mean_b) / 2
    delta = mean_b - mean_a
    var = (count_a * var_a + count_b * var_b + delta ** 2 * count_a * count_b / count) / count
    return count, mean, var
'''),
    Wrong("merge-answer", "not its square", '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = count_a + count_b
    delta = mean_b - mean_a
    mean = mean_a + delta * count_b / count
    var = (count_a * var_a + count_b * var_b + delta * count_a * count_b / count) / count
    return count, mean, var
'''),
    Wrong("merge-answer", "weighted as if the groups had the same size", '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = count_a + count_b
    mean = (count_a * mean_a + count_b * mean_b) / count
    var = (count_a * var_a + count_b * var_b) / count + (mean_b - mean_a) ** 2 / 4
    return count, mean, var
'''),
    Wrong("merge-answer", "n − 1", '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = count_a + count_b
    delta = mean_b - mean_a
    mean = mean_a + delta * count_b / count
    m2 = count_a * var_a + count_b * var_b + delta ** 2 * count_a * count_b / count
    return count, mean, m2 / (count - 1)
'''),
    Wrong("merge-answer", "its OWN count", '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = count_a + count_b
    mean = (count_b * mean_a + count_a * mean_b) / count
    delta = mean_b - mean_a
    var = (count_a * var_a + count_b * var_b + delta ** 2 * count_a * count_b / count) / count
    return count, mean, var
'''),
    Wrong("merge-answer", "as an int", '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = float(count_a + count_b)
    delta = mean_b - mean_a
    mean = mean_a + delta * count_b / count
    var = (count_a * var_a + count_b * var_b + delta ** 2 * count_a * count_b / count) / count
    return count, mean, var
'''),
    Wrong("merge-answer", "changed its input `mean_a` in place", '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = count_a + count_b
    delta = mean_b - mean_a
    var = (count_a * var_a + count_b * var_b + delta ** 2 * count_a * count_b / count) / count
    mean_a += delta * count_b / count
    return count, mean_a, var
'''),
    Wrong("merge-answer", None, '''
def merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b):
    count = count_a + count_b
    mean = (count_a * mean_a + count_b * mean_b) / count
    var = (count_a * var_a + count_b * var_b) / count + (mean_b - mean_a) ** 2
    return count, mean, var
'''),
    # --- Task 4: predictions -------------------------------------------------------------------------
    Wrong("predictions-answer", "does not fit (float16 stops at 65,504)", '''
def predictions():
    return {"fp16_outlier": 1 / math.sqrt((300**2 + 63) / 64),
            "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": 0.0, "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
    Wrong("predictions-answer", "RMS of the WHOLE vector", '''
def predictions():
    return {"fp16_outlier": 1.0, "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": 0.0, "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
    Wrong("predictions-answer", "nothing here is 0/0", '''
def predictions():
    return {"fp16_outlier": float("nan"), "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": 0.0, "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
    Wrong("predictions-answer", "with the statistics in float32, 90,000 is an ordinary number", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 0.0, "layer_norm_of_constant": 0.0,
            "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
    Wrong("predictions-answer", "the one large entry dominates", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1.0, "layer_norm_of_constant": 0.0,
            "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
    Wrong("predictions-answer", "the MEAN of the squares", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1 / math.sqrt(300**2 + 63),
            "layer_norm_of_constant": 0.0, "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
    Wrong("predictions-answer", "subtracts the mean first", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": 1.0, "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
    Wrong("predictions-answer", "ε keeps the division finite", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": float("nan"), "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
    Wrong("predictions-answer", "the output has RMS 1/√2", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": 0.0, "half_rms_input": math.sqrt(1e-6)}
'''),
    Wrong("predictions-answer", "the OUTSIDE convention", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": 0.0, "half_rms_input": 1e-6}
'''),
    Wrong("predictions-answer", "the rms² in the denominator matters", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": 0.0, "half_rms_input": math.sqrt(1e-6) / 2}
'''),
    Wrong("predictions-answer", "that is the mean square", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": 0.0, "half_rms_input": 1e-6 / 3}
'''),
    Wrong("predictions-answer", "still empty", '''
def predictions():
    return {"fp16_outlier": 0.0, "fp16_outlier_upcast": 1 / math.sqrt((300**2 + 63) / 64),
            "layer_norm_of_constant": ..., "half_rms_input": math.sqrt(1e-6 / 3)}
'''),
]

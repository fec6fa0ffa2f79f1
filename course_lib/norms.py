"""Normalization layers: LayerNorm and RMSNorm, as functions and modules, with their
Jacobians.

Conventions
-----------
* x has shape (..., D): every position is normalized on its own, over its D
  features — never over the batch (that would be BatchNorm).
* ε goes **inside** the square root — sqrt(mean(x²) + ε), sqrt(var(x) + ε) — as in
  PyTorch, Hugging Face and the Llama reference code. The variance is the biased
  one (divide by D).
* Statistics are computed in float32 at least: bfloat16 and float16 inputs are
  upcast and the result is cast back to the input's dtype before the gain is
  applied (as Llama and Hugging Face's ``LlamaRMSNorm`` do); float64 stays float64.
* The gain is called ``weight`` and the shift ``bias``, as in ``nn.LayerNorm``,
  ``nn.RMSNorm`` and ``LlamaRMSNorm``, so their state dicts load unchanged.
* A Jacobian has shape (..., D, D) with ``J[..., i, j] = ∂y_i / ∂x_j``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._autograd import apply_function

__all__ = [
    "layer_norm",
    "rms_norm",
    "rms_norm_jacobian",
    "layer_norm_jacobian",
    "rms_norm_backward",
    "merge_moments",
    "LayerNorm",
    "RMSNorm",
]


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a number, got {type(eps).__name__}")
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"eps ({eps}) must be non-negative and finite")
    return float(eps)


def _check_x(x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must have shape (..., D) with D ≥ 1, got {tuple(x.shape)}")
    return x


def _check_vector(v, name: str, dim: int) -> torch.Tensor | None:
    if v is None:
        return None
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{name} must be a tensor or None, got {type(v).__name__}")
    if v.shape != (dim,):
        raise ValueError(
            f"{name} must have shape (D,) = ({dim},) to match x, got {tuple(v.shape)}"
        )
    return v


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)  # bf16/fp16 -> float32


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """RMSNorm(x) = x / sqrt(mean(x²) + ε) · γ  (Zhang & Sennrich, 2019).

    Over the last dimension; no mean subtraction and no bias. ``weight`` is γ,
    shape (D,); None means γ = 1.
    """
    x = _check_x(x)
    weight = _check_vector(weight, "weight", x.shape[-1])
    eps = _check_eps(eps)
    x32 = x.to(_compute_dtype(x))
    ms = x32.pow(2).mean(-1, keepdim=True)  # (..., 1): mean(x²) loses precision in bf16
    y = (x32 * torch.rsqrt(ms + eps)).type_as(x)  # (..., D)
    return y if weight is None else y * weight


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm(x) = (x − μ) / sqrt(σ² + ε) · γ + β  (Ba, Kiros & Hinton, 2016).

    μ and σ² are the mean and the biased variance (divide by D) of each position's
    D features. ``weight`` is γ and ``bias`` is β, shape (D,); None means γ = 1,
    β = 0.
    """
    x = _check_x(x)
    weight = _check_vector(weight, "weight", x.shape[-1])
    bias = _check_vector(bias, "bias", x.shape[-1])
    eps = _check_eps(eps)
    x32 = x.to(_compute_dtype(x))
    mu = x32.mean(-1, keepdim=True)  # (..., 1)
    var = (x32 - mu).pow(2).mean(-1, keepdim=True)  # (..., 1): biased, divide by D
    y = ((x32 - mu) * torch.rsqrt(var + eps)).type_as(x)  # (..., D)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def rms_norm_jacobian(
    x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """J[..., i, j] = ∂y_i/∂x_j = γ_i / r · (δ_ij − x̂_i x̂_j / D) for y = RMSNorm(x):

    J = diag(γ) · (1/r) · (I − x̂ᵀx̂ / D), x̂ᵀx̂ the outer product of the row x̂ with
    itself, r = sqrt(mean(x²) + ε) and x̂ = x / r. Exact for every ε ≥ 0 provided r
    includes ε (x̂ is then the norm's output before γ). Returns shape (..., D, D); row i
    is scaled by γ_i. For rows, backpropagation's product is ∂L/∂x = (∂L/∂y) J.
    """
    x = _check_x(x)
    d = x.shape[-1]
    weight = _check_vector(weight, "weight", d)
    eps = _check_eps(eps)
    x = x.to(_compute_dtype(x))
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
    x_hat = x / r  # (..., D)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)  # (D, D)
    outer = x_hat.unsqueeze(-1) * x_hat.unsqueeze(-2)  # (..., D, D): x̂ᵀx̂, x̂ a row
    jac = (eye - outer / d) / r.unsqueeze(-1)  # (..., D, D)
    if weight is not None:
        jac = weight.to(x.dtype).unsqueeze(-1) * jac  # (D, 1) * (..., D, D): row i·γ_i
    return jac


def layer_norm_jacobian(
    x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """∂LayerNorm(x)/∂x = diag(γ) · (1/s) · (I − 1ᵀ1/D − x̂ᵀx̂/D), 1 the row of ones,

    with s = sqrt(σ² + ε) and x̂ = (x − μ)/s: the RMSNorm Jacobian (of the centred
    x) plus the −1ᵀ1/D that mean subtraction adds. Shape (..., D, D), with
    J[..., i, j] = ∂y_i/∂x_j.
    """
    x = _check_x(x)
    d = x.shape[-1]
    weight = _check_vector(weight, "weight", d)
    eps = _check_eps(eps)
    x = x.to(_compute_dtype(x))
    centred = x - x.mean(-1, keepdim=True)  # (..., D)
    s = torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
    x_hat = centred / s  # (..., D)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)  # (D, D)
    outer = x_hat.unsqueeze(-1) * x_hat.unsqueeze(-2)  # (..., D, D)
    jac = (eye - 1.0 / d - outer / d) / s.unsqueeze(-1)  # (..., D, D)
    if weight is not None:
        jac = weight.to(x.dtype).unsqueeze(-1) * jac  # row i times γ_i
    return jac


def rms_norm_backward(
    x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward pass of y = x / r · γ, r = sqrt(mean(x²) + ε), given g = ∂L/∂y:

        ∂L/∂x = (γ ⊙ g) / r − x̂ · mean(x̂ ⊙ γ ⊙ g) / r,   x̂ = x / r   (= g J, rows)
        ∂L/∂γ = Σ over all leading positions of g ⊙ x̂

    x and grad_out have shape (..., D), weight (D,). Returns (grad_x, grad_weight) in the dtypes
    of x and weight; computed in float32 at least, like the forward.
    """
    x = _check_x(x)
    d = x.shape[-1]
    weight = _check_vector(weight, "weight", d)
    if not isinstance(grad_out, torch.Tensor) or grad_out.shape != x.shape:
        raise ValueError(f"grad_out must be a tensor of x's shape {tuple(x.shape)}, "
                         f"got {tuple(getattr(grad_out, 'shape', ()))}")
    eps = _check_eps(eps)
    x32 = x.to(_compute_dtype(x))
    inv_rms = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1): 1/r
    grad_x, grad_weight = _rms_norm_grads(x32 * inv_rms, inv_rms, weight, grad_out)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype)


def _rms_norm_grads(x_hat: torch.Tensor, inv_rms: torch.Tensor, weight: torch.Tensor,
                    grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rms_norm_backward`'s formula from x̂ = x/r (..., D) and 1/r (..., 1), in x̂'s
    dtype: what :func:`rms_norm_backward` recomputes from x, and what ``RMSNorm``'s fused
    path kept from its forward pass."""
    g32 = grad_out.to(x_hat.dtype)  # (..., D)
    wg = weight.to(x_hat.dtype) * g32  # (..., D): γ ⊙ g
    grad_x = (wg - x_hat * (x_hat * wg).mean(-1, keepdim=True)) * inv_rms  # (..., D)
    grad_weight = (g32 * x_hat).reshape(-1, x_hat.shape[-1]).sum(0)  # (D,): every position
    return grad_x, grad_weight


def merge_moments(
    count_a: int, mean_a: torch.Tensor, var_a: torch.Tensor,
    count_b: int, mean_b: torch.Tensor, var_b: torch.Tensor,
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """The count, mean and (biased) variance of two groups of numbers together, from each group's own
    (Chan, Golub & LeVeque, 1979) — how a fused LayerNorm kernel combines the statistics of chunks:

        n = n_a + n_b,   δ = μ_b − μ_a,   μ = μ_a + δ · n_b / n,
        σ² = (n_a σ_a² + n_b σ_b² + δ² · n_a n_b / n) / n

    The last term is the spread of the two means: the variance of the whole is not the average of
    the variances. Means and variances are tensors of one shape (one statistic per row).
    """
    for name, n in (("count_a", count_a), ("count_b", count_b)):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"{name} ({n!r}) must be a positive int")
    count = count_a + count_b
    delta = mean_b - mean_a  # (...)
    mean = mean_a + delta * (count_b / count)  # (...)
    m2 = count_a * var_a + count_b * var_b + delta.pow(2) * (count_a * count_b / count)  # (...)
    return count, mean, m2 / count


def _check_dim(dim) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if dim <= 0:
        raise ValueError(f"dim ({dim}) must be positive")
    return dim


def _check_last_dim(x, dim: int) -> None:
    _check_x(x)
    if x.shape[-1] != dim:
        raise ValueError(f"x's last dimension ({x.shape[-1]}) must equal dim ({dim})")


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / sqrt(mean(x²) + ε) · γ  (Zhang & Sennrich, 2019); γ starts at 1.

    Computed in float32 and cast back before the gain, like ``LlamaRMSNorm``;
    agrees with ``nn.RMSNorm(dim, eps=eps)`` (tests check both).

    ``forward(x, fused=True)`` computes the same numbers but differentiates them by
    hand, with :func:`rms_norm_backward`'s formula, from x/rms and 1/rms kept in the
    forward pass; ``fused=False`` runs the explicit :func:`rms_norm`, every step
    recorded by autograd, which also keeps x. The model's ``implementation="reference"``
    path takes the explicit one.
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.dim = _check_dim(dim)
        self.eps = _check_eps(eps)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, *, fused: bool = True) -> torch.Tensor:
        _check_last_dim(x, self.dim)
        if not isinstance(fused, bool):
            raise TypeError(f"fused must be True or False, got {fused!r}")
        # without gradients to compute, rms_norm gives the same numbers at less cost
        wanted = x.requires_grad or self.weight.requires_grad
        if fused and wanted and torch.is_grad_enabled():
            # _RMSNormFunction.apply(x, weight, eps) minus apply's Python wrapper
            y, _, _ = apply_function(_RMSNormFunction, x, self.weight, self.eps)
            return y  # (..., D)
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class _RMSNormFunction(torch.autograd.Function):
    """y = x̂ · γ with x̂ = x / r, r = sqrt(mean(x²) + ε): the numbers of :func:`rms_norm`,
    bit for bit, with the backward pass of :func:`rms_norm_backward`

        ∂L/∂x = (u − x̂ · mean(x̂ ⊙ u)) / r,   u = γ ⊙ ∂L/∂y;   ∂L/∂γ = Σ ∂L/∂y ⊙ x̂,

    computed from the x̂ and 1/r of the forward pass (float32 at least), so x itself is
    not kept. Autograd's graph of :func:`rms_norm` keeps x as well and replays each of
    its operations, which is slower (the README's benchmark section has the numbers).
    Returns (y, x̂, 1/r); only y is differentiable.
    """

    generate_vmap_rule = True  # torch.func.vmap runs forward and backward batched

    @staticmethod
    def forward(x, weight, eps):
        x32 = x.to(_compute_dtype(x))
        inv_rms = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1): 1/r
        x_hat = x32 * inv_rms  # (..., D)
        return x_hat.type_as(x) * weight, x_hat, inv_rms

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, _ = inputs
        _, x_hat, inv_rms = output
        ctx.mark_non_differentiable(x_hat, inv_rms)
        ctx.x_dtype = x.dtype
        ctx.save_for_backward(x_hat, inv_rms, weight)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad, _grad_x_hat, _grad_inv_rms):
        x_hat, inv_rms, weight = ctx.saved_tensors
        grad_x, grad_weight = _rms_norm_grads(x_hat, inv_rms, weight, grad)
        return grad_x.to(ctx.x_dtype), grad_weight.to(weight.dtype), None


class LayerNorm(nn.Module):
    """LayerNorm(x) = (x − μ) / sqrt(σ² + ε) · γ + β  (Ba, Kiros & Hinton, 2016).

    γ starts at 1 and β at 0; ``bias=False`` drops β. Agrees with
    ``nn.LayerNorm(dim, eps=eps, bias=bias)``.

    ``forward(x, fused=True)`` runs PyTorch's fused kernel (``F.layer_norm``, as
    GPT-2, nanoGPT and Hugging Face do), which keeps only x, μ and 1/σ for backward;
    ``fused=False`` runs the explicit :func:`layer_norm`, every step visible to
    autograd. The model's ``implementation="reference"`` path takes the explicit one.
    """

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.dim = _check_dim(dim)
        self.eps = _check_eps(eps)
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be a bool, got {type(bias).__name__}")
        self.weight = nn.Parameter(torch.ones(dim))
        if bias:
            self.bias = nn.Parameter(torch.zeros(dim))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor, *, fused: bool = True) -> torch.Tensor:
        _check_last_dim(x, self.dim)
        if not isinstance(fused, bool):
            raise TypeError(f"fused must be True or False, got {fused!r}")
        if fused:
            return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}"

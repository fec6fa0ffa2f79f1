"""Checkers for exercise 05 (normalization): LayerNorm, RMSNorm and the RMSNorm Jacobian."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import norms as ref
from ._core import Case, Forbidden, Mistake, check_function, describe

__all__ = ["check_layer_norm", "check_rms_norm", "check_rms_norm_jacobian"]

# float32 students must pass on float64 inputs too; the mistakes below differ by far more.
_RTOL, _ATOL = 1e-4, 1e-5

_REFERENCES = [
    Forbidden(ref.layer_norm, "course_lib.norms.layer_norm"),
    Forbidden(ref.rms_norm, "course_lib.norms.rms_norm"),
    Forbidden(ref.rms_norm_jacobian, "course_lib.norms.rms_norm_jacobian"),
    Forbidden(ref.layer_norm_jacobian, "course_lib.norms.layer_norm_jacobian"),
    Forbidden(ref.LayerNorm.forward, "course_lib.norms.LayerNorm"),
    Forbidden(ref.RMSNorm.forward, "course_lib.norms.RMSNorm"),
]


def _check(student, reference, cases, **kwargs) -> None:
    """check_function, with the course's tolerances for float32/float64 cases and the dtype's own
    (looser) ones for float16/bfloat16 cases, whose results are rounded to a few digits."""
    half = (torch.float16, torch.bfloat16)
    full_cases = [c for c in cases if c.args[0].dtype not in half]
    half_cases = [c for c in cases if c.args[0].dtype in half]
    check_function(student, reference, full_cases, rtol=_RTOL, atol=_ATOL, **kwargs)
    if half_cases:
        check_function(student, reference, half_cases, **kwargs)


def _randn(gen, shape, dtype=torch.float64, scale=1.0, shift=0.0):
    return (shift + scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)


def _gain(gen, d, dtype=torch.float64):
    return (1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)).to(dtype)


# --- LayerNorm ----------------------------------------------------------------------------------

def _ln(x, weight, bias, eps, *, unbiased=False, eps_mode="inside", centre=True, dim=-1):
    mu = x.mean(dim, keepdim=True) if centre else torch.zeros_like(x)
    var = x.var(dim, keepdim=True, unbiased=unbiased) if centre else x.pow(2).mean(dim, keepdim=True)
    if eps_mode == "inside":
        denom = torch.sqrt(var + eps)
    elif eps_mode == "outside":
        denom = torch.sqrt(var) + eps
    else:
        denom = torch.sqrt(var)
    return (x - mu) / denom * weight + bias


def check_layer_norm(layer_norm) -> None:
    """Check ``layer_norm(x, weight, bias, eps=1e-5)`` = (x − μ)/sqrt(σ² + ε) · weight + bias over
    the last dimension, σ² the biased variance."""
    gen = torch.Generator().manual_seed(501)
    x_hand = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    cases = [Case("the vector (1, 2, 3, 4) with weight 1 and bias 0 (float64)",
                  (x_hand, torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)), {"eps": 1e-5})]
    for shape, dtype, scale, shift, eps, note in [
        ((4, 16), torch.float64, 2.0, 1.0, 1e-5, ""),
        ((2, 5, 32), torch.float32, 3.0, 0.0, 1e-5, ""),
        ((3, 24), torch.float64, 5.0, 100.0, 1e-5, " with a large mean"),
        ((6, 3), torch.float64, 1.0, 0.5, 1e-5, ""),
        ((4, 8), torch.float64, 1e-3, 0.0, 1e-5, " with variance smaller than eps"),
        ((5, 6), torch.float64, 1.0, 0.0, 0.1, ", eps = 0.1"),
        ((1, 12), torch.float64, 1.0, 0.0, 1e-5, " (a batch of one)"),
    ]:
        x = _randn(gen, shape, dtype, scale, shift)
        weight, bias = _gain(gen, shape[-1], dtype), _randn(gen, shape[-1], dtype, 0.5)
        cases.append(Case(f"x: {describe(x)}{note}, random weight and bias", (x, weight, bias), {"eps": eps}))

    def swapped(x, weight, bias, eps=1e-5):
        return _ln(x, bias, weight, eps)

    mistakes = [
        Mistake("the variance has Bessel's correction (divides by D − 1), which torch.var and torch.std use "
                "by default. LayerNorm divides by D: pass unbiased=False (or correction=0), or use .mean().",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, unbiased=True)),
        Mistake("ε is outside the square root. It goes inside: (x − μ) / sqrt(σ² + ε), as in PyTorch; "
                "the difference shows when the variance is small.",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, eps_mode="outside")),
        Mistake("ε is missing: divide by sqrt(σ² + ε). It matters when the variance is small.",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, eps_mode="none")),
        Mistake("the statistics are taken over the first (batch) dimension — that is BatchNorm. LayerNorm "
                "normalises each position over its features, the last dimension.",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, dim=0)),
        Mistake("the mean is not subtracted (that is RMSNorm). LayerNorm centres first: x − mean(x).",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, centre=False)),
        Mistake("weight and bias are swapped: scale by weight (γ), then add bias (β).", swapped),
        Mistake("the bias β is not added.", lambda x, w, b, eps=1e-5: _ln(x, w, torch.zeros_like(b), eps)),
        Mistake("the weight γ is not applied.", lambda x, w, b, eps=1e-5: _ln(x, torch.ones_like(w), b, eps)),
    ]
    forbidden = _REFERENCES + [
        Forbidden(F.layer_norm, "torch.nn.functional.layer_norm"),
        Forbidden(torch.layer_norm, "torch.layer_norm"),
        Forbidden(torch.native_layer_norm, "torch.native_layer_norm"),
        Forbidden(nn.LayerNorm.forward, "torch.nn.LayerNorm"),
        Forbidden(F.group_norm, "torch.nn.functional.group_norm"),
        Forbidden(F.instance_norm, "torch.nn.functional.instance_norm"),
        Forbidden(F.batch_norm, "torch.nn.functional.batch_norm"),
    ]
    _check(layer_norm, ref.layer_norm, cases, task="layer_norm", mistakes=mistakes, forbidden=forbidden)


# --- RMSNorm ------------------------------------------------------------------------------------

def _rms(x, weight, eps, *, eps_mode="inside", reduce="mean", dim=-1, sqrt=True, upcast=True):
    xc = x.to(torch.promote_types(x.dtype, torch.float32)) if upcast else x
    if reduce == "mean":
        ms = xc.pow(2).mean(dim, keepdim=True)
    elif reduce == "sum":
        ms = xc.pow(2).sum(dim, keepdim=True)
    elif reduce == "all":
        ms = xc.pow(2).mean()
    else:  # "std": the standard deviation, as if this were LayerNorm without centring
        ms = xc.var(dim, keepdim=True)
    if not sqrt:
        denom = ms + eps
    elif eps_mode == "inside":
        denom = torch.sqrt(ms + eps)
    elif eps_mode == "outside":
        denom = torch.sqrt(ms) + eps
    else:
        denom = torch.sqrt(ms)
    return (xc / denom).to(x.dtype) * weight


def check_rms_norm(rms_norm) -> None:
    """Check ``rms_norm(x, weight, eps=1e-6)`` = x / sqrt(mean(x²) + ε) · weight over the last
    dimension, computed in float32 for half-precision inputs."""
    gen = torch.Generator().manual_seed(502)
    x_hand = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    cases = [Case("the rows (1, 2) and (3, 4) with weight 1 (float64)", (x_hand, torch.ones(2, dtype=torch.float64)),
                  {"eps": 1e-6})]
    for shape, dtype, scale, shift, eps, note in [
        ((4, 16), torch.float64, 2.0, 0.0, 1e-6, ""),
        ((2, 5, 32), torch.float32, 3.0, 0.0, 1e-6, ""),
        ((3, 24), torch.float64, 1.0, 4.0, 1e-6, " with a non-zero mean"),
        ((6, 3), torch.float64, 1.0, 0.0, 1e-6, ""),
        ((4, 8), torch.float64, 1e-3, 0.0, 1e-6, " with mean(x²) comparable to eps"),
        ((5, 6), torch.float64, 1.0, 0.0, 0.1, ", eps = 0.1"),
        ((3, 64), torch.float16, 300.0, 0.0, 1e-6, " whose entries reach the hundreds"),
        ((2, 4, 16), torch.bfloat16, 2.0, 0.0, 1e-6, ""),
    ]:
        x = _randn(gen, shape, dtype, scale, shift)
        cases.append(Case(f"x: {describe(x)}{note}, random weight", (x, _gain(gen, shape[-1], dtype)), {"eps": eps}))

    mistakes = [  # the upcast mistake first: in float16 several mistakes give the same zeros
        Mistake("half-precision input is not upcast: x² overflows float16 once |x| > 256 (and loses precision "
                "in bfloat16). Compute in float32 — x.float() — and cast the result back with .type_as(x).",
                lambda x, w, eps=1e-6: _rms(x, w, eps, upcast=False)),
        Mistake("ε is outside the square root. It goes inside: x / sqrt(mean(x²) + ε), as in PyTorch and "
                "Llama; the difference shows when mean(x²) is small.",
                lambda x, w, eps=1e-6: _rms(x, w, eps, eps_mode="outside")),
        Mistake("ε is missing: divide by sqrt(mean(x²) + ε). It matters when mean(x²) is small.",
                lambda x, w, eps=1e-6: _rms(x, w, eps, eps_mode="none")),
        Mistake("the mean is subtracted (that is LayerNorm). RMSNorm divides x itself by its root mean square.",
                lambda x, w, eps=1e-6: ref.layer_norm(x, w, None, eps)),
        Mistake("you divided by the standard deviation; RMSNorm divides by sqrt(mean(x²) + ε).",
                lambda x, w, eps=1e-6: _rms(x, w, eps, reduce="std")),
        Mistake("the squares are summed; the root MEAN square divides the sum by D (use .mean).",
                lambda x, w, eps=1e-6: _rms(x, w, eps, reduce="sum")),
        Mistake("the square root is missing: divide by sqrt(mean(x²) + ε), not by mean(x²) + ε.",
                lambda x, w, eps=1e-6: _rms(x, w, eps, sqrt=False)),
        Mistake("the mean is taken over the wrong dimension: each position is normalised over its features, "
                "the last dimension (dim=-1, keepdim=True).", lambda x, w, eps=1e-6: _rms(x, w, eps, dim=0)),
        Mistake("the mean is taken over the whole tensor: each position is normalised on its own, over the "
                "last dimension (dim=-1, keepdim=True).", lambda x, w, eps=1e-6: _rms(x, w, eps, reduce="all")),
        Mistake("the weight γ is not applied.", lambda x, w, eps=1e-6: _rms(x, torch.ones_like(w), eps)),
    ]
    forbidden = _REFERENCES + [
        Forbidden(F.rms_norm, "torch.nn.functional.rms_norm"),
        Forbidden(torch.rms_norm, "torch.rms_norm"),
        Forbidden(nn.RMSNorm.forward, "torch.nn.RMSNorm"),
    ]
    _check(rms_norm, ref.rms_norm, cases, task="rms_norm", mistakes=mistakes, forbidden=forbidden)


# --- the RMSNorm Jacobian -----------------------------------------------------------------------

def _jac(x, weight, eps, *, r_eps=True, eps_outside=False, side="rows", over_d=True, normalised=True,
         identity=True):
    d = x.shape[-1]
    ms = x.pow(2).mean(-1, keepdim=True)
    r = torch.sqrt(ms) + eps if eps_outside else torch.sqrt(ms + eps if r_eps else ms)
    v = x / r if normalised else x
    outer = v.unsqueeze(-1) * v.unsqueeze(-2)
    eye = torch.eye(d, dtype=x.dtype) if identity else torch.zeros(d, d, dtype=x.dtype)
    core = (eye - (outer / d if over_d else outer)) / r.unsqueeze(-1)
    if weight is None or side == "none":
        return core
    return weight.unsqueeze(-1) * core if side == "rows" else core * weight


def check_rms_norm_jacobian(rms_norm_jacobian) -> None:
    """Check ``rms_norm_jacobian(x, weight, eps=1e-6)``: J[..., i, j] = ∂y_i/∂x_j of
    y = x / sqrt(mean(x²) + ε) · weight, shape (..., D, D)."""
    gen = torch.Generator().manual_seed(503)
    cases = [Case("the vector (1, 2, 4) with weight 1 (float64)",
                  (torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64), torch.ones(3, dtype=torch.float64)),
                  {"eps": 1e-6})]
    for shape, dtype, scale, eps, note in [
        ((8,), torch.float64, 1.0, 1e-6, ""),
        ((2, 3, 6), torch.float64, 2.0, 1e-6, ""),
        ((5,), torch.float64, 1e-3, 1e-6, " with mean(x²) comparable to eps"),
        ((4, 7), torch.float64, 1.0, 0.5, ", eps = 0.5"),
        ((6,), torch.float64, 1.0, 0.0, ", eps = 0"),
        ((3, 5), torch.float32, 1.5, 1e-6, ""),
    ]:
        x = _randn(gen, shape, dtype, scale)
        cases.append(Case(f"x: {describe(x)}{note}, random weight", (x, _gain(gen, shape[-1], dtype)), {"eps": eps}))

    mistakes = [
        Mistake("r must include ε: r = sqrt(mean(x²) + ε) and x̂ = x / r. Without ε the formula is only an "
                "approximation, visibly wrong when mean(x²) is small.",
                lambda x, w, eps=1e-6: _jac(x, w, eps, r_eps=False)),
        Mistake("ε is outside the square root: r = sqrt(mean(x²) + ε).",
                lambda x, w, eps=1e-6: _jac(x, w, eps, eps_outside=True)),
        Mistake("the weight scales the columns. y_i = γ_i · x̂_i, so γ_i multiplies ROW i of the Jacobian "
                "(J[i, j] = ∂y_i/∂x_j): weight[:, None] * J.",
                lambda x, w, eps=1e-6: _jac(x, w, eps, side="columns")),
        Mistake("the weight γ is missing: J = diag(γ) (I − x̂ x̂ᵀ / D) / r.",
                lambda x, w, eps=1e-6: _jac(x, w, eps, side="none")),
        Mistake("the outer product must be divided by D: I − x̂ x̂ᵀ / D.",
                lambda x, w, eps=1e-6: _jac(x, w, eps, over_d=False)),
        Mistake("the outer product uses x; it uses the normalised x̂ = x / r.",
                lambda x, w, eps=1e-6: _jac(x, w, eps, normalised=False)),
        Mistake("the identity term is missing: J = diag(γ) (I − x̂ x̂ᵀ / D) / r.",
                lambda x, w, eps=1e-6: _jac(x, w, eps, identity=False)),
    ]
    forbidden = _REFERENCES + [
        Forbidden(torch.autograd.functional.jacobian, "torch.autograd.functional.jacobian"),
        Forbidden(torch.func.jacrev, "torch.func.jacrev"),
        Forbidden(torch.func.jacfwd, "torch.func.jacfwd"),
        Forbidden(torch.func.vjp, "torch.func.vjp"),
        Forbidden(torch.autograd.grad, "torch.autograd.grad"),
        Forbidden(torch.Tensor.backward, "Tensor.backward"),
    ]
    _check(rms_norm_jacobian, ref.rms_norm_jacobian, cases, task="rms_norm_jacobian", mistakes=mistakes,
           forbidden=forbidden)

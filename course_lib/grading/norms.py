"""Checkers for exercise 05 (normalization).

1. ``layer_norm`` — implement LayerNorm from its formula.
2. ``rms_norm_backward`` — derive RMSNorm's backward pass (∂L/∂x and ∂L/∂γ) and check it.
3. ``merge_moments`` — find and fix the bug in a given merge of two groups' statistics.
4. ``predictions`` — predict four numbers before computing them (a function returning a dict).
"""

from __future__ import annotations


import torch

from .. import norms as ref
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, NumberOutput, Task, TensorOutput, TupleOutput, describe

__all__ = ["check_layer_norm", "check_rms_norm_backward", "check_merge_moments", "check_norm_predictions"]


def _randn(gen, shape, dtype=torch.float64, scale=1.0, shift=0.0):
    return (shift + scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)


def _gain(gen, d, dtype=torch.float64):
    return (1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)).to(dtype)


# --- Task 1: LayerNorm ---------------------------------------------------------------------------------

def _ln(x, weight, bias, eps=1e-5, *, unbiased=False, eps_mode="inside", centre=True, dim=-1):
    """LayerNorm with one knob turned: what a solution with that mistake computes."""
    mu = x.mean(dim, keepdim=True) if centre else torch.zeros_like(x)
    var = x.var(dim, keepdim=True, unbiased=unbiased) if centre else x.pow(2).mean(dim, keepdim=True)
    denom = {"inside": lambda: torch.sqrt(var + eps), "outside": lambda: torch.sqrt(var) + eps,
             "none": lambda: torch.sqrt(var), "no-root": lambda: var + eps}[eps_mode]()
    return (x - mu) / denom * weight + bias


def _layer_norm_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    x_hand = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=f64)
    cases = [Case("the vector (1, 2, 3, 4) with weight 1 and bias 0 (float64)",
                  (x_hand, torch.ones(4, dtype=f64), torch.zeros(4, dtype=f64)), {"eps": 1e-5})]
    for shape, dtype, scale, shift, eps, note in [
        ((4, 16), f64, 2.0, 1.0, 1e-5, ""),
        ((2, 5, 32), f32, 3.0, 0.0, 1e-5, ""),
        ((3, 24), f64, 5.0, 100.0, 1e-5, " with a large mean"),
        ((6, 3), f64, 1.0, 0.5, 1e-5, ""),
        ((4, 8), f64, 1e-3, 0.0, 1e-5, " with a variance smaller than eps"),
        ((5, 6), f64, 1.0, 0.0, 0.1, ", eps = 0.1"),
        ((1, 12), f32, 1.0, 0.0, 1e-5, " (a batch of one)"),
    ]:
        x = _randn(gen, shape, dtype, scale, shift)
        weight, bias = _gain(gen, shape[-1], dtype), _randn(gen, shape[-1], dtype, 0.5)
        cases.append(Case(f"x: {describe(x)}{note}, random weight and bias", (x, weight, bias), {"eps": eps}))
    return cases


LAYER_NORM = Task(
    name="layer_norm", reference=ref.layer_norm, cases=_layer_norm_cases, seed=501, rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("the variance has Bessel's correction (divides by D − 1), which torch.var and torch.std use by "
                "default. LayerNorm divides by D: pass unbiased=False (or correction=0), or use .mean().",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, unbiased=True)),
        Mistake("ε is outside the square root. It goes inside: (x − μ) / sqrt(σ² + ε), as in PyTorch; the "
                "difference shows when the variance is small.",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, eps_mode="outside")),
        Mistake("ε is missing: divide by sqrt(σ² + ε). It matters when the variance is small.",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, eps_mode="none")),
        Mistake("the square root is missing: divide by the standard deviation sqrt(σ² + ε), not by the "
                "variance.", lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, eps_mode="no-root")),
        Mistake("the statistics are taken over the first (batch) dimension — that is BatchNorm. LayerNorm "
                "normalizes each position over its features, the last dimension.",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, dim=0)),
        Mistake("the mean is not subtracted (that is RMSNorm). LayerNorm centres first: x − mean(x).",
                lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, centre=False)),
        Mistake("weight and bias are swapped: scale by weight (γ), then add bias (β).",
                lambda x, w, b, eps=1e-5: _ln(x, b, w, eps)),
        Mistake("the bias β is not added.", lambda x, w, b, eps=1e-5: _ln(x, w, torch.zeros_like(b), eps)),
        Mistake("the weight γ is not applied.", lambda x, w, b, eps=1e-5: _ln(x, torch.ones_like(w), b, eps)),
        Mistake("the bias is added before scaling: (x̂ + β) · γ. Scale first, then shift: x̂ · γ + β.",
                lambda x, w, b, eps=1e-5: (_ln(x, torch.ones_like(w), torch.zeros_like(b), eps) + b) * w),
    ],
    forbid=Forbid(operations=("layer_norm", "rms_norm"), modules=(ref,)),
)

check_layer_norm = LAYER_NORM.checker(
    """Check ``layer_norm(x, weight, bias, eps=1e-5)`` = (x − μ)/sqrt(σ² + ε) · weight + bias over the last
    dimension, σ² the biased variance, in the input's dtype.""")


# --- Task 2: the RMSNorm backward pass -------------------------------------------------------------------

def _backward(x, w, g, eps=1e-6, *, transpose=False, eps_in_r=True, projection=True, over_d=True,
              sum_weight=True, weight_uses_x_hat=True, sign=1.0):
    """The backward pass with one knob turned: what a solution with that mistake computes."""
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + (eps if eps_in_r else 0.0))
    x_hat = x / r
    if transpose:  # J g instead of Jᵀ g: γ applied after the projection
        inner = g - (x_hat * (x_hat * g).mean(-1, keepdim=True) if projection else 0.0)
        grad_x = w * inner / r
    else:
        wg = w * g
        dot = (x_hat * wg).mean(-1, keepdim=True) if over_d else (x_hat * wg).sum(-1, keepdim=True)
        grad_x = (wg - sign * (x_hat * dot if projection else 0.0)) / r
    contrib = g * (x_hat if weight_uses_x_hat else x)
    grad_w = contrib.reshape(-1, x.shape[-1]).sum(0) if sum_weight else contrib.reshape(-1, x.shape[-1])[-1]
    return grad_x, grad_w


def _backward_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    cases = [Case("x = (3, 4) with weight (1, 1), grad_out (1, 0) and eps = 0 (float64)",
                  (torch.tensor([3.0, 4.0], dtype=f64), torch.ones(2, dtype=f64), torch.tensor([1.0, 0.0], dtype=f64)),
                  {"eps": 0.0})]
    for shape, dtype, scale, eps, note in [
        ((8,), f64, 1.0, 1e-6, ""),
        ((4, 6), f64, 2.0, 1e-6, ""),
        ((2, 3, 16), f64, 1.0, 1e-5, ""),
        ((5, 8), f64, 1e-3, 1e-6, " with mean(x²) comparable to eps"),
        ((3, 7), f64, 1.0, 0.5, ", eps = 0.5"),
        ((2, 4, 12), f32, 1.5, 1e-6, ""),
    ]:
        x = _randn(gen, shape, dtype, scale)
        w, g = _gain(gen, shape[-1], dtype), _randn(gen, shape, dtype)
        cases.append(Case(f"x: {describe(x)}{note}, random weight and grad_out of x's shape", (x, w, g),
                          {"eps": eps}))
    return cases


def _backward_explain(got, want, case) -> str | None:
    grad_x, grad_w = got
    want_x, want_w = want
    if grad_w.shape != want_w.shape:
        return ("grad_weight must have the weight's shape (D,): γ is shared by every position, so its gradient "
                "sums the contributions of all of them (every leading dimension).")
    return None


RMS_NORM_BACKWARD = Task(
    name="rms_norm_backward", reference=ref.rms_norm_backward, cases=_backward_cases, seed=502,
    rtol=1e-4, atol=1e-6,
    output=TupleOutput([TensorOutput("the dtype of x"), TensorOutput("the dtype of weight")],
                       ["grad_x", "grad_weight"]),
    explain=_backward_explain,
    mistakes=[
        Mistake("grad_x is J g instead of Jᵀ g. The backward pass multiplies by the TRANSPOSED Jacobian: γ_i "
                "scales row i of J, so in Jᵀ g it multiplies g before the projection: start from γ ⊙ g.",
                lambda x, w, g, eps=1e-6: _backward(x, w, g, eps, transpose=True)),
        Mistake("r must include ε: r = sqrt(mean(x²) + ε). Without it the gradient is only approximate, and "
                "visibly wrong when mean(x²) is small.",
                lambda x, w, g, eps=1e-6: _backward(x, w, g, eps, eps_in_r=False)),
        Mistake("grad_x has only the direct term γ ⊙ g / r. But r depends on x too: grad_x needs a second "
                "term, the gradient that flows through r (use ∂r/∂x_j = x_j / (D r)).",
                lambda x, w, g, eps=1e-6: _backward(x, w, g, eps, projection=False)),
        Mistake("the term through r must average over the D features (mean, i.e. divide the sum by D): "
                "∂r/∂x_j = x_j / (D r).", lambda x, w, g, eps=1e-6: _backward(x, w, g, eps, over_d=False)),
        Mistake("the term through r has the wrong sign: increasing x_j increases r, which shrinks every "
                "output, so it is subtracted.", lambda x, w, g, eps=1e-6: _backward(x, w, g, eps, sign=-1.0)),
        Mistake("grad_weight uses x; the weight multiplies the normalized x̂ = x / r, so ∂L/∂γ sums g ⊙ x̂.",
                lambda x, w, g, eps=1e-6: _backward(x, w, g, eps, weight_uses_x_hat=False)),
        Mistake("grad_weight must sum the contributions of every position (all leading dimensions), not take "
                "one of them.", lambda x, w, g, eps=1e-6: _backward(x, w, g, eps, sum_weight=False)),
    ],
    forbid=Forbid(operations=("layer_norm", "rms_norm"), modules=(ref,), autograd=True),
)

check_rms_norm_backward = RMS_NORM_BACKWARD.checker(
    """Check ``rms_norm_backward(x, weight, grad_out, eps=1e-6) -> (grad_x, grad_weight)``, the gradients of
    L through y = x / sqrt(mean(x²) + ε) · weight given grad_out = ∂L/∂y, without autograd.""")


# --- Task 3: merging two groups' statistics (find and fix the bug) ----------------------------------------

def _merge(na, ma, va, nb, mb, vb, *, between=True, between_weight="counts", weighted_mean=True,
           weighted_var=True, bessel=False, swapped=False):
    """The merge with one knob turned: what a solution with that mistake computes."""
    n = na + nb
    delta = mb - ma
    if swapped:
        mean = (nb * ma + na * mb) / n
    else:
        mean = ma + delta * (nb / n) if weighted_mean else (ma + mb) / 2
    within = na * va + nb * vb if weighted_var else (va + vb) / 2 * n
    if not between:
        extra = 0.0
    elif between_weight == "counts":
        extra = delta.pow(2) * (na * nb / n)
    elif between_weight == "quarter":
        extra = delta.pow(2) / 4 * n
    else:  # the difference, not its square
        extra = delta * (na * nb / n)
    return n, mean, (within + extra) / (n - 1 if bessel else n)


def _merge_cases(gen) -> list[Case]:
    cases = []
    for na, nb, rows, shift, dtype, note in [
        (4, 4, 3, 2.0, torch.float64, "two groups of 4 with different means"),
        (10, 6, 5, 3.0, torch.float64, "groups of 10 and 6"),
        (1, 7, 2, 1.0, torch.float64, "a group of one and a group of 7"),
        (128, 64, 4, 0.5, torch.float32, "groups of 128 and 64 (float32)"),
        (5, 5, 3, 0.0, torch.float64, "two groups with the same mean"),
        (3, 9, 6, -4.0, torch.float64, "groups of 3 and 9, the second far below the first"),
    ]:
        a = torch.randn(rows, na, generator=gen, dtype=torch.float64)
        b = shift + 2 * torch.randn(rows, nb, generator=gen, dtype=torch.float64)
        if note.startswith("two groups with the same mean"):
            b = b - b.mean(1, keepdim=True) + a.mean(1, keepdim=True)
        stats = [a.mean(1), a.var(1, unbiased=False), b.mean(1), b.var(1, unbiased=False)]
        ma, va, mb, vb = (s.to(dtype) for s in stats)
        cases.append(Case(f"{note}: {rows} rows of statistics, {describe(ma)} each", (na, ma, va, nb, mb, vb)))
    return cases


def _given_bug(na, ma, va, nb, mb, vb):
    return _merge(na, ma, va, nb, mb, vb, between=False)


MERGE_MOMENTS = Task(
    name="merge_moments", reference=ref.merge_moments, cases=_merge_cases, seed=503, rtol=1e-5, atol=1e-8,
    output=TupleOutput([NumberOutput("the total count", integer=True), TensorOutput("the dtype of the means"),
                        TensorOutput("the dtype of the variances")], ["count", "mean", "var"]),
    mistakes=[
        Mistake("this is still what the given version returns: the bug is not fixed yet. Compare the merged "
                "variance with the variance of the two groups put together, on groups whose means differ.",
                _given_bug),
        Mistake("the means are averaged as if the groups had the same size: weight each mean by its count.",
                lambda *a: _merge(*a, weighted_mean=False)),
        Mistake("the weights of the means are swapped: each group's mean is weighted by its OWN count.",
                lambda *a: _merge(*a, swapped=True)),
        Mistake("the variances are averaged as if the groups had the same size: weight each by its count.",
                lambda *a: _merge(*a, weighted_var=False)),
        Mistake("the spread between the two means uses the difference δ, not its square δ².",
                lambda *a: _merge(*a, between_weight="difference")),
        Mistake("the spread between the means is weighted as if the groups had the same size: the term is "
                "δ² · n_a · n_b / n (before dividing by n).", lambda *a: _merge(*a, between_weight="quarter")),
        Mistake("the variance divides by n − 1 (Bessel's correction); these are biased variances, as in "
                "LayerNorm: divide by n.", lambda *a: _merge(*a, bessel=True)),
    ],
    forbid=Forbid(modules=(ref,)),
    hint="Write the sum of squared deviations of the whole group about the overall mean, and split it over "
         "the two groups: each group contributes its own spread and the spread of its mean around the overall one.",
)

check_merge_moments = MERGE_MOMENTS.checker(
    """Check ``merge_moments(count_a, mean_a, var_a, count_b, mean_b, var_b) -> (count, mean, var)``: the
    statistics of two groups together, biased variances.""")


# --- Task 4: predictions ----------------------------------------------------------------------------------

_D_OUTLIER = 64  # width of the float16 vector: one entry 300, the others 1
_RMS_OF_OUTLIER_VECTOR = ((300.0**2 + (_D_OUTLIER - 1)) / _D_OUTLIER) ** 0.5  # in exact arithmetic

# Wrong predictions that reveal a specific misunderstanding, key by key.
_WRONG_PREDICTIONS = {
    "fp16_outlier": [
        (1 / _RMS_OF_OUTLIER_VECTOR, "that is what the norm gives with its statistics in float32. Computed entirely "
                                     "in float16, 300² = 90,000 does not fit (float16 stops at 65,504): one "
                                     "square is inf, so mean(x²) is inf for the whole vector — what is 1 times "
                                     "rsqrt(inf)?"),
        (1.0, "every entry is divided by the RMS of the WHOLE vector, not by its own size — and here that RMS "
              "is not even finite in float16."),
        (float("nan"), "nothing here is 0/0 or inf − inf: mean(x²) is inf, rsqrt(inf) is 0, and 1 × 0 is 0."),
    ],
    "fp16_outlier_upcast": [
        (0.0, "with the statistics in float32, 90,000 is an ordinary number: only the all-float16 computation "
              "overflows."),
        (1.0, "RMSNorm divides every entry by the RMS of the whole vector, and the one large entry dominates "
              "that RMS."),
        (1 / 300.0, "the RMS is the square root of the MEAN of the squares: divide their sum by D = 64 before "
                    "taking the root; it is not the largest entry either."),
    ],
    "layer_norm_of_constant": [
        (1.0, "LayerNorm subtracts the mean first: every entry of a constant vector equals its mean."),
        (5.0, "LayerNorm subtracts the mean first: every entry of a constant vector equals its mean."),
        (float("nan"), "ε keeps the division finite: (x − μ) / sqrt(0 + ε) is 0 / sqrt(ε)."),
    ],
    "half_rms_input": [
        (1e-3, "at rms(x) = √ε the output has RMS 1/√2, not ½: solve rms / sqrt(rms² + ε) = ½ for the rms."),
        (1e-6, "that is where the OUTSIDE convention, rms / (rms + ε), reaches ½; with ε inside the root, "
               "solve rms / sqrt(rms² + ε) = ½."),
        (0.5e-3, "the rms² in the denominator matters here: square both sides of rms / sqrt(rms² + ε) = ½ and "
                 "solve for rms²."),
        (1e-6 / 3, "that is the mean square rms²; the question asks for the root mean square."),
    ],
}


def _true_predictions() -> dict[str, float]:
    x16 = torch.ones(1, _D_OUTLIER, dtype=torch.float16)
    x16[0, 0] = 300.0  # one large activation among ones
    all_half = x16 * torch.rsqrt(x16.pow(2).mean(-1, keepdim=True) + 1e-6)  # every step in float16
    constant = torch.full((1, 8), 5.0, dtype=torch.float64)
    eps = 1e-6
    return {
        "fp16_outlier": float(all_half[0, 1]),
        "fp16_outlier_upcast": float(ref.rms_norm(x16, eps=1e-6)[0, 1]),  # float32 statistics, cast back
        "layer_norm_of_constant": float(ref.layer_norm(constant, eps=1e-5)[0, 0]),
        "half_rms_input": (eps / 3) ** 0.5,  # ρ / sqrt(ρ² + ε) = 1/2  ⇔  4ρ² = ρ² + ε
    }


NORM_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=504,
    rtol=1e-3,
    atol={"fp16_outlier": 1e-3, "fp16_outlier_upcast": 1e-5, "layer_norm_of_constant": 1e-3,
          "half_rms_input": 1e-9},
    advice="Work it out on paper first, then run the experiment below.",
)

check_norm_predictions = NORM_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: RMSNorm in float16 of a vector with one large entry, without and with
    float32 statistics, LayerNorm of a constant vector, and the input RMS at which RMSNorm's output has RMS ½.""")

"""Checkers for exercise 13 (the speedrun).

1. ``newton_schulz`` — orthogonalise a matrix with the quintic Newton–Schulz iteration, Muon's core.
2. ``muon_step`` — find and fix the bugs in one Muon step for one weight matrix, checked over several
   steps (the momentum carried from step to step) against course_lib's ``Muon`` optimiser.
3. ``qk_norm_attention`` — causal grouped-query attention with QK-norm (each head's queries and keys
   RMS-normalised over their D_h features, no gain), against ``GroupedQueryAttention(qk_norm=True)``.
4. ``softcap`` — logit soft-capping, c·tanh(z/c).
5. ``lr_wsd`` — the warmup–stable–decay learning-rate schedule, against ``lr_at(..., cooldown=f)``.
6. ``predictions`` — predict five numbers before computing them (a function returning a dict).
"""

from __future__ import annotations

import math
from itertools import combinations

import torch
import torch.nn.functional as F
import torch.optim.lr_scheduler

from .. import attention, norms, training
from ..training import muon
from ._core import Case, Forbid, GradingError, Mistake, NumberOutput, Task, TensorOutput, describe
from ._predictions import predictions_task

__all__ = ["check_newton_schulz", "check_muon_step", "check_qk_norm_attention", "check_softcap",
           "check_lr_wsd", "check_speedrun_predictions"]

_F64, _F32, _BF16 = torch.float64, torch.float32, torch.bfloat16


def _randn(gen, *shape, dtype=_F64, scale=1.0) -> torch.Tensor:
    return (scale * torch.randn(shape, generator=gen, dtype=_F64)).to(dtype)


def _short(x: float) -> str:
    """1e-3 rather than 0.001 (a case label shows settings, never many decimals)."""
    return f"{x:g}" if x == 0 or x >= 0.01 else f"{x:.0e}".replace("e-0", "e-")


def _load_optimizer_machinery() -> None:
    """torch imports torch._dynamo (about 2 s) when the first optimizer is built: import it once, in the
    grading process, not again in every isolated child against its time limit."""
    import torch._dynamo  # noqa: F401


# --- Task 1: the Newton–Schulz iteration ------------------------------------------------------------------

_CUBIC = (1.5, -0.5, 0.0)  # the classic iteration, which converges to exactly 1 (slowly)


def _ns(G, steps=5, *, coefficients=muon.NS_COEFFICIENTS, norm="frobenius", gram="X Xt @ X", back=True,
        eps=1e-7):
    """The iteration with knobs (in float32): what a solution with a given mistake computes. ``gram`` names
    the product each step adds: ``"X Xt @ X"`` (the task's: A = X Xᵀ multiplies X from the left), or
    ``"Xt X @ X"`` and ``"X @ X Xt"`` (the Gram matrix on the wrong side, defined for square X only)."""
    a, b, c = coefficients
    X = G.float()  # (m, n)
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.mT  # (n, m)
    if norm == "frobenius":
        X = X / (torch.linalg.matrix_norm(X) + eps)
    elif norm == "max-entry":
        X = X / X.abs().max()
    elif norm == "spectral":
        X = X / (torch.linalg.matrix_norm(X, ord=2) + eps)
    elif norm == "rows":
        X = X / (torch.linalg.vector_norm(X, dim=-1, keepdim=True) + eps)
    for _ in range(steps):
        if gram == "X Xt @ X":
            A = X @ X.mT
            X = a * X + (b * A + c * A @ A) @ X
        elif gram == "Xt X @ X":
            A = X.mT @ X
            X = a * X + (b * A + c * A @ A) @ X
        else:  # "X @ X Xt"
            A = X @ X.mT
            X = a * X + X @ (b * A + c * A @ A)
    if tall and back:
        X = X.mT
    return X.to(G.dtype)


def _ns_reference(G, steps):
    return muon.newton_schulz(G, steps)  # float32 inside, G's dtype out


def _polar(G, steps):
    """The exact U Vᵀ of the singular value decomposition G = U Σ Vᵀ."""
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    return (U @ Vh).to(G.dtype)


def _ns_cases(gen) -> list[Case]:
    cases = []
    for shape, steps, dtype, kind, what in [
        ((16, 32), 5, _F32, "gaussian", "a wide matrix"),
        ((40, 12), 5, _F32, "gaussian", "a tall matrix (more rows than columns)"),
        ((24, 24), 5, _F32, "gaussian", "a square matrix"),
        ((20, 20), 5, _F32, "diagonal", "a diagonal matrix"),
        ((12, 30), 5, _F32, "small", "a gradient with small entries (about 1e-3)"),
        ((32, 8), 5, _F64, "gaussian", "a tall float64 matrix"),
        ((16, 48), 3, _F32, "gaussian", "three steps"),
        ((24, 16), 7, _F32, "gaussian", "seven steps"),
        ((20, 20), 5, _F32, "rank-2", "a square matrix of rank 2"),
        ((1, 16), 5, _F32, "gaussian", "one row"),
        ((12, 1), 5, _F32, "gaussian", "one column"),
        ((10, 14), 0, _F32, "gaussian", "zero steps"),
        ((16, 24), 5, _BF16, "gaussian", "a bfloat16 matrix"),
        ((8, 12), 5, _F32, "zero", "a zero matrix"),
    ]:
        if kind == "diagonal":
            G = torch.diag(0.1 + 2.9 * torch.rand(shape[0], generator=gen, dtype=_F64))
        elif kind == "rank-2":
            G = _randn(gen, shape[0], 2) @ _randn(gen, 2, shape[1])
        elif kind == "zero":
            G = torch.zeros(shape, dtype=_F64)
        else:
            G = _randn(gen, *shape, scale=1e-3 if kind == "small" else 1.0)
        G = G.to(dtype)
        cases.append(Case(f"{what}: G {describe(G)}, steps={steps}", (G, steps)))
    return cases


def _ns_mistake(**knobs):
    return lambda G, steps: _ns(G, steps, **knobs)


def _run_ns(student, G, steps):
    """Call the student's function; a product of matrices whose shapes do not fit is named."""
    try:
        return student(G, steps)
    except RuntimeError as err:
        if "cannot be multiplied" in str(err) or "size mismatch" in str(err):
            raise GradingError(
                f"`newton_schulz` multiplied matrices whose shapes do not fit, for G {describe(G)}. Likely "
                f"mistake: the Gram matrix is on the wrong side. With X of shape (r, c), A = X Xᵀ is (r, r) "
                f"and multiplies X from the LEFT, (b A + c A²) @ X; written as X @ (…), the Gram matrix "
                f"must be Xᵀ X, (c, c).") from None
        raise


def _ns_explain(got, want, case: Case) -> str | None:
    G = case.args[0]
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return None
    finite = bool(torch.isfinite(got).all())
    if not G.any() and not finite:
        return ("a zero G (a parameter whose gradient is 0) gives NaN: divide by ‖G‖_F + ε, not by ‖G‖_F "
                "alone, so that the result is 0.")
    if not finite or got.abs().max() > 5:
        return ("the values blow up. The polynomial brings singular values between 0 and 1 close to 1, and "
                "makes larger ones grow without bound: divide G by its Frobenius norm ‖G‖_F (plus ε) first, ONE "
                "number for the whole matrix, which is at least the largest singular value. Dividing by the "
                "largest entry, by each row's norm, or not at all, leaves singular values above 1. (If you did "
                "normalise, check the order of the coefficients: a multiplies X, b the term A X, c the term "
                "A² X.)")
    if G.dtype in (torch.bfloat16, torch.float16):
        return ("for a low-precision G the iteration must run in float32: convert G with G.float() (or "
                ".to(torch.float32)) first and cast the result back to G's dtype only at the end; iterating "
                "in bfloat16 loses too much precision in the matrix products.")
    return None


NEWTON_SCHULZ = Task(
    name="newton_schulz", seed=1301, cases=_ns_cases, reference=_ns_reference, run=_run_ns,
    output=TensorOutput("G's dtype: compute in float32, then cast back with .to(G.dtype)"),
    rtol=1e-2, atol=1e-3, explain=_ns_explain,
    mistakes=[
        Mistake("G is not normalised first: the singular values must start at most 1, so divide G by its "
                "Frobenius norm ‖G‖_F + ε before the first step.", _ns_mistake(norm="none")),
        Mistake("G is divided by its largest entry; divide it by its Frobenius norm ‖G‖_F (plus ε), which "
                "is at least its largest singular value (the largest entry is not).",
                _ns_mistake(norm="max-entry")),
        Mistake("G is divided by its spectral norm (its largest singular value); the iteration starts from "
                "G / (‖G‖_F + ε), the Frobenius norm, cheap to compute, and its coefficients are tuned for "
                "that start.", _ns_mistake(norm="spectral")),
        Mistake("each row of G is normalised on its own; divide the whole matrix by ONE number, its "
                "Frobenius norm ‖G‖_F + ε (scaling rows separately changes the singular vectors).",
                _ns_mistake(norm="rows")),
        Mistake("the Gram matrix is on the wrong side: A = X Xᵀ multiplies X from the LEFT, (b A + c A²) @ X "
                "(or, equivalently, X @ (b B + c B²) with B = Xᵀ X).", _ns_mistake(gram="Xt X @ X")),
        Mistake("the Gram matrix is on the wrong side: A = X Xᵀ multiplies X from the LEFT, (b A + c A²) @ X "
                "(or, equivalently, X @ (b B + c B²) with B = Xᵀ X).", _ns_mistake(gram="X @ X Xt")),
        Mistake("the coefficients are in the wrong order: a multiplies X (σ), b the term A X (σ³) and c the "
                "term A² X (σ⁵), with (a, b, c) in the order the task gives them.",
                _ns_mistake(coefficients=tuple(reversed(muon.NS_COEFFICIENTS)))),
        Mistake("the coefficients are in the wrong order: a multiplies X (σ), b the term A X (σ³) and c the "
                "term A² X (σ⁵), with (a, b, c) in the order the task gives them.",
                _ns_mistake(coefficients=(muon.NS_COEFFICIENTS[0], muon.NS_COEFFICIENTS[2],
                                          muon.NS_COEFFICIENTS[1]))),
        Mistake("these are the coefficients of the classic cubic iteration; this task is the quintic one "
                "with the (a, b, c) it gives, which grows small singular values much faster.",
                _ns_mistake(coefficients=_CUBIC)),
        Mistake("the iteration runs one step too many: apply the polynomial exactly `steps` times (after the "
                "normalisation, which is not a step).", lambda G, steps: _ns(G, steps + 1)),
        Mistake("the iteration runs one step too few: apply the polynomial exactly `steps` times.",
                lambda G, steps: _ns(G, max(steps - 1, 0))),
        Mistake("the result of a tall matrix is not transposed back: when G has more rows than columns, "
                "iterate on Gᵀ and return the transpose of the result, G's shape.", _ns_mistake(back=False)),
        Mistake("this is the exact U Vᵀ of the singular value decomposition; the task asks for the "
                "Newton–Schulz iteration itself, whose singular values end near 1, not at 1.", _polar),
    ],
    forbid=Forbid(modules=(muon,)),
    hint="Check one step by hand on a diagonal G = diag(σ₁, σ₂): after the normalisation each step maps every "
         "σ to aσ + bσ³ + cσ⁵, and the result stays diagonal.",
)

check_newton_schulz = NEWTON_SCHULZ.checker(
    """Check ``newton_schulz(G, steps)``: X = G / (‖G‖_F + 1e-7) in float32 (Gᵀ when G is tall), then
    ``steps`` times A = X Xᵀ, X ← a X + (b A + c A²) X with (a, b, c) = (3.4445, −4.7750, 2.0315); the
    result in G's shape and dtype.""")


# --- Task 2: one Muon step (find and fix) -----------------------------------------------------------------

def _muon(weight, grad, momentum, lr, beta, weight_decay, nesterov, *, order="update-first",
          buffer="ema", look="lerp", decay="before", scale="max", direction="momentum", sign=-1.0):
    """Muon over the steps of ``grad`` (a list), with knobs: what a solution with a given mistake computes.
    Returns the weights after each step, then the last momentum, flattened into one vector."""
    W, m = weight.clone(), momentum.clone()
    rows, cols = W.shape
    path = []
    for g in grad:
        if decay == "coupled":
            g = g + weight_decay * W  # L2 regularisation in the gradient
        if buffer == "ema":
            new_m = beta * m + (1 - beta) * g
        elif buffer == "sgd":
            new_m = beta * m + g
        else:  # "swapped": the weights of the average exchanged
            new_m = (1 - beta) * m + beta * g
        used = m if order == "use-old" else new_m  # the buffer the direction reads
        if order == "never":
            used, new_m = m, m
        if look == "ignored" or (look != "always" and not nesterov):
            d = used
        elif look == "sgd":
            d = g + beta * used
        else:
            d = beta * used + (1 - beta) * g
        if direction == "gradient":
            d = g
        s = {"max": 0.2 * math.sqrt(max(rows, cols)), "min": 0.2 * math.sqrt(min(rows, cols)),
             "none": 1.0, "no-0.2": math.sqrt(max(rows, cols)),
             "spectral": math.sqrt(max(1.0, rows / cols))}[scale]
        update = muon.newton_schulz(d) * s
        if decay == "before":
            W = W * (1 - lr * weight_decay)
        elif decay == "unscaled":
            W = W * (1 - weight_decay)
        W = W + sign * lr * update
        if decay == "after":
            W = W * (1 - lr * weight_decay)
        m = new_m
        path.append(W)
    return torch.cat([w.reshape(-1) for w in path] + [m.reshape(-1)])


def _muon_reference(weight, grad, momentum, lr, beta, weight_decay, nesterov):
    """course_lib's Muon optimiser on one parameter, its momentum buffer set to ``momentum``."""
    p = torch.nn.Parameter(weight.clone())
    optimizer = muon.Muon([p], lr=lr, momentum=beta, nesterov=nesterov, weight_decay=weight_decay)
    optimizer.state[p]["momentum_buffer"] = momentum.clone()
    path = []
    for g in grad:
        p.grad = g.clone()
        optimizer.step()
        path.append(p.detach().clone())
    m = optimizer.state[p]["momentum_buffer"]
    return torch.cat([w.reshape(-1) for w in path] + [m.reshape(-1)])


def _run_muon(student, weight, grad, momentum, lr, beta, weight_decay, nesterov):
    """Call the student's step once per gradient, carrying the weight and the momentum it returns."""
    name = "`muon_step`"
    path = []
    for g in grad:
        out = student(weight, g, momentum, lr, beta, weight_decay, nesterov)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise GradingError(f"{name} returned a {type(out).__name__}; it should return a tuple of two "
                               f"tensors: (new_weight, new_momentum).")
        for part, what in zip(out, ("new_weight", "new_momentum")):
            if not isinstance(part, torch.Tensor):
                raise GradingError(f"{name}'s {what} is a {type(part).__name__}; it should be a tensor.")
            if part.shape != weight.shape or part.dtype != weight.dtype:
                raise GradingError(f"{name}'s {what} is a {describe(part)} for a weight that is a "
                                   f"{describe(weight)}; it should have the weight's shape and dtype.")
        weight, momentum = out
        path.append(weight)
    return torch.cat([w.detach().reshape(-1) for w in path] + [momentum.detach().reshape(-1)])


def _muon_cases(gen) -> list[Case]:
    cases = []
    for (rows, cols), dtype, n_steps, lr, beta, wd, nesterov, resume, what in [
        ((24, 8), _F32, 3, 0.1, 0.95, 0.5, True, False, "a tall matrix"),
        ((8, 24), _F32, 4, 0.05, 0.9, 0.2, False, False, "a wide matrix without Nesterov"),
        ((16, 16), _F32, 2, 0.02, 0.95, 0.0, True, True, "a square matrix, resuming from a momentum buffer"),
        ((32, 12), _F64, 3, 0.1, 0.8, 0.3, True, False, "a tall float64 matrix"),
        ((20, 4), _F32, 3, 0.2, 0.9, 0.0, False, True, "no weight decay, no Nesterov, resuming"),
        ((12, 20), _F32, 1, 0.1, 0.95, 0.1, True, False, "one step from a zero momentum"),
    ]:
        W = _randn(gen, rows, cols, dtype=dtype, scale=cols ** -0.5)
        grads = [_randn(gen, rows, cols, dtype=dtype) for _ in range(n_steps)]
        m0 = _randn(gen, rows, cols, dtype=dtype, scale=0.5) if resume else torch.zeros(rows, cols, dtype=dtype)
        start = "a momentum buffer of earlier steps" if resume else "a zero momentum"
        label = (f"{what}: weight {describe(W)}, {n_steps} step(s) from {start}, lr={lr}, beta={beta}, "
                 f"weight_decay={wd}, nesterov={nesterov}")
        cases.append(Case(label, (W, grads, m0, lr, beta, wd, nesterov)))
    return cases


def _muon_mistake(**knobs):
    return lambda *args: _muon(*args, **knobs)


# The three bugs of the given version, each with what a message says about it.
_GIVEN = {
    "order": ("the direction is built from the momentum as it was BEFORE this step's gradient entered it "
              "(with nesterov=True that is the same as dropping the look-ahead): update the buffer first, "
              "m ← β m + (1 − β) g, then build the direction from the new m"),
    "scale": ("the scale uses √min(rows, cols); it is 0.2 · √max(rows, cols), which makes the update's RMS "
              "about 0.2 whatever the shape"),
    "decay": ("the weight decay is not multiplied by the learning rate: W ← W (1 − lr · weight_decay)"),
}
_GIVEN_KNOBS = {"order": {"order": "use-old"}, "scale": {"scale": "min"}, "decay": {"decay": "unscaled"}}


def _given_mistakes() -> list[Mistake]:
    """The given version's bugs, every combination of them left in (the single ones first)."""
    found = []
    for size in (1, 2, 3):
        for bugs in combinations(_GIVEN, size):
            knobs = {k: v for bug in bugs for k, v in _GIVEN_KNOBS[bug].items()}
            if size == 3:
                text = ("this is still what the given version computes; its three bugs remain: " +
                        "; ".join(_GIVEN[b] for b in bugs) + ".")
            elif size == 2:
                text = "two of the given version's bugs remain: " + "; and ".join(_GIVEN[b] for b in bugs) + "."
            else:
                text = _GIVEN[bugs[0]] + "."
            found.append(Mistake(text, _muon_mistake(**knobs)))
    return found


MUON_STEP = Task(
    name="muon_step", seed=1302, cases=_muon_cases, reference=_muon_reference, run=_run_muon,
    prepare=_load_optimizer_machinery,
    output=TensorOutput("the weight's dtype: the weights after each step, then the last momentum"),
    rtol=1e-4, atol=1e-5,
    mistakes=[
        *_given_mistakes(),
        Mistake("the momentum buffer is never updated: return m ← β m + (1 − β) g as new_momentum, so that "
                "the next step averages this gradient in.", _muon_mistake(order="never")),
        Mistake("the momentum's weights are exchanged: m ← β m + (1 − β) g keeps β = 0.95 of the OLD average "
                "(torch.lerp(m, g, w) is m + w (g − m): its weight w = 1 − β goes to g).",
                _muon_mistake(buffer="swapped")),
        Mistake("the buffer accumulates β m + g (SGD's momentum); this one is an average, "
                "m ← β m + (1 − β) g.", _muon_mistake(buffer="sgd")),
        Mistake("the Nesterov direction is g + β m; this step's is the average β m + (1 − β) g of the new "
                "momentum and the gradient.", _muon_mistake(look="sgd")),
        Mistake("nesterov is ignored: with nesterov=True the direction is β m + (1 − β) g (m already "
                "updated), with nesterov=False it is m itself.", _muon_mistake(look="ignored")),
        Mistake("the Nesterov direction is used even when nesterov=False; then the direction is the "
                "momentum m itself.", _muon_mistake(look="always")),
        Mistake("the gradient itself is orthogonalised; Muon orthogonalises the momentum direction (β m + "
                "(1 − β) g with Nesterov, m without).", _muon_mistake(direction="gradient")),
        Mistake("the weight decay is applied after the update; it shrinks the weight first, W (1 − lr · "
                "weight_decay), and the update is subtracted from the result.", _muon_mistake(decay="after")),
        Mistake("the weight decay is missing: W ← W (1 − lr · weight_decay) − lr · s · O.",
                _muon_mistake(decay="none")),
        Mistake("the weight decay is added to the gradient (L2 regularisation, as in Adam, not AdamW); Muon's "
                "is decoupled: W ← W (1 − lr · weight_decay), apart from the gradient and the momentum.",
                _muon_mistake(decay="coupled")),
        Mistake("the orthogonalised direction is not scaled: multiply it by s = 0.2 · √max(rows, cols).",
                _muon_mistake(scale="none")),
        Mistake("the scale misses its factor 0.2: s = 0.2 · √max(rows, cols).", _muon_mistake(scale="no-0.2")),
        Mistake("the scale is √max(1, rows / cols) (the speedrun's other convention); this task's is "
                "s = 0.2 · √max(rows, cols).", _muon_mistake(scale="spectral")),
        Mistake("the update is added; the step goes against the direction: W ← … − lr · s · O.",
                _muon_mistake(sign=1.0)),
    ],
    forbid=Forbid(functions=((muon.Muon, "course_lib.training.Muon"),
                             (muon.muon_update, "course_lib.training.muon_update"),
                             (muon.CombinedOptimizer, "course_lib.training.CombinedOptimizer"),
                             (muon.make_muon_optimizer, "course_lib.training.make_muon_optimizer"))),
    hint="Follow one step on paper: the new momentum, the direction, O = orthogonalize(direction), the scale "
         "s = 0.2 · √max(rows, cols), the decayed weight, then the update.",
)

check_muon_step = MUON_STEP.checker(
    """Check ``muon_step(weight, grad, momentum, lr, beta, weight_decay, nesterov) -> (weight, momentum)``:
    m ← β m + (1 − β) g; d = β m + (1 − β) g (Nesterov) or m;
    W ← W (1 − lr λ) − lr · 0.2 √max(rows, cols) · NS(d); over several steps, against course_lib's Muon.""")


# --- Task 3: attention with QK-norm -----------------------------------------------------------------------

def _qk_reference(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    D = x.shape[-1]
    head_dim = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    module = attention.GroupedQueryAttention(D, n_heads, n_kv_heads, head_dim=head_dim, qk_norm=True,
                                             norm_eps=eps).to(x.dtype)
    with torch.no_grad():
        module.w_qkv.weight.copy_(w_qkv)  # rows: W_q, W_k, W_v
        module.w_o.weight.copy_(w_o)
        return module(x, implementation="reference")


def _normalise(t, eps, *, norm="rms", eps_at="inside", dims=(-1,)):
    """t normalised over ``dims`` (a knob: RMS, LayerNorm or the L2 norm; ε inside, outside or absent)."""
    e = {"inside": eps, "outside": 0.0, "none": 0.0}[eps_at]
    if norm == "layer":
        t = t - t.mean(dim=dims, keepdim=True)
    if norm == "l2":
        size = t.pow(2).sum(dim=dims, keepdim=True)
    else:
        size = t.pow(2).mean(dim=dims, keepdim=True)
    root = torch.sqrt(size + e)
    return t / (root + eps) if eps_at == "outside" else t / root


def _qk_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps, *, norm="rms", which="qk", over="head",
                  eps_at="inside", scale="head", causal=True, kv_of="group"):
    """Causal grouped-query attention with QK-norm, with knobs: what a solution with a given mistake
    computes. ``over``: the features one normalisation covers (``"head"``: one head's D_h; ``"all"``: the
    H·D_h features of every head together; ``"heads"``: one feature across the heads)."""
    B, T, _ = x.shape
    H, H_kv = n_heads, n_kv_heads
    D_h = w_qkv.shape[0] // (H + 2 * H_kv)
    q, k, v = (x @ w_qkv.T).split((H * D_h, H_kv * D_h, H_kv * D_h), dim=-1)  # (B, T, ·) each

    def normed(t, n):
        if norm == "none":
            return t.view(B, T, n, D_h).transpose(1, 2)
        if over == "all":
            t = _normalise(t, eps, norm=norm, eps_at=eps_at)  # over H·D_h at once
            return t.view(B, T, n, D_h).transpose(1, 2)
        t = t.view(B, T, n, D_h)  # (B, T, n, D_h)
        t = _normalise(t, eps, norm=norm, eps_at=eps_at, dims=(-1,) if over == "head" else (-2,))
        return t.transpose(1, 2)  # (B, n, T, D_h)

    def plain(t, n):
        return t.view(B, T, n, D_h).transpose(1, 2)

    q = normed(q, H) if "q" in which else plain(q, H)
    k = normed(k, H_kv) if "k" in which else plain(k, H_kv)
    v = normed(v, H_kv) if "v" in which else plain(v, H_kv)
    n_rep = H // H_kv
    index = torch.tensor([h // n_rep if kv_of == "group" else h % H_kv for h in range(H)])
    k, v = k[:, index], v[:, index]  # (B, H, T, D_h): head h reads its kv head
    factor = {"head": D_h ** -0.5, "twice": 1.0 / D_h, "none": 1.0}[scale]
    scores = (q @ k.transpose(-2, -1)) * factor  # (B, H, T, T)
    if causal:
        pos = torch.arange(T)
        scores = scores.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D_h)
    return out.transpose(1, 2).reshape(B, T, H * D_h) @ w_o.T  # (B, T, D)


def _qk_cases(gen) -> list[Case]:
    cases = []
    for B, T, D, H, H_kv, D_h, eps, dtype, w_scale, what in [
        (2, 6, 32, 4, 2, 8, 1e-6, _F32, 1.0, "grouped-query attention, 2 query heads per key/value head"),
        (1, 7, 24, 6, 3, 4, 1e-5, _F64, 1.0, "3 key/value heads shared by pairs of query heads"),
        (2, 5, 16, 4, 4, 4, 1e-6, _F64, 1.0, "multi-head attention (n_kv_heads = n_heads)"),
        (2, 5, 16, 4, 1, 6, 1e-6, _F64, 1.0, "multi-query attention (n_kv_heads = 1), D_h ≠ D / H"),
        (2, 6, 16, 4, 2, 4, 0.5, _F64, 1.0, "a large eps (0.5)"),
        (1, 8, 16, 2, 1, 8, 1e-6, _F64, 30.0, "weights 30 times larger (the scores stay bounded)"),
        (1, 1, 16, 4, 2, 4, 1e-6, _F64, 1.0, "a single position"),
        (2, 6, 24, 3, 1, 8, 1e-5, _F32, 1.0, "float32, 3 query heads reading one key/value head"),
    ]:
        x = _randn(gen, B, T, D, dtype=dtype)
        w_qkv = _randn(gen, (H + 2 * H_kv) * D_h, D, dtype=dtype, scale=w_scale * D ** -0.5)
        w_o = _randn(gen, D, H * D_h, dtype=dtype, scale=(H * D_h) ** -0.5)
        label = (f"{what}: x {describe(x)}, w_qkv {tuple(w_qkv.shape)}, w_o {tuple(w_o.shape)}, "
                 f"n_heads={H}, n_kv_heads={H_kv}, eps={eps:g}")
        cases.append(Case(label, (x, w_qkv, w_o, H, H_kv, eps)))
    return cases


def _qk_mistake(**knobs):
    return lambda *args: _qk_attention(*args, **knobs)


QK_NORM_ATTENTION = Task(
    name="qk_norm_attention", seed=1303, cases=_qk_cases, reference=_qk_reference,
    output=TensorOutput("x's dtype"), rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("q and k are not normalised: this is plain grouped-query attention. QK-norm divides each "
                "head's query and key vectors by their RMS over the D_h features, before the scores.",
                _qk_mistake(norm="none")),
        Mistake("only the queries are normalised; the keys are too, each key vector over its D_h features.",
                _qk_mistake(which="q")),
        Mistake("only the keys are normalised; the queries are too, each query vector over its D_h "
                "features.", _qk_mistake(which="k")),
        Mistake("the values are normalised too; QK-norm normalises the queries and the keys only (what "
                "bounds the scores); the values pass as they are.", _qk_mistake(which="qkv")),
        Mistake("q and k are normalised over all the heads' features at once (the whole projection, H·D_h "
                "or H_kv·D_h wide); each head's vector is normalised on its own, over its D_h features.",
                _qk_mistake(over="all")),
        Mistake("q and k are normalised across the heads (one feature of every head together); each head's "
                "vector is normalised over its own D_h features (the last dimension).",
                _qk_mistake(over="heads")),
        Mistake("ε is added outside the square root; it goes inside: q / √(mean(q²) + ε).",
                _qk_mistake(eps_at="outside")),
        Mistake("ε is missing: q / √(mean(q²) + ε).", _qk_mistake(eps_at="none")),
        Mistake("q and k are divided by their length (the L2 norm √Σq²); RMS normalisation divides by "
                "√mean(q²) = √(Σq² / D_h), which leaves each vector √D_h long.", _qk_mistake(norm="l2")),
        Mistake("the mean is subtracted first (that is LayerNorm); RMS normalisation only divides by "
                "√(mean(q²) + ε).", _qk_mistake(norm="layer")),
        Mistake("the scores are scaled twice (by 1/D_h); after QK-norm they are still divided by √D_h, "
                "once.", _qk_mistake(scale="twice")),
        Mistake("the scores are not scaled: after QK-norm they are still divided by √D_h.",
                _qk_mistake(scale="none")),
        Mistake("the causal mask is missing: position t must not attend to positions after t.",
                _qk_mistake(causal=False)),
        Mistake("query head h reads kv head h % n_kv_heads (the kv heads tiled); each kv head serves "
                "n_rep = n_heads / n_kv_heads CONSECUTIVE query heads: head h reads kv head h // n_rep.",
                _qk_mistake(kv_of="tiled")),
    ],
    forbid=Forbid(operations=("rms_norm", "layer_norm", "attention"), modules=(attention, norms)),
    hint="Check one head on a small example: q̂ = q / √(mean(q²) + ε) over its D_h features (and k̂ alike), "
         "then softmax(q̂ k̂ᵀ / √D_h, causal) v for each query head with its kv head h // n_rep.",
)

check_qk_norm_attention = QK_NORM_ATTENTION.checker(
    """Check ``qk_norm_attention(x, w_qkv, w_o, n_heads, n_kv_heads, eps)``: causal grouped-query attention
    whose queries and keys are RMS-normalised per head over D_h (ε inside the root, no gain) before the
    scores q̂ k̂ᵀ / √D_h; weights in nn.Linear's layout, w_qkv's rows W_q, W_k, W_v.""")


# --- Task 4: logit soft-capping ---------------------------------------------------------------------------

def _softcap(logits, cap, *, form="right"):
    """Soft-capping with knobs (computed in float64): what a solution with a given mistake computes."""
    z = logits.double()
    out = {"right": lambda: cap * torch.tanh(z / cap),
           "tanh-times-cap": lambda: cap * torch.tanh(z),
           "clamp": lambda: z.clamp(-cap, cap),
           "no-multiply": lambda: torch.tanh(z / cap),
           "tanh": lambda: torch.tanh(z),
           "times-inside": lambda: cap * torch.tanh(z * cap),
           "divide": lambda: z / cap,
           "above-only": lambda: torch.where(z.abs() > cap, cap * torch.tanh(z / cap), z),
           "one-sided": lambda: torch.where(z > 0, cap * torch.tanh(z / cap), z)}[form]()
    return out.to(logits.dtype)


def _softcap_reference(logits, cap):
    return _softcap(logits, cap)


def _softcap_cases(gen) -> list[Case]:
    cases = []
    for shape, scale, cap, dtype, what in [
        ((2, 5, 11), 20.0, 15.0, _F32, "logits around the cap"),
        ((3, 17), 60.0, 30.0, _F64, "logits far beyond the cap"),
        ((4, 9), 0.5, 30.0, _F64, "small logits (far below the cap)"),
        ((2, 3, 8), 3.0, 0.5, _F32, "a cap below 1"),
        ((2, 10), 20.0, 15.0, _BF16, "bfloat16 logits"),
        ((7,), 10.0, 5, _F64, "one row, an int cap"),
        ((1, 4, 6), 40.0, 50.0, _F32, "Gemma 2's attention cap (50)"),
    ]:
        z = _randn(gen, *shape, dtype=dtype, scale=scale)
        cases.append(Case(f"{what}: logits {describe(z)} (entries of size about {scale:g}), cap={cap}",
                          (z, cap)))
    return cases


def _softcap_mistake(form):
    return lambda logits, cap: _softcap(logits, cap, form=form)


SOFTCAP = Task(
    name="softcap", seed=1304, cases=_softcap_cases, reference=_softcap_reference,
    output=TensorOutput("the logits' dtype"),
    mistakes=[
        Mistake("tanh is applied to the logits themselves and multiplied by the cap: c · tanh(z) saturates "
                "for every logit above about 2 and changes small logits by a factor c. Divide by c inside: "
                "c · tanh(z / c).", _softcap_mistake("tanh-times-cap")),
        Mistake("the logits are clamped to [−cap, cap] (a hard cap): every logit beyond it becomes the same "
                "number and gets zero gradient. Soft-capping is smooth: c · tanh(z / c).",
                _softcap_mistake("clamp")),
        Mistake("the result is not multiplied back by the cap: tanh(z / c) lies in (−1, 1). Soft-capping "
                "returns c · tanh(z / c), in (−c, c) and close to z where |z| ≪ c.",
                _softcap_mistake("no-multiply")),
        Mistake("the cap is not used: tanh(z) bounds the logits by 1. Soft-capping is c · tanh(z / c).",
                _softcap_mistake("tanh")),
        Mistake("the logits are multiplied by the cap inside the tanh; they are DIVIDED by it: "
                "c · tanh(z / c).", _softcap_mistake("times-inside")),
        Mistake("the logits are only divided by the cap (a temperature): soft-capping passes them through "
                "c · tanh(z / c), which leaves small logits almost unchanged and bounds large ones.",
                _softcap_mistake("divide")),
        Mistake("only the logits beyond the cap are changed; c · tanh(z / c) applies to every logit (below "
                "the cap it is close to z, but not equal).", _softcap_mistake("above-only")),
        Mistake("only the positive logits are capped; c · tanh(z / c) is odd: large negative logits are "
                "bounded by −c too.", _softcap_mistake("one-sided")),
    ],
    hint="Evaluate your function at z = 0, at a logit much smaller than the cap and at one much larger: "
         "c · tanh(z / c) gives 0, about z, and just under c.",
)

check_softcap = SOFTCAP.checker(
    """Check ``softcap(logits, cap)``: cap · tanh(logits / cap), elementwise, in the logits' dtype and
    shape.""")


# --- Task 5: the warmup–stable–decay schedule ------------------------------------------------------------

def _wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown, *, rounding="round", clamp_start=True,
         floor=True, span=0, shape="linear", warmup="plus-one", after="min", stable=True):
    """The schedule with knobs: what a solution with a given mistake computes."""
    W, S = warmup_steps, total_steps
    if step < W:
        return lr * (step + 1) / W if warmup == "plus-one" else lr * step / W
    if after == "min" and step >= S:
        return min_lr
    C = max(1, {"round": round, "floor": math.floor, "ceil": math.ceil}[rounding](cooldown * S))
    start = S - C
    if clamp_start:
        start = max(W, start)
    if not stable:
        start = W
    if step < start:
        return lr
    low = min_lr if floor else 0.0
    progress = (step - start) / max(1, S - start + span)
    if shape == "cosine":
        return low + 0.5 * (lr - low) * (1 + math.cos(math.pi * progress))
    return lr + (low - lr) * progress


def _wsd_reference(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    return training.lr_at(step, lr=lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps,
                          cooldown=cooldown)


def _wsd_cases(gen) -> list[Case]:
    cases = []
    for step, lr, min_lr, warmup, total, cooldown, what in [
        (0, 1e-3, 1e-4, 100, 1000, 0.2, "the very first step"),
        (99, 1e-3, 1e-4, 100, 1000, 0.2, "the last warmup step"),
        (100, 1e-3, 1e-4, 100, 1000, 0.2, "the first stable step"),
        (500, 1e-3, 1e-4, 100, 1000, 0.2, "the middle of the stable phase"),
        (799, 1e-3, 1e-4, 100, 1000, 0.2, "the last stable step"),
        (900, 1e-3, 1e-4, 100, 1000, 0.2, "halfway through the cool-down"),
        (850, 1e-3, 1e-4, 100, 1000, 0.2, "a quarter of the way through the cool-down"),
        (999, 1e-3, 1e-4, 100, 1000, 0.2, "the step before total_steps"),
        (1000, 1e-3, 1e-4, 100, 1000, 0.2, "step == total_steps"),
        (1500, 1e-3, 1e-4, 100, 1000, 0.2, "a step after total_steps"),
        (850, 0.02, 0.002, 50, 1003, 0.2, "a cool-down of 200.6 steps, rounded"),
        (850, 0.02, 0.002, 50, 1001, 0.2, "a cool-down of 200.2 steps, rounded"),
        (300, 1e-3, 1e-4, 200, 1000, 0.9, "a cool-down longer than the steps after the warmup"),
        (0, 3e-3, 0.0, 0, 500, 0.1, "step 0 without warmup (warmup_steps = 0), min_lr = 0"),
        (470, 3e-3, 0.0, 0, 500, 0.1, "late in the cool-down, without warmup, min_lr = 0"),
        (150, 1.0, 0.1, 10, 210, 1.0, "a cool-down over the whole run (cooldown = 1)"),
        (1999, 0.02, 0.002, 100, 2000, 0.05, "the last step of a short cool-down"),
    ]:
        cases.append(Case(f"{what}: step={step}, lr={_short(lr)}, min_lr={_short(min_lr)}, "
                          f"warmup_steps={warmup}, total_steps={total}, cooldown={cooldown}",
                          (step, lr, min_lr, warmup, total, cooldown)))
    return cases


def _wsd_mistake(**knobs):
    return lambda *args: _wsd(*args, **knobs)


LR_WSD = Task(
    name="lr_wsd", seed=1305, cases=_wsd_cases, reference=_wsd_reference,
    output=NumberOutput("the learning rate"), rtol=1e-9, atol=1e-12,
    mistakes=[
        Mistake("the warmup starts at 0: step 0 would not move the weights at all. Step s of the warmup uses "
                "lr · (s + 1) / warmup_steps.", _wsd_mistake(warmup="zero")),
        Mistake("the cool-down can start before the warmup has ended: it starts at max(warmup_steps, "
                "total_steps − C), and then falls over the steps from there to total_steps.",
                _wsd_mistake(clamp_start=False)),
        Mistake("the cool-down's length C is rounded down; it is round(cooldown · total_steps), rounded to "
                "the nearest integer.", _wsd_mistake(rounding="floor")),
        Mistake("the cool-down's length C is rounded up; it is round(cooldown · total_steps), rounded to the "
                "nearest integer.", _wsd_mistake(rounding="ceil")),
        Mistake("the schedule decays to 0 instead of min_lr: the cool-down falls linearly from lr to "
                "min_lr.", _wsd_mistake(floor=False)),
        Mistake("the cool-down reaches min_lr one step early: it falls over total_steps − start steps and "
                "reaches min_lr exactly at step total_steps.", _wsd_mistake(span=-1)),
        Mistake("the cool-down falls over one step too many, so it has not reached min_lr at step "
                "total_steps − 1 as far as it should: divide by total_steps − start.", _wsd_mistake(span=1)),
        Mistake("the cool-down follows a cosine; this schedule's is linear: lr + (min_lr − lr) · (step − "
                "start) / (total_steps − start).", _wsd_mistake(shape="cosine")),
        Mistake("there is no stable phase: the rate starts falling as soon as the warmup ends. It stays at "
                "lr until the last C = round(cooldown · total_steps) steps.", _wsd_mistake(stable=False)),
        Mistake("after total_steps the line keeps falling below min_lr: from total_steps on, the learning "
                "rate stays at min_lr.", _wsd_mistake(after="continue")),
    ],
    forbid=Forbid(modules=(training, torch.optim.lr_scheduler)),
    hint="Evaluate your schedule by hand at step 0, at warmup_steps − 1, in the stable phase, at the first "
         "step of the cool-down, halfway through it and at total_steps.",
)

check_lr_wsd = LR_WSD.checker(
    """Check ``lr_wsd(step, lr, min_lr, warmup_steps, total_steps, cooldown) -> float``: lr · (s + 1) / W
    during the warmup, lr until start = max(W, S − max(1, round(cooldown · S))), then linear to min_lr at
    S, min_lr after.""")


# --- Task 6: predictions ----------------------------------------------------------------------------------

def _true_predictions() -> dict[str, float]:
    a, b, c = muon.NS_COEFFICIENTS
    gen = torch.Generator().manual_seed(1306)
    U, _, Vh = torch.linalg.svd(torch.randn(256, 64, generator=gen, dtype=_F64), full_matrices=False)
    update = 0.2 * math.sqrt(256) * (U @ Vh)  # (256, 64): s · U Vᵀ
    q = F.rms_norm(torch.randn(64, generator=gen, dtype=_F64), (64,), eps=1e-12)  # |q| = √64
    return {
        "ns_at_one": a * 1 + b * 1 ** 3 + c * 1 ** 5,
        "muon_rms": update.pow(2).mean().sqrt().item(),
        "qk_max_score": (q @ q / math.sqrt(64)).item(),  # a key equal to the query: cos = 1
        "capped_logit": 30 * math.tanh(60 / 30),
        "wsd_lr": training.lr_at(1700, lr=0.02, min_lr=0.002, warmup_steps=100, total_steps=2000,
                                  cooldown=0.3),
    }


_WRONG_PREDICTIONS = {
    "ns_at_one": [
        (1.0, "the quintic is not built to keep 1 fixed: its coefficients trade exactness for speed. "
              "Evaluate p(1) = a + b + c."),
    ],
    "muon_rms": [
        (0.1, "the scale uses the LARGER side: s = 0.2 · √max(rows, cols)."),
        (1 / 16, "that is the RMS of U Vᵀ alone; the update is s · U Vᵀ."),
        (3.2, "that is the scale s; the update's RMS is s times the RMS of U Vᵀ, whose min(rows, cols) "
              "singular values are 1."),
    ],
    "qk_max_score": [
        (1.0, "RMS normalisation leaves each vector √D_h long, not 1 long: q̂ · k̂ can reach D_h."),
        (64.0, "the scores are still divided by √D_h after QK-norm."),
        (1 / 8, "RMS normalisation leaves each vector √D_h long, not 1 long: q̂ · k̂ can reach D_h."),
    ],
    "capped_logit": [
        (30.0, "soft-capping never reaches the cap: tanh(2) < 1."),
        (60.0, "a logit twice the cap is changed by soft-capping: c · tanh(z / c)."),
        (math.tanh(2), "that is tanh(z / c) alone; soft-capping multiplies it back by c."),
    ],
    "wsd_lr": [
        (0.02, "step 1700 is inside the cool-down, which holds the last round(0.3 · 2000) steps."),
        (0.01, "the cool-down falls to min_lr, not to 0."),
    ],
}

SPEEDRUN_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=1306,
    rtol=2e-3,
    atol={"ns_at_one": 1e-3, "muon_rms": 1e-3, "qk_max_score": 1e-3, "capped_logit": 1e-3, "wsd_lr": 1e-5},
    advice="Work it out on paper first, then run the computations below.",
)

check_speedrun_predictions = SPEEDRUN_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the quintic at σ = 1, the RMS of Muon's scaled update for a 256 × 64
    matrix, the largest score QK-norm allows at D_h = 64, a logit of 60 soft-capped at 30, and the WSD
    learning rate at step 1700.""")

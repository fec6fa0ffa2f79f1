"""Checkers for exercise 04 (feed-forward networks).

1. ``llama_ffn`` — find and fix the bug in a SwiGLU that reads a Llama checkpoint's gate from the wrong
   projection.
2. ``top_k_swiglu`` — extend SwiGLU to keep only the k largest hidden contributions of each position.
3. ``geglu_backward`` — derive the backward pass of a GeGLU FFN (∂L/∂x and the three weights) and check it.
4. ``predictions`` — predict four numbers before computing them (a function returning a dict).

A wrong answer is named from what it gets wrong (``_discrepancy``): which weight the output uses as the gate,
the up and the down projection; the gate's activation, measured on a probe; which units a top-k kept and
with which values (read through a diagonal W_down); GELU and GELU′ as the student computes them (read off
grad_x of a probe), written in the pieces of Φ(a) + a φ(a); what each weight gradient sums.
"""

from __future__ import annotations

import itertools
import math

import torch

from .. import ffn as ref
from ._predictions import predictions_task
from ._core import Case, Forbid, Plain, Task, TensorOutput, TupleOutput, describe
from ._discrepancy import probe, reasoned_predictions, remembering, safe, same_tensor

__all__ = ["check_llama_ffn", "check_top_k_swiglu", "check_geglu_backward", "check_ffn_predictions"]


def _randn(gen, *shape, dtype=torch.float64, scale=1.0):
    return (scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)


def _silu(z):
    return z * torch.sigmoid(z)


def _weights(gen, d_model, d_ff, dtype=torch.float64):
    """w_gate, w_up (D, F) and w_down (F, D), in the row-vector convention."""
    return (_randn(gen, d_model, d_ff, dtype=dtype, scale=d_model ** -0.5),
            _randn(gen, d_model, d_ff, dtype=dtype, scale=d_model ** -0.5),
            _randn(gen, d_ff, d_model, dtype=dtype, scale=d_ff ** -0.5))


# --- reasoning about a wrong output: what the gate's activation is, which weight does what ---------------

_Z = torch.linspace(-6.0, 6.0, 49, dtype=torch.float64)  # gate pre-activations a probe feeds in


def _gelu_tanh(z):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * z * (1 + torch.tanh(c * (z + 0.044715 * z**3)))


# Curves a gate's activation is compared with, to say what the student's gate computes.
_GATE_CURVES = {
    "SiLU(z) = z·σ(z)": _silu,
    "the sigmoid σ(z) (the original GLU's gate); SwiGLU's gate is SiLU(z) = z · σ(z)": torch.sigmoid,
    "ReLU(z); SwiGLU's gate is SiLU(z) = z · σ(z), which lets a small negative part through": torch.relu,
    "GELU(z) = z·Φ(z); SwiGLU's gate is SiLU(z) = z · σ(z)": lambda z: z * _cdf(z),
    "GELU's tanh approximation; SwiGLU's gate is SiLU(z) = z · σ(z)": _gelu_tanh,
    "z itself: the activation is missing (SwiGLU's gate is SiLU(z) = z · σ(z))": lambda z: z,
    "tanh(z); SwiGLU's gate is SiLU(z) = z · σ(z)": torch.tanh,
    "z·σ(−z): a sign slip inside the exponential (SiLU(z) = z / (1 + e^(−z)))": lambda z: z * torch.sigmoid(-z),
    "z·σ(β·z) with β about 1.7, GELU's sigmoid approximation; SwiGLU's gate is SiLU(z) = z · σ(z) (β = 1)":
        lambda z: z * torch.sigmoid(1.702 * z),
    "softplus(z); SwiGLU's gate is SiLU(z) = z · σ(z)": torch.nn.functional.softplus,
}


def _name_curve(values: torch.Tensor, z: torch.Tensor, curves: dict) -> str | None:
    """The first curve the measured values follow, or None."""
    for name, f in curves.items():
        if torch.allclose(values, f(z), rtol=1e-4, atol=1e-6):
            return name
    return None


def _describe_gate(values: torch.Tensor, z: torch.Tensor = _Z) -> str:
    """What a measured gate activation g(z) computes, or how it departs from SiLU."""
    named = _name_curve(values, z, _GATE_CURVES)
    if named:
        return f"your gate computes {named}"
    silu = _silu(z)
    low, high = z < -2, z > 2
    where = []
    if not torch.allclose(values[low], silu[low], rtol=1e-3, atol=1e-4):
        where.append("negative pre-activations (SiLU goes to 0 there, from below)")
    if not torch.allclose(values[high], silu[high], rtol=1e-3, atol=1e-4):
        where.append("positive pre-activations (SiLU grows like z there)")
    middle = ~(low | high)
    if not where or not torch.allclose(values[middle], silu[middle], rtol=1e-3, atol=1e-4):
        where.append("pre-activations near 0 (SiLU(0) = 0, with slope ½)")
    return f"your gate's activation is not SiLU(z) = z · σ(z): it differs for {' and '.join(where)}"


_NAMES = ("w1", "w2", "w3")


def _role_story(got, x, w1, w2, w3) -> str | None:
    """Which weight the student's output uses as the gate, the up and the down projection (and whether it
    transposes each): tried over every assignment the shapes allow."""
    weights = dict(zip(_NAMES, (w1, w2, w3)))
    d_model = x.shape[-1]
    for gate, up, down in itertools.permutations(_NAMES):
        for flips in itertools.product((True, False), repeat=3):
            ws = [weights[n].T if f else weights[n] for n, f in zip((gate, up, down), flips)]
            if ws[0].shape[0] != d_model or ws[1].shape[0] != d_model or ws[0].shape[1] != ws[2].shape[0]:
                continue
            if ws[1].shape != ws[0].shape or ws[2].shape[1] != d_model:
                continue
            candidate = (_silu(x @ ws[0]) * (x @ ws[1])) @ ws[2]
            if not same_tensor(candidate, got, rtol=1e-4, atol=1e-5):
                continue
            roles = list(zip(("gate", "up projection", "down projection"), (gate, up, down), flips))
            if (gate, up, down) == ("w1", "w3", "w2") and all(flips):
                return None  # that is the right answer: the difference is elsewhere
            if (gate, up, down) == ("w3", "w1", "w2") and all(flips):
                return ("this is still what the given version computes: the gate reads x @ w3.T. In a Llama "
                        "checkpoint w1 is the gate projection (Hugging Face's gate_proj) and w3 the up projection "
                        "(up_proj), which enters linearly: doubling w3 must double the output.")
            if (gate, up, down) == ("w1", "w3", "w2"):
                unflipped = [n for _, n, f in roles if not f]
                listed = unflipped[0] if len(unflipped) == 1 else ", ".join(unflipped[:-1]) + " and " + unflipped[-1]
                return (f"{listed} {'is' if len(unflipped) == 1 else 'are'} used without "
                        f"transposing: the weights are stored as nn.Linear stores them, (out_features, in_features), "
                        f"so each projection is x @ w.T.")
            uses = ", ".join(f"{n}{'' if f else ' (not transposed)'} as the {r}" for r, n, f in roles)
            return (f"your function uses {uses}. In a Llama checkpoint w1 is the gate (gate_proj), w3 the up "
                    f"projection (up_proj) and w2 the down projection (down_proj), each stored as (out_features, "
                    f"in_features) and applied as x @ w.T.")
    return None


# --- Task 1: a Llama checkpoint's FFN (find and fix) ---------------------------------------------------

def _llama_reference(x, w1, w2, w3):
    return ref.swiglu(x, w1.T, w3.T, w2.T)  # Llama: w1 = gate, w3 = up, w2 = down; stored (out, in)


def _llama_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    cases = []
    for shape, d_ff, dtype, scale, note in [
        ((3, 8), 8, f64, 1.0, " and F = D = 8 (square weights)"),
        ((4, 8), 20, f64, 1.0, ", F = 20"),
        ((2, 5, 16), 44, f64, 1.0, ", F = 44"),
        ((6,), 16, f64, 1.0, " (one position), F = 16"),
        ((4, 12), 32, f64, 3.0, ", F = 32, large inputs"),
        ((2, 3, 16), 40, f32, 1.0, ", F = 40 (float32)"),
    ]:
        x = _randn(gen, *shape, dtype=dtype, scale=scale)
        d = shape[-1]
        w1 = _randn(gen, d_ff, d, dtype=dtype, scale=d ** -0.5)  # gate_proj, (F, D)
        w2 = _randn(gen, d, d_ff, dtype=dtype, scale=d_ff ** -0.5)  # down_proj, (D, F)
        w3 = _randn(gen, d_ff, d, dtype=dtype, scale=d ** -0.5)  # up_proj, (F, D)
        cases.append(Case(f"x: {describe(x)}{note}; w1 and w3 {tuple(w1.shape)}, w2 {tuple(w2.shape)}",
                          (x, w1, w2, w3)))
    return cases


@safe
def _llama_explain(got, want, case: Case) -> str | None:
    x, w1, w2, w3 = case.args
    if got.shape != want.shape:
        if got.shape[-1] == w1.shape[0] != want.shape[-1]:
            return "the result is the hidden features, of width F: project them back with @ w2.T."
        return None
    if same_tensor(got - x, want, rtol=1e-4, atol=1e-5):
        return ("you added the input x to the output: the residual connection belongs to the block, around the "
                "FFN; the FFN itself returns (SiLU(x w1ᵀ) ⊙ x w3ᵀ) w2ᵀ.")
    roles = _role_story(got, x, w1, w2, w3)
    if roles:
        return roles
    if got.shape[-1] == w1.shape[0] and same_tensor(got, _silu(x @ w1.T) * (x @ w3.T) @ torch.eye(got.shape[-1],
                                                                                                dtype=x.dtype)):
        return "the result is the hidden features, of width F: project them back with @ w2.T."
    # the gate and the up path, probed: x = (z, c), w1 reads z, w3 reads c, w2 writes the hidden unit out
    n = _Z.numel()
    w1p = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # (F = 1, D = 2): gate = z
    w3p = torch.tensor([[0.0, 1.0]], dtype=torch.float64)  # up = c
    w2p = torch.tensor([[1.0], [0.0]], dtype=torch.float64)  # (D, F): out[0] = hidden

    def run(z, c):
        out = probe(torch.stack([z, torch.full_like(z, c)], dim=-1), w1p, w2p, w3p)
        return None if not isinstance(out, torch.Tensor) or out.shape != (z.numel(), 2) else out[:, 0].double()

    one, two = run(_Z, 1.0), run(_Z, 2.0)
    if one is None or two is None:
        return None
    if torch.allclose(two, 2 * one, rtol=1e-4, atol=1e-6):
        if torch.allclose(one, _silu(_Z), rtol=1e-4, atol=1e-6):
            return None
        return _describe_gate(one) + "."
    doubled = run(2 * _Z, 1.0)
    if doubled is not None and torch.allclose(two, doubled, rtol=1e-4, atol=1e-6):
        return ("the activation is applied after the product: SwiGLU is SiLU(x w1ᵀ) ⊙ (x w3ᵀ), the gate "
                "through SiLU first, then multiplied by the up projection, which stays linear (doubling w3 "
                "doubles the output).")
    ratio = two / one
    silu_ratio = (_silu(torch.tensor(2.0)) / _silu(torch.tensor(1.0))).item()
    if torch.allclose(ratio[one.abs() > 1e-6], torch.tensor(silu_ratio, dtype=torch.float64), rtol=1e-4):
        return ("SiLU is applied to both projections; only the gate goes through SiLU, the up projection "
                "x @ w3.T stays linear (doubling w3 must double the output).")
    if torch.allclose(ratio[one.abs() > 1e-6], ratio[one.abs() > 1e-6][0], rtol=1e-4):
        return ("the up projection does not enter linearly (doubling it must double the output): only the "
                "gate, x w1ᵀ, goes through SiLU; x w3ᵀ multiplies it as it is.")
    return None


LLAMA_FFN = Task(
    name="llama_ffn", reference=_llama_reference, cases=_llama_cases, seed=401, rtol=1e-4, atol=1e-5,
    run=remembering, explain=_llama_explain,
    forbid=Forbid(operations=("silu",), modules=(ref,)),
    hint="Check which projection enters the output linearly (scale it by 2) and compare with Llama's naming "
         "of w1, w2, w3.",
)

check_llama_ffn = LLAMA_FFN.checker(
    """Check ``llama_ffn(x, w1, w2, w3)`` = (SiLU(x w1ᵀ) ⊙ (x w3ᵀ)) w2ᵀ, the FFN of a Llama checkpoint with
    its weights in nn.Linear's (out, in) layout: w1 the gate, w3 the up and w2 the down projection.""")


# --- Task 2: keep the k largest hidden contributions (extend) -------------------------------------------

def _top_k_reference(x, w_gate, w_up, w_down, k):
    hidden = ref.silu(x @ w_gate) * (x @ w_up)  # (..., F): one contribution weight per slot
    index = hidden.abs().topk(k, dim=-1).indices  # (..., k): the k largest in magnitude
    kept = torch.zeros_like(hidden).scatter(-1, index, hidden.gather(-1, index))  # (..., F)
    return kept @ w_down  # (..., D)


def _top_k_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    cases = []
    for shape, d_ff, k, dtype, note in [
        ((5, 8), 16, 4, f64, ""),
        ((2, 3, 8), 24, 1, f64, ", keeping one unit"),
        ((4, 8), 12, 11, f64, ", keeping all but one"),
        ((3, 6), 10, 10, f64, ", keeping every unit (k = F)"),
        ((16,), 32, 5, f64, " (one position)"),
        ((2, 4, 16), 48, 8, f32, " (float32)"),
    ]:
        x = _randn(gen, *shape, dtype=dtype, scale=2.0)
        cases.append(Case(f"x: {describe(x)}, F = {d_ff}, k = {k}{note}",
                          (x, *_weights(gen, shape[-1], d_ff, dtype), k)))
    return cases


def _kept_units(x, w_gate, w_up, k):
    """The student's kept hidden contributions, read through W_down = diag(d) (distinct scales, so that a
    unit's row of W_down has a size of its own): out = kept · d, so kept = out / d. None if the probe fails."""
    F = w_gate.shape[1]
    order = torch.randperm(F, generator=torch.Generator().manual_seed(7))
    scales = torch.linspace(0.5, 2.0, F, dtype=torch.float64)[order]
    out = probe(x, w_gate, w_up, torch.diag(scales), k)
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return None, scales
    return out.double() / scales, scales


def _selection_story(kept, h, a, u, scales, k) -> str | None:
    """What a top-k selection gets wrong, from which units it kept and the values it kept them with."""
    F = h.shape[-1]
    tiny = 1e-9 * h.abs().max()
    chosen = kept.abs() > tiny
    counts = chosen.sum(-1)
    values_ok = torch.allclose(kept[chosen], h[chosen], rtol=1e-6, atol=1e-9)
    if not values_ok:
        if torch.allclose(kept[chosen], h.abs()[chosen], rtol=1e-6, atol=1e-9):
            return ("the kept units carry |h_i|, not h_i: the magnitude only decides which units stay; each keeps "
                    "its own signed value.")
        if torch.allclose(kept[chosen], _silu(a)[chosen], rtol=1e-6, atol=1e-9):
            return ("the kept units carry the gate SiLU(x W_gate)_i alone; a unit's contribution is the product "
                    "h_i = SiLU(x W_gate)_i · (x W_up)_i.")
        if torch.allclose(kept[chosen], u[chosen], rtol=1e-6, atol=1e-9):
            return ("the kept units carry the up projection (x W_up)_i alone; a unit's contribution is the "
                    "product h_i = SiLU(x W_gate)_i · (x W_up)_i.")
        factor = kept / torch.where(chosen, h, torch.ones_like(h))
        per_row = [factor[i][chosen[i]] for i in range(h.shape[0])]
        if all(len(f) and torch.allclose(f, f[0].expand_as(f), rtol=1e-6) for f in per_row):
            return ("the kept units are rescaled (each position's by its own factor): keep the k largest h_i as "
                    "they are and zero the others; nothing is renormalised.")
        return None
    if (counts == k + 1).all():
        return ("each position keeps k + 1 units: with a threshold, keep the units ABOVE the (k+1)-th largest "
                "magnitude, or use topk(k).")
    if (counts == k - 1).all():
        return "each position keeps k − 1 units; it should keep exactly k (a strict > against the k-th largest?)."
    right = torch.zeros_like(chosen).scatter(-1, h.abs().topk(k, dim=-1).indices, True)
    if (counts == F - k).all() and torch.equal(chosen, ~right):
        return "the k largest units are dropped and the rest kept; it is the other way round."
    if (counts == counts[0]).all() and counts[0] != k:
        m = int(counts[0])
        return (f"each position keeps {m} units; it should keep exactly k (with a threshold, compare with the "
                f"k-th largest magnitude itself, or use topk(k)).")
    if not (counts == k).all():
        if (chosen.sum(-2) == min(k, h.shape[-2])).all():
            return ("each hidden unit keeps its k largest positions: the k largest are taken over the positions "
                    "(dimension −2); each position keeps its own k hidden units, over the last dimension.")
        if (counts >= k).all():
            return ("some positions keep more than k units: the threshold is shared by the batch (a min or max "
                    "over every position); each position needs its own k-th largest magnitude (reduce over the "
                    "last dimension only, keepdim=True).")
        return ("positions keep different numbers of units: one threshold is used for the whole batch; each "
                "position keeps its own k largest units.")
    if torch.equal(chosen, right):
        return None
    scores = {
        "the units are ranked by their signed value; rank them by magnitude |h_i|. A large negative h_i adds "
        "−|h_i| times its value vector, as big a contribution as a large positive one": h,
        "the units are ranked by the gate SiLU(x W_gate) alone; a unit's contribution is the product "
        "h_i = SiLU(x W_gate)_i · (x W_up)_i: rank by |h_i|": _silu(a).abs(),
        "the units are ranked by the gate's pre-activation |x W_gate|; rank by the contribution "
        "|h_i| = |SiLU(x W_gate)_i · (x W_up)_i|": a.abs(),
        "the units are ranked by the up projection alone; a unit's contribution is the product "
        "h_i = SiLU(x W_gate)_i · (x W_up)_i: rank by |h_i|": u.abs(),
        "the units are ranked by |h_i| times the size of their row of W_down; the task keeps the k largest "
        "|h_i| themselves": h.abs() * scales,
    }
    for why, score in scores.items():
        if torch.equal(chosen, torch.zeros_like(chosen).scatter(-1, score.topk(k, dim=-1).indices, True)):
            return why + "."
    return ("a unit you dropped has a larger |h_i| than one you kept: keep, at each position, the k units whose "
            "h_i = SiLU(x W_gate)_i · (x W_up)_i is largest in magnitude.")


@safe
def _top_k_explain(got, want, case: Case) -> str | None:
    x, w_gate, w_up, w_down, k = case.args
    if got.shape != want.shape:
        if got.shape[-1] == w_gate.shape[1] != want.shape[-1]:
            return "the result is the kept hidden features, of width F: project them back with @ w_down."
        return None
    gen = torch.Generator().manual_seed(11)
    P, F, kk = 6, 8, 3
    xp = 2 * torch.randn(P, F, generator=gen, dtype=torch.float64)
    wg = torch.randn(F, F, generator=gen, dtype=torch.float64) / math.sqrt(F)
    wu = torch.randn(F, F, generator=gen, dtype=torch.float64) / math.sqrt(F)
    a, u = xp @ wg, xp @ wu
    every, _ = _kept_units(xp, wg, wu, F)  # k = F: every unit, so the hidden values themselves
    if every is not None and not torch.allclose(every, _silu(a) * u, rtol=1e-6, atol=1e-9):
        gate = every / u
        if (u.abs() > 1e-3).all():
            named = _name_curve(gate.reshape(-1), a.reshape(-1), _GATE_CURVES)
            if named:
                return f"your gate computes {named}."
    kept, scales = _kept_units(xp, wg, wu, kk)
    if kept is None:
        return None
    return _selection_story(kept, _silu(a) * u, a, u, scales, kk)


TOP_K_SWIGLU = Task(
    name="top_k_swiglu", reference=_top_k_reference, cases=_top_k_cases, seed=402, rtol=1e-4, atol=1e-5,
    run=remembering, explain=_top_k_explain,
    forbid=Forbid(operations=("silu",), modules=(ref,)),
    hint="Print, for one position, the F contributions h_i, the k you keep and the output; compare with "
         "the full SwiGLU when k = F.",
)

check_top_k_swiglu = TOP_K_SWIGLU.checker(
    """Check ``top_k_swiglu(x, w_gate, w_up, w_down, k)``: SwiGLU in which each position keeps only the k
    hidden units h_i = SiLU(x W_gate)_i · (x W_up)_i largest in magnitude (the others are zeroed) before
    the down projection; weights in the row-vector convention.""")


# --- Task 3: the backward pass of GeGLU (derive) --------------------------------------------------------

def _gelu(a):
    return 0.5 * a * (1.0 + torch.erf(a / math.sqrt(2.0)))


def _cdf(a):
    return 0.5 * (1.0 + torch.erf(a / math.sqrt(2.0)))


def _pdf(a, norm=True):
    return torch.exp(-0.5 * a * a) / (math.sqrt(2.0 * math.pi) if norm else 1.0)


def _gelu_tanh_prime(a):
    c = math.sqrt(2.0 / math.pi)
    inner = c * (a + 0.044715 * a**3)
    t = torch.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * c * (1 + 3 * 0.044715 * a * a)


def _geglu_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    x_hand = torch.tensor([[1.0, -2.0]], dtype=f64)
    w_gate_hand = torch.tensor([[1.0, 0.0, -1.0], [0.5, 1.0, 0.0]], dtype=f64)
    w_up_hand = torch.tensor([[0.0, 2.0, 1.0], [1.0, -1.0, 0.5]], dtype=f64)
    w_down_hand = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]], dtype=f64)
    cases = [Case("one token with D = 2, F = 3 and grad_out (1, 1) (float64)",
                  (x_hand, w_gate_hand, w_up_hand, w_down_hand, torch.ones(1, 2, dtype=f64)))]
    for shape, d_ff, dtype, scale, note in [
        ((4, 6), 6, f64, 1.0, " and F = D = 6 (square weights)"),
        ((5, 8), 12, f64, 1.0, ", F = 12"),
        ((2, 3, 8), 16, f64, 1.0, ", F = 16"),
        ((8,), 12, f64, 1.0, " (one position), F = 12"),
        ((4, 6), 10, f64, 3.0, ", F = 10, large inputs"),
        ((2, 4, 8), 20, f32, 1.0, ", F = 20 (float32)"),
    ]:
        x = _randn(gen, *shape, dtype=dtype, scale=scale)
        weights = _weights(gen, shape[-1], d_ff, dtype)
        grad_out = _randn(gen, *shape, dtype=dtype)
        cases.append(Case(f"x: {describe(x)}{note}, random weights and grad_out of x's shape",
                          (x, *weights, grad_out)))
    return cases


def _geglu_explain_shapes(got, want, case) -> str | None:
    names = ("grad_x", "grad_w_gate", "grad_w_up", "grad_w_down")
    sources = ("x", "w_gate", "w_up", "w_down")
    for name, source, g, w in zip(names, sources, got, want):
        if g.shape != w.shape:
            if name != "grad_x" and g.shape == w.shape[::-1]:
                return (f"{name} has the transposed shape {tuple(g.shape)}; a weight's gradient has the weight's "
                        f"shape {tuple(w.shape)} (for y = x W, ∂L/∂W = xᵀ ∂L/∂y).")
            if name != "grad_x":
                return (f"{name} must have {source}'s shape {tuple(w.shape)}: the weight is shared by every "
                        f"position, so its gradient sums the contributions of all of them (every leading "
                        f"dimension of x).")
            return f"{name} must have the shape of {source}, {tuple(w.shape)}; it has shape {tuple(g.shape)}."
    return None


# What the gate's derivative and value can be made of: the pieces of GELU′(a) = Φ(a) + a φ(a) and of
# GELU(a) = a Φ(a), so that an error is named by the term it misses, doubles or flips.
def _gelu_pieces(a):
    return {"Φ(a)": _cdf(a), "a φ(a)": a * _pdf(a), "φ(a)": _pdf(a), "GELU(a)": _gelu(a),
            "1": torch.ones_like(a)}


def _prime_story(prime, a) -> str | None:
    """What a measured GELU′ gets wrong: named curves first, then as a combination of GELU′'s pieces."""
    curves = {
        "this is the derivative of GELU's tanh approximation; the task's GELU is the exact one, a Φ(a), whose "
        "derivative is Φ(a) + a φ(a)": _gelu_tanh_prime,
        "the gate's gradient is multiplied by GELU(a), the activation itself; it needs its derivative "
        "GELU′(a) = Φ(a) + a φ(a)": _gelu,
        "φ is not normalised: the standard normal density is φ(a) = exp(−a²/2) / √(2π)":
            lambda z: _cdf(z) + z * _pdf(z, norm=False),
    }
    named = _name_curve(prime, a, curves)
    if named:
        return named + "."
    pieces = _gelu_pieces(a)
    basis = torch.stack([pieces[n] for n in pieces], dim=1)
    coefs = torch.linalg.lstsq(basis, prime.unsqueeze(1)).solution.squeeze(1)
    rounded = torch.round(coefs * 2) / 2
    if not torch.allclose(basis @ rounded, prime, rtol=1e-6, atol=1e-8):
        return ("your GELU′(a) is not the derivative of GELU(a) = a Φ(a): differentiate the product, "
                "GELU′(a) = Φ(a) + a φ(a), and compare with a finite difference.")
    have = {n: float(c) for n, c in zip(pieces, rounded) if c != 0}
    if have == {"Φ(a)": 1.0}:
        return ("GELU′(a) is missing its second term: GELU(a) = a Φ(a), so by the product rule "
                "GELU′(a) = Φ(a) + a φ(a), with φ the standard normal density.")
    if have == {"a φ(a)": 1.0}:
        return ("GELU′(a) is missing its first term: by the product rule d/da [a Φ(a)] = Φ(a) + a φ(a); you "
                "kept only a φ(a).")
    if have == {"Φ(a)": 1.0, "φ(a)": 1.0}:
        return ("the second term of GELU′ is φ(a); it is a φ(a): the product rule differentiates a Φ(a) into "
                "1 · Φ(a) + a · Φ′(a), with Φ′ = φ.")
    if have == {"Φ(a)": 1.0, "a φ(a)": -1.0}:
        return "the second term of GELU′ has the wrong sign: GELU′(a) = Φ(a) + a φ(a)."
    terms = " + ".join(f"{c:g}·{n}" if c != 1 else n for n, c in have.items())
    return (f"your GELU′(a) works out to {terms}; the derivative of a Φ(a) is Φ(a) + a φ(a) (product "
            f"rule, Φ′ = φ).")


def _geglu_probe():
    """Run the remembered function on x = (a, 1) per position, with W_gate reading a, W_up reading 1 and
    W_down writing the hidden unit to the first output: then grad_x = (GELU′(a), GELU(a)) as the student
    computes them (the gate path's factor and the up path's), and the weights' gradients sum them."""
    a = _Z
    x = torch.stack([a, torch.ones_like(a)], dim=-1)  # (N, 2)
    w_gate = torch.tensor([[1.0], [0.0]], dtype=torch.float64)  # (D, F): a
    w_up = torch.tensor([[0.0], [1.0]], dtype=torch.float64)  # u = 1
    w_down = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # (F, D)
    grad_out = torch.stack([torch.ones_like(a), torch.zeros_like(a)], dim=-1)
    out = probe(x, w_gate, w_up, w_down, grad_out)
    if not isinstance(out, (tuple, list)) or len(out) != 4 or not isinstance(out[0], torch.Tensor):
        return None
    if out[0].shape != x.shape:
        return None
    return out[0][:, 0].double(), out[0][:, 1].double()


def _geglu_paths(x, w_gate, w_up, w_down, grad_out):
    """The right intermediate quantities of the backward pass, position by position."""
    D = w_gate.shape[0]
    xs, g = x.reshape(-1, D), grad_out.reshape(-1, D)
    a, u = xs @ w_gate, xs @ w_up
    grad_h = g @ w_down.T
    grad_u, grad_a = grad_h * _gelu(a), grad_h * u * (_cdf(a) + a * _pdf(a))
    return xs, g, a, u, grad_u, grad_a


def _weight_story(name, got, want, rows, cols, parts) -> str | None:
    """What one weight's gradient, rowsᵀ cols summed over positions, gets wrong."""
    n = rows.shape[0]
    if got.shape == want.shape[::-1] and same_tensor(got.T, want, 1e-4, 1e-6):
        return (f"{name} is transposed: for y = x W, ∂L/∂W = xᵀ ∂L/∂y, which has W's shape.")
    if got.shape != want.shape:
        return None
    if n > 1 and same_tensor(got * n, want, 1e-4, 1e-6):
        return (f"{name} is divided by the number of positions: L is a sum over positions, and a weight shared "
                f"by all of them gets the SUM of their contributions (xᵀ G), not their mean.")
    for i, where in ((n - 1, "last"), (0, "first")):
        if n > 1 and same_tensor(got, rows[i:i + 1].T @ cols[i:i + 1], 1e-4, 1e-6):
            return (f"{name} uses only the {where} position; a weight is shared by every position, so its gradient "
                    f"sums all of them (xᵀ G over all rows).")
    for what, other in parts.items():
        if same_tensor(got, other, 1e-4, 1e-6):
            return what
    return None


@safe
def _geglu_explain(got, want, case: Case) -> str | None:
    shapes = _geglu_explain_shapes(got, want, case)
    if shapes:
        return shapes
    x, w_gate, w_up, w_down, grad_out = case.args
    names = ("grad_x", "grad_w_gate", "grad_w_up", "grad_w_down")
    wrong = [n for n, g, w in zip(names, got, want) if not same_tensor(g, w, 1e-4, 1e-6)]
    xs, g, a, u, grad_u, grad_a = _geglu_paths(x, w_gate, w_up, w_down, grad_out)
    dtype = got[0].dtype
    # the activation's value and derivative as the student uses them
    measured = _geglu_probe()
    if measured is not None:
        prime, value = measured
        if torch.allclose(value, torch.zeros_like(value), atol=1e-12) and not torch.allclose(prime, 0 * prime):
            return ("grad_x follows only the gate's path; x also reaches the output through the up projection: "
                    "add ∂L/∂u W_upᵀ.")
        if torch.allclose(prime, torch.zeros_like(prime), atol=1e-12) and not torch.allclose(value, 0 * value):
            return ("grad_x follows only the up projection's path; x also reaches the output through the gate: "
                    "add ∂L/∂a W_gateᵀ.")
        value_ok = torch.allclose(value, _gelu(_Z), rtol=1e-5, atol=1e-7)
        prime_ok = torch.allclose(prime, _cdf(_Z) + _Z * _pdf(_Z), rtol=1e-5, atol=1e-7)
        if not value_ok:
            if torch.allclose(value, _Z, rtol=1e-5, atol=1e-7):
                return ("∂L/∂u multiplies by the gate pre-activation a; it multiplies by the gate's value GELU(a), "
                        "which is what scales u in the forward pass.")
            if torch.allclose(value, _cdf(_Z) + _Z * _pdf(_Z), rtol=1e-5, atol=1e-7):
                return ("∂L/∂u multiplies by GELU′(a); u is scaled by the gate's VALUE GELU(a) in the forward "
                        "pass, so ∂L/∂u = ∂L/∂h ⊙ GELU(a) (the derivative belongs to the gate's path).")
            if torch.allclose(value, _gelu_tanh(_Z), rtol=1e-5, atol=1e-7):
                return ("your GELU is the tanh approximation (as Gemma computes it); the task's GELU is the exact "
                        "a Φ(a), Φ(a) = ½(1 + erf(a/√2)), in the value and in its derivative.")
            if torch.allclose(value, _Z * 0.5 * (1 + torch.erf(_Z)), rtol=1e-5, atol=1e-7):
                return "Φ(a) = ½(1 + erf(a/√2)): the √2 inside erf is missing."
            return ("the factor ∂L/∂u gets from the gate is not GELU(a) = a Φ(a), Φ(a) = ½(1 + erf(a/√2)): u is "
                    "scaled by the gate's value in the forward pass.")
        if not prime_ok:
            return _prime_story(prime, _Z)
    # the weights' gradients
    h = _gelu(a) * u
    stories = {
        "grad_w_gate": _weight_story("grad_w_gate", got[1], want[1], xs, grad_a, {
            "grad_w_gate and grad_w_up are swapped: W_gate's gradient comes through GELU′ (∂L/∂a), W_up's "
            "through the gate's value (∂L/∂u).": want[2]}),
        "grad_w_up": _weight_story("grad_w_up", got[2], want[2], xs, grad_u, {
            "grad_w_gate and grad_w_up are swapped: W_gate's gradient comes through GELU′ (∂L/∂a), W_up's "
            "through the gate's value (∂L/∂u).": want[1]}),
        "grad_w_down": _weight_story("grad_w_down", got[3], want[3], h, g, {
            "grad_w_down uses u alone; W_down's input is h = GELU(a) ⊙ u, so ∂L/∂W_down = hᵀ ∂L/∂y.":
                (u.T @ g).to(dtype),
            "grad_w_down uses GELU(a) alone; W_down's input is h = GELU(a) ⊙ u, so ∂L/∂W_down = hᵀ ∂L/∂y.":
                (_gelu(a).T @ g).to(dtype),
            "grad_w_down uses the pre-activation a ⊙ u; W_down's input is h = GELU(a) ⊙ u.":
                ((a * u).T @ g).to(dtype)}),
    }
    for name in wrong:
        if name in stories and stories[name]:
            return stories[name]
    if wrong == ["grad_x"]:
        up, gate = (grad_u @ w_up.T).reshape(x.shape), (grad_a @ w_gate.T).reshape(x.shape)
        if same_tensor(got[0], gate.to(dtype), 1e-4, 1e-6):
            return ("grad_x follows only the gate's path; x also reaches the output through the up projection: "
                    "add ∂L/∂u W_upᵀ.")
        if same_tensor(got[0], up.to(dtype), 1e-4, 1e-6):
            return ("grad_x follows only the up projection's path; x also reaches the output through the gate: "
                    "add ∂L/∂a W_gateᵀ.")
    if wrong:
        return Plain(f"{' and '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} wrong and the other gradients "
                     f"right: check {'that part' if len(wrong) == 1 else 'those parts'} of your derivation "
                     f"against autograd.")
    return None


GEGLU_BACKWARD = Task(
    name="geglu_backward", reference=ref.geglu_backward, cases=_geglu_cases, seed=403, rtol=1e-4, atol=1e-6,
    run=remembering, explain=_geglu_explain,
    output=TupleOutput([TensorOutput("the dtype of x"), TensorOutput("the dtype of w_gate"),
                        TensorOutput("the dtype of w_up"), TensorOutput("the dtype of w_down")],
                       ["grad_x", "grad_w_gate", "grad_w_up", "grad_w_down"]),
    forbid=Forbid(operations=("gelu",), modules=(ref,), autograd=True),
    hint="Check each gradient against autograd separately, on one position first, then on a batch (the "
         "self-check does this).",
)

check_geglu_backward = GEGLU_BACKWARD.checker(
    """Check ``geglu_backward(x, w_gate, w_up, w_down, grad_out) -> (grad_x, grad_w_gate, grad_w_up,
    grad_w_down)`` for y = (GELU(x W_gate) ⊙ x W_up) W_down with the exact GELU, given grad_out = ∂L/∂y,
    without autograd.""")


# --- Task 4: predictions ----------------------------------------------------------------------------------

_D = 2560

_WRONG_PREDICTIONS = {
    "hidden_width": [
        (int(8 * _D / 3), "that is 8D/3 truncated; Llama then rounds UP to a multiple of 256."),
        (int(8 * _D / 3) + 1, "that is 8D/3 rounded to an integer; Llama truncates, then rounds UP to a "
                              "multiple of 256."),
        (256 * (int(8 * _D / 3) // 256), "that rounds down; Llama rounds UP to the next multiple of 256."),
        (4 * _D, "4D is the width of a plain (GELU or ReLU) FFN; SwiGLU's is about (2/3) · 4D."),
    ],
    "ffn_params": [
        (2 * _D * 6912, "that counts two matrices; SwiGLU has three: w_gate, w_up and w_down."),
        (8 * _D * _D, "that is 3 · D · (8D/3) = 8D², the exact budget; count with the rounded width."),
        (3 * _D * int(8 * _D / 3), "that uses the unrounded width; count with the width Llama's rule gives."),
    ],
    "ffn_share": [
        (2 * 6912 / (4 * _D + 2 * 6912), "that counts two FFN matrices; SwiGLU has three."),
        (3 * 6912 / (4 * _D), "that is the FFN's size relative to attention; the question asks for its share "
                              "of attention and FFN together."),
        (0.5, "the FFN is about twice the size of attention here: 3 · D · F against 4 · D²."),
    ],
    "gate_output": [
        (0.0, "SiLU is not ReLU: a negative gate pre-activation gives a small negative gate, not zero, so a "
              "sign-flipped fraction of the feature passes."),
        (4 / (1 + math.e), "the sign: SiLU(−1) = −1 · σ(−1) is negative."),
        (-4.0, "SiLU(−1) = −1 · σ(−1), not −1: the sigmoid factor is about a quarter here."),
        (_silu(torch.tensor(-1.0)).item(), "that is the gate SiLU(−1) alone; it multiplies the feature u = 4."),
    ],
}


def _true_predictions() -> dict[str, float]:
    width = 256 * math.ceil(int(8 * _D / 3) / 256)
    attention = 4 * _D * _D
    feed_forward = 3 * _D * width
    return {"hidden_width": float(width), "ffn_params": float(feed_forward),
            "ffn_share": feed_forward / (attention + feed_forward),
            "gate_output": -1.0 / (1.0 + math.e) * 4.0}


def _width_story(value, given, true) -> str | None:
    """A hidden width: is it 8D/3, rounded, a multiple of 256, the smallest one above 8D/3?"""
    budget = 8 * _D / 3
    if abs(value - budget) <= 1:
        return "that is 8D/3 itself; Llama then rounds UP to a multiple of 256."
    if abs(value - 4 * _D) < 1:
        return "4D is the width of a plain (GELU or ReLU) FFN; SwiGLU's is about (2/3) · 4D."
    if value % 256:
        return ("that is not a multiple of 256: Llama's rule takes 8D/3, then rounds it up to the next multiple "
                "of multiple_of = 256.")
    if value < budget:
        return "that rounds down; Llama rounds UP to the next multiple of 256."
    return ("that is a multiple of 256, but not the smallest one at least 8D/3: Llama rounds 8D/3 up to the NEXT "
            "multiple of 256 (and here there is no extra multiplier).")


def _ffn_params_story(value, given, true) -> str | None:
    width = true["hidden_width"]
    matrices = value / (_D * width)
    if abs(matrices - round(matrices)) < 1e-6 and round(matrices) != 3:
        return (f"that counts {int(round(matrices))} D × F matrices; SwiGLU has three: w_gate, w_up and "
                f"w_down.")
    own = given["hidden_width"]
    if own != width and abs(value - 3 * _D * own) < 1:
        return ("that is 3 · D · F with your hidden_width, which is off (see its message); with the right width "
                "the count follows.")
    if abs(value - 3 * _D * own) < 1 and own == width:
        return None
    for width_used, why in ((8 * _D / 3, "that is 3 · D · (8D/3) = 8D², the exact budget; count with the rounded "
                                         "width."), (int(8 * _D / 3), "that uses the unrounded width; count with "
                                                                      "the width Llama's rule gives.")):
        if abs(value - 3 * _D * width_used) < 1:
            return why
    if abs(value / true["ffn_params"] - 2) < 1e-6:
        return "that is its size in bytes at 16 bits; the question asks for the number of parameters."
    implied = value / (3 * _D)
    if abs(implied - round(implied)) < 1e-6:
        story = _width_story(round(implied), given, true)
        if story:
            return f"that is 3 · D · F with a hidden width F for which this holds: {story}"
    return None


def _share_story(value, given, true) -> str | None:
    attention = 4 * _D * _D
    ffn, own = true["ffn_params"], given["ffn_params"]
    if own != ffn and abs(value - own / (attention + own)) < 1e-3:
        return ("that follows from your ffn_params, which is off (see its message); the share itself is "
                "FFN / (attention + FFN).")
    if abs(value - (1 - true["ffn_share"])) < 1e-3:
        return "that is attention's share; the question asks for the FFN's share of the two together."
    if abs(value - ffn / attention) < 1e-3:
        return ("that is the FFN's size relative to attention; the question asks for its share of attention and "
                "FFN together.")
    for n in (1, 2, 3, 5, 6):
        if abs(value - ffn / (n * _D * _D + ffn)) < 1e-3:
            return (f"that counts {n} D × D attention matrices; multi-head attention has four: w_q, w_k, w_v "
                    f"and w_o.")
    if abs(value - 2 * _D * true["hidden_width"] / (attention + 2 * _D * true["hidden_width"])) < 1e-3:
        return "that counts two FFN matrices; SwiGLU has three."
    if abs(value - 0.5) < 1e-3:
        return "the FFN is about twice the size of attention here: 3 · D · F against 4 · D²."
    return None


def _gate_output_story(value, given, true) -> str | None:
    """h = SiLU(−1) · 4: which gate the value implies (value / 4), or whether the × 4 is missing."""
    z = torch.tensor([-1.0], dtype=torch.float64)
    silu = _silu(z).item()
    if abs(value - silu) < 1e-3:
        return "that is the gate SiLU(−1) alone; it multiplies the feature u = 4."
    gate = torch.tensor([value / 4], dtype=torch.float64)
    if abs(value / 4 + torch.sigmoid(-z).item()) < 1e-3:
        return "SiLU(−1) = −1 · σ(−1): the sigmoid of −1 (about a quarter), not of +1."
    if abs(value / 4 - _silu(-z).item()) < 1e-3 or abs(value / 4 - torch.sigmoid(z).item()) < 1e-3:
        return "the sign: SiLU(−1) = −1 · σ(−1) is negative."
    if abs(value) < 1e-9:
        return ("SiLU is not ReLU: a negative gate pre-activation gives a small negative gate, not zero, so a "
                "sign-flipped fraction of the feature passes.")
    if abs(value + 4) < 1e-3:
        return "SiLU(−1) = −1 · σ(−1), not −1: the sigmoid factor is about a quarter here."
    named = _name_curve(gate, z, {k: f for k, f in _GATE_CURVES.items() if not k.startswith("SiLU")})
    if named:
        return f"that gate is {named}."
    return None


FFN_PREDICTIONS = reasoned_predictions(predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=404,
    rtol=1e-3,
    atol=1e-3,
    forbid=Forbid(modules=(ref,), models=True),
    advice="Work it out on paper first, then run the experiment below.",
), _true_predictions, {"hidden_width": _width_story, "ffn_params": _ffn_params_story, "ffn_share": _share_story,
                       "gate_output": _gate_output_story})

check_ffn_predictions = FFN_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: Llama's SwiGLU width and parameter count for D = 2560, the FFN's
    share of a multi-head block, and one gated hidden unit's output.""")

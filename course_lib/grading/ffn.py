"""Checkers for exercise 04 (feed-forward networks).

1. ``llama_ffn`` — find and fix the bug in a SwiGLU that reads a Llama checkpoint's gate from the wrong
   projection.
2. ``top_k_swiglu`` — extend SwiGLU to keep only the k largest hidden contributions of each position.
3. ``geglu_backward`` — derive the backward pass of a GeGLU FFN (∂L/∂x and the three weights) and check it.
4. ``predictions`` — predict four numbers before computing them (a function returning a dict).
"""

from __future__ import annotations

import math

import torch

from .. import ffn as ref
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, Task, TensorOutput, TupleOutput, describe

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


# --- Task 1: a Llama checkpoint's FFN (find and fix) ---------------------------------------------------

def _llama_reference(x, w1, w2, w3):
    return ref.swiglu(x, w1.T, w3.T, w2.T)  # Llama: w1 = gate, w3 = up, w2 = down; stored (out, in)


def _llama_variant(x, w1, w2, w3, *, gate="w1", act=_silu, transpose=True, after=False, both=False,
                   project=True):
    t = (lambda w: w.T) if transpose else (lambda w: w)
    g = x @ t(w1 if gate == "w1" else w3)
    u = x @ t(w3 if gate == "w1" else w1)
    if after:
        hidden = act(g * u)
    else:
        hidden = act(g) * (act(u) if both else u)
    return hidden @ t(w2) if project else hidden


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


LLAMA_FFN = Task(
    name="llama_ffn", reference=_llama_reference, cases=_llama_cases, seed=401, rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("this is still what the given version computes: the gate reads x @ w3.T. In a Llama "
                "checkpoint w1 is the gate projection (Hugging Face's gate_proj) and w3 the up projection "
                "(up_proj), which enters linearly: doubling w3 must double the output.",
                lambda *a: _llama_variant(*a, gate="w3")),
        Mistake("the weights are used without transposing: they are stored as nn.Linear stores them, "
                "(out_features, in_features), so each projection is x @ w.T.",
                lambda *a: _llama_variant(*a, transpose=False)),
        Mistake("SiLU is applied to both projections; only the gate goes through SiLU, the up projection "
                "x @ w3.T stays linear.", lambda *a: _llama_variant(*a, both=True)),
        Mistake("the gate is sigmoid(x @ w1.T) (the original GLU); SwiGLU's gate is SiLU(z) = z · sigmoid(z).",
                lambda *a: _llama_variant(*a, act=torch.sigmoid)),
        Mistake("the gate uses ReLU; Llama's gate is SiLU(z) = z · sigmoid(z).",
                lambda *a: _llama_variant(*a, act=torch.relu)),
        Mistake("SiLU is applied after the product: gate first, SiLU(x @ w1.T), then multiply by x @ w3.T.",
                lambda *a: _llama_variant(*a, after=True)),
        Mistake("the result is the hidden features, of width F: project them back with @ w2.T.",
                lambda *a: _llama_variant(*a, project=False)),
    ],
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


def _top_k_variant(x, w_gate, w_up, w_down, k, *, rank="abs", dim=-1, keep=True, extra=0, act=_silu,
                   project=True, per_position=True):
    gate, up = act(x @ w_gate), x @ w_up
    hidden = gate * up
    score = {"abs": hidden.abs(), "signed": hidden, "gate": gate.abs(), "up": up.abs()}[rank]
    if not per_position:  # one threshold over the whole batch
        flat = score.reshape(-1)
        n = min(k * (flat.numel() // score.shape[-1]), flat.numel())
        chosen = torch.zeros_like(flat, dtype=torch.bool)
        chosen[flat.topk(n).indices] = True
        chosen = chosen.reshape(score.shape)
    else:
        n = min(k + extra, score.shape[dim])
        if n < 1:
            raise ValueError("this mistake needs at least one kept unit")
        index = score.topk(n, dim=dim).indices
        chosen = torch.zeros_like(score, dtype=torch.bool).scatter(dim, index, True)
    if not keep:
        chosen = ~chosen
    kept = hidden * chosen
    return kept @ w_down if project else kept


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


TOP_K_SWIGLU = Task(
    name="top_k_swiglu", reference=_top_k_reference, cases=_top_k_cases, seed=402, rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("the units are ranked by their signed value; rank them by magnitude |h_i|. A large negative "
                "h_i adds −|h_i| times its value vector, as big a contribution as a large positive one.",
                lambda *a: _top_k_variant(*a, rank="signed")),
        Mistake("the units are ranked by the gate SiLU(x W_gate) alone; a unit's contribution is the product "
                "h_i = SiLU(x W_gate)_i · (x W_up)_i: rank by |h_i|.", lambda *a: _top_k_variant(*a, rank="gate")),
        Mistake("the units are ranked by the up projection alone; a unit's contribution is the product "
                "h_i = SiLU(x W_gate)_i · (x W_up)_i: rank by |h_i|.", lambda *a: _top_k_variant(*a, rank="up")),
        Mistake("the k largest are taken over the positions (dimension −2); each position keeps its own k "
                "hidden units: take them over the last dimension, the F hidden units.",
                lambda *a: _top_k_variant(*a, dim=-2)),
        Mistake("one threshold is used for the whole batch; each position keeps its own k largest units.",
                lambda *a: _top_k_variant(*a, per_position=False)),
        Mistake("the k largest units are dropped and the rest kept; it is the other way round.",
                lambda *a: _top_k_variant(*a, keep=False)),
        Mistake("each position keeps k + 1 units: with a threshold, keep the units ABOVE the (k+1)-th largest "
                "magnitude, or use topk(k).", lambda *a: _top_k_variant(*a, extra=1)),
        Mistake("each position keeps k − 1 units; it should keep exactly k.", lambda *a: _top_k_variant(*a, extra=-1)),
        Mistake("the gate uses ReLU; SwiGLU's gate is SiLU(z) = z · sigmoid(z).",
                lambda *a: _top_k_variant(*a, act=torch.relu)),
        Mistake("the result is the kept hidden features, of width F: project them back with @ w_down.",
                lambda *a: _top_k_variant(*a, project=False)),
    ],
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


def _geglu_variant(x, w_gate, w_up, w_down, grad_out, *, prime="exact", gate_value="gelu", x_paths="both",
                   sum_positions=True, swap_weights=False, down_transposed=False):
    d_model = w_gate.shape[0]
    xs, g = x.reshape(-1, d_model), grad_out.reshape(-1, d_model)
    a, u = xs @ w_gate, xs @ w_up
    s = _gelu(a)
    act_prime = {"exact": lambda: _cdf(a) + a * _pdf(a), "cdf": lambda: _cdf(a),
                 "tanh": lambda: _gelu_tanh_prime(a), "value": lambda: _gelu(a),
                 "unnormalised": lambda: _cdf(a) + a * _pdf(a, norm=False)}[prime]()
    grad_h = g @ w_down.T
    grad_u = grad_h * (s if gate_value == "gelu" else a)
    grad_a = grad_h * u * act_prime
    if sum_positions:
        grad_w_down = (s * u).T @ g
        grad_w_up, grad_w_gate = xs.T @ grad_u, xs.T @ grad_a
    else:  # the last position only
        grad_w_down = (s * u)[-1:].T @ g[-1:]
        grad_w_up, grad_w_gate = xs[-1:].T @ grad_u[-1:], xs[-1:].T @ grad_a[-1:]
    if down_transposed:
        grad_w_down = grad_w_down.T
    if swap_weights:
        grad_w_gate, grad_w_up = grad_w_up, grad_w_gate
    grad_x = {"both": grad_a @ w_gate.T + grad_u @ w_up.T, "gate": grad_a @ w_gate.T,
              "up": grad_u @ w_up.T}[x_paths]
    return grad_x.reshape(x.shape), grad_w_gate, grad_w_up, grad_w_down


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


def _geglu_explain(got, want, case) -> str | None:
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


GEGLU_BACKWARD = Task(
    name="geglu_backward", reference=ref.geglu_backward, cases=_geglu_cases, seed=403, rtol=1e-4, atol=1e-6,
    explain=_geglu_explain,
    output=TupleOutput([TensorOutput("the dtype of x"), TensorOutput("the dtype of w_gate"),
                        TensorOutput("the dtype of w_up"), TensorOutput("the dtype of w_down")],
                       ["grad_x", "grad_w_gate", "grad_w_up", "grad_w_down"]),
    mistakes=[
        Mistake("GELU′(a) is missing its second term: GELU(a) = a Φ(a), so by the product rule "
                "GELU′(a) = Φ(a) + a φ(a), with φ the standard normal density.",
                lambda *a: _geglu_variant(*a, prime="cdf")),
        Mistake("this is the derivative of GELU's tanh approximation; the task's GELU is the exact one, "
                "a Φ(a), whose derivative is Φ(a) + a φ(a).", lambda *a: _geglu_variant(*a, prime="tanh")),
        Mistake("the gate's gradient is multiplied by GELU(a), the activation itself; it needs its "
                "derivative GELU′(a) = Φ(a) + a φ(a).", lambda *a: _geglu_variant(*a, prime="value")),
        Mistake("φ is not normalised: the standard normal density is φ(a) = exp(−a²/2) / √(2π).",
                lambda *a: _geglu_variant(*a, prime="unnormalised")),
        Mistake("∂L/∂u multiplies by the gate pre-activation a; it multiplies by the gate's value GELU(a), "
                "which is what scales u in the forward pass.", lambda *a: _geglu_variant(*a, gate_value="pre")),
        Mistake("grad_x follows only the gate's path; x also reaches the output through the up projection: "
                "add ∂L/∂u W_upᵀ.", lambda *a: _geglu_variant(*a, x_paths="gate")),
        Mistake("grad_x follows only the up projection's path; x also reaches the output through the gate: "
                "add ∂L/∂a W_gateᵀ.", lambda *a: _geglu_variant(*a, x_paths="up")),
        Mistake("grad_w_gate and grad_w_up are swapped: W_gate's gradient comes through GELU′ (∂L/∂a), W_up's "
                "through the gate's value (∂L/∂u).", lambda *a: _geglu_variant(*a, swap_weights=True)),
        Mistake("grad_w_down is transposed: for y = h W_down, ∂L/∂W_down = hᵀ ∂L/∂y, of shape (F, D).",
                lambda *a: _geglu_variant(*a, down_transposed=True)),
        Mistake("the weights' gradients use only the last position; a weight is shared by every position, so "
                "its gradient sums all of them (xᵀ G over all rows).",
                lambda *a: _geglu_variant(*a, sum_positions=False)),
    ],
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


FFN_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=404,
    rtol=1e-3,
    atol=1e-3,
    forbid=Forbid(modules=(ref,), models=True),
    advice="Work it out on paper first, then run the experiment below.",
)

check_ffn_predictions = FFN_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: Llama's SwiGLU width and parameter count for D = 2560, the FFN's
    share of a multi-head block, and one gated hidden unit's output.""")

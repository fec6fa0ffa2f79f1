"""Checkers for exercise 04 (feed-forward networks): the SwiGLU forward pass and the tanh
approximation of GELU."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ffn as ref
from ._core import Case, Forbidden, Mistake, check_function, describe

__all__ = ["check_swiglu", "check_gelu_tanh"]

# float32 students must pass on float64 inputs too; the mistakes below differ by far more.
_RTOL, _ATOL = 1e-5, 1e-6

_REFERENCES = [
    Forbidden(ref.swiglu, "course_lib.ffn.swiglu"),
    Forbidden(ref.SwiGLU.forward, "course_lib.ffn.SwiGLU"),
    Forbidden(ref.FeedForward.forward, "course_lib.ffn.FeedForward"),
    Forbidden(ref.silu, "course_lib.ffn.silu"),
    Forbidden(ref.gelu, "course_lib.ffn.gelu"),
]


def _silu(x):
    return x * torch.sigmoid(x)


def _gelu_exact(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _tanh_form(x, *, half=0.5, scale=math.sqrt(2.0 / math.pi), cubic=0.044715, sign=1.0):
    return half * x * (1.0 + sign * torch.tanh(scale * (x + cubic * x**3)))


def _weights(gen, d_model, d_ff, dtype):
    def draw(rows, cols):
        return (torch.randn(rows, cols, generator=gen, dtype=torch.float64) / math.sqrt(rows)).to(dtype)

    return draw(d_model, d_ff), draw(d_model, d_ff), draw(d_ff, d_model)


def check_swiglu(swiglu) -> None:
    """Check ``swiglu(x, w_gate, w_up, w_down)`` = (SiLU(x W_gate) ⊙ (x W_up)) W_down, with
    w_gate, w_up of shape (D, F) and w_down of shape (F, D)."""
    gen = torch.Generator().manual_seed(404)
    x_hand = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    w_gate_hand = torch.tensor([[1.0, 0.0, -1.0], [0.5, 1.0, 0.0]], dtype=torch.float64)
    w_up_hand = torch.tensor([[0.0, 2.0, 1.0], [1.0, -1.0, 0.5]], dtype=torch.float64)
    w_down_hand = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
    # Square weights first: there, weights used transposed give wrong values rather than a shape error.
    x_sq = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    cases = [Case(f"x: {describe(x_sq)} with F = D = 6 (square weights)", (x_sq, *_weights(gen, 6, 6, torch.float64))),
             Case("one token with D = 2 and F = 3 (float64)", (x_hand, w_gate_hand, w_up_hand, w_down_hand))]
    for shape, d_ff, dtype, scale in [((5, 8), 12, torch.float64, 1.0), ((2, 3, 16), 40, torch.float32, 1.0),
                                      ((8,), 20, torch.float64, 1.0), ((4, 10), 24, torch.float64, 4.0)]:
        x = (scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
        weights = _weights(gen, shape[-1], d_ff, dtype)
        label = f"x: {describe(x)} with F = {d_ff}" + (" (large inputs)" if scale > 1 else "")
        cases.append(Case(label, (x, *weights)))

    def act_swiglu(act):
        return lambda x, g, u, d: (act(x @ g) * (x @ u)) @ d

    mistakes = [
        Mistake("SiLU is applied to the wrong projection: the gate is SiLU(x @ w_gate), and it multiplies "
                "x @ w_up, which stays linear.", lambda x, g, u, d: ((x @ g) * _silu(x @ u)) @ d),
        Mistake("the weights are used transposed. In this exercise they follow the row-vector convention: "
                "x @ w_gate, x @ w_up, then @ w_down (no .T).",
                lambda x, g, u, d: (_silu(x @ g.T) * (x @ u.T)) @ d.T),
        Mistake("the activation is ReLU; SwiGLU's gate uses SiLU(z) = z · sigmoid(z).", act_swiglu(torch.relu)),
        Mistake("the gate is sigmoid(x @ w_gate) (the original GLU); SwiGLU uses SiLU(z) = z · sigmoid(z).",
                act_swiglu(torch.sigmoid)),
        Mistake("the activation is GELU (that is GeGLU); SwiGLU uses SiLU(z) = z · sigmoid(z).",
                act_swiglu(_gelu_exact)),
        Mistake("SiLU is applied after the product. Gate first, then multiply: SiLU(x @ w_gate) * (x @ w_up).",
                lambda x, g, u, d: _silu((x @ g) * (x @ u)) @ d),
        Mistake("the gate is missing: SiLU(x @ w_up) @ w_down is a plain FFN. Multiply SiLU(x @ w_gate) "
                "into x @ w_up.", lambda x, g, u, d: _silu(x @ u) @ d),
        Mistake("the gate and the features are added; SwiGLU multiplies them elementwise.",
                lambda x, g, u, d: (_silu(x @ g) + (x @ u)) @ d),
        Mistake("the result is the hidden features, of width F: project them back with @ w_down.",
                lambda x, g, u, d: _silu(x @ g) * (x @ u)),
    ]
    forbidden = _REFERENCES + [
        Forbidden(F.silu, "torch.nn.functional.silu"),
        Forbidden(torch._C._nn.silu, "torch.nn.functional.silu"),
        Forbidden(nn.SiLU.forward, "torch.nn.SiLU"),
    ]
    check_function(swiglu, ref.swiglu, cases, task="swiglu", mistakes=mistakes, forbidden=forbidden,
                   rtol=_RTOL, atol=_ATOL)


def check_gelu_tanh(gelu_tanh) -> None:
    """Check ``gelu_tanh(x)`` = 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 x³))), elementwise."""
    gen = torch.Generator().manual_seed(405)
    cases = [Case("five values from −3 to 3 (float64, shape (5,))",
                  (torch.tensor([-3.0, -1.0, 0.0, 1.0, 3.0], dtype=torch.float64),))]
    for shape, dtype, scale in [((7,), torch.float64, 2.0), ((3, 4, 5), torch.float64, 1.5),
                                ((6, 8), torch.float32, 2.0)]:
        x = (scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
        cases.append(Case(f"a {describe(x)}", (x,)))
    sweep = torch.linspace(-6.0, 6.0, 241, dtype=torch.float64)
    cases.append(Case(f"an evenly spaced sweep from −6 to 6, {describe(sweep)}", (sweep,)))
    extremes = torch.tensor([-60.0, -20.0, 20.0, 60.0], dtype=torch.float64)
    cases.append(Case("large positive and negative values (float64, shape (4,))", (extremes,)))

    mistakes = [
        Mistake("this is the exact GELU, x · Φ(x) with erf. The task is the tanh approximation "
                "0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 x³))).", _gelu_exact),
        Mistake("the factor 0.5 in front is missing.", lambda x: _tanh_form(x, half=1.0)),
        Mistake("the leading x is missing: 0.5 · (1 + tanh(…)) approximates Φ(x); GELU is x · Φ(x).",
                lambda x: 0.5 * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
        Mistake("the cubic term is missing: the argument of tanh is √(2/π) · (x + 0.044715 · x³).",
                lambda x: _tanh_form(x, cubic=0.0)),
        Mistake("the constant in front of the bracket is √(2/π), the square root of 2/π.",
                lambda x: _tanh_form(x, scale=2.0 / math.pi)),
        Mistake("the constant in front of the bracket is √(2/π), not √(π/2).",
                lambda x: _tanh_form(x, scale=math.sqrt(math.pi / 2.0))),
        Mistake("√(2/π) must multiply the whole bracket (x + 0.044715 x³), not only the cubic term.",
                lambda x: 0.5 * x * (1.0 + torch.tanh(x + math.sqrt(2 / math.pi) * 0.044715 * x**3))),
        Mistake("this is the sigmoid approximation x · σ(1.702 x); the task is the tanh one.",
                lambda x: x * torch.sigmoid(1.702 * x)),
        Mistake("the sign: it is 1 + tanh(…), not 1 − tanh(…).", lambda x: _tanh_form(x, sign=-1.0)),
    ]
    forbidden = _REFERENCES + [
        Forbidden(F.gelu, "torch.nn.functional.gelu"),
        Forbidden(nn.GELU.forward, "torch.nn.GELU"),
    ]
    check_function(gelu_tanh, lambda x: ref.gelu(x, approximate="tanh"), cases, task="gelu_tanh",
                   mistakes=mistakes, forbidden=forbidden, rtol=_RTOL, atol=_ATOL)

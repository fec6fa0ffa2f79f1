"""The position-wise feed-forward network (FFN): the classic two-layer MLP with ReLU,
ReLU² or GELU, and the gated SwiGLU variant of Llama, with the rule that sets its width.

Conventions
-----------
* Shapes: x is (..., D) — any leading dimensions (B, T) are positions, each
  transformed on its own; F is the hidden width ``d_ff``.
* The functional forms take weights in the course's row-vector convention,
  ``y = x @ W`` with ``W`` of shape (D_in, D_out) (see the notation page). The
  modules hold ``nn.Linear`` layers, which store the transpose, so
  ``module.w_up.weight`` has shape (F, D).
* Names by role: ``w_up`` projects D → F, ``w_gate`` computes the gate (SwiGLU
  only), ``w_down`` projects F → D. Hugging Face's ``LlamaMLP`` calls them
  ``up_proj``, ``gate_proj``, ``down_proj``; the Llama reference code ``w3``,
  ``w1``, ``w2``.
* No biases by default, as in Llama; ``FeedForward(..., bias=True)`` gives the
  original Transformer's and GPT-2's form.
* Gated linear units (GLU) are from Dauphin et al. (2017), with a sigmoid gate;
  Shazeer (2020) put GLUs with other gate activations (ReGLU, GeGLU, SwiGLU) into the
  Transformer's FFN.

Explicit math (:func:`gelu`, :func:`silu`, :func:`swiglu`, :func:`geglu`) sits beside
the fast paths the modules use (``F.gelu``, ``F.silu``), and the gated FFNs' backward
passes are written out by hand (:func:`swiglu_backward`, :func:`geglu_backward`); the
tests check them against torch and autograd.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "relu",
    "relu_squared",
    "gelu",
    "silu",
    "ACTIVATIONS",
    "FeedForward",
    "SwiGLU",
    "swiglu",
    "swiglu_backward",
    "geglu",
    "geglu_backward",
    "build_ffn",
    "FFN_VARIANTS",
    "swiglu_hidden_dim",
    "ffn_params",
]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


def _check_tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def _check_width(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} ({value}) must be positive")
    return value


def _check_input(x, d_model: int) -> None:
    _check_tensor(x, "x")
    if x.dim() < 1 or x.shape[-1] != d_model:
        raise ValueError(
            f"x must have shape (..., D) with D = d_model = {d_model}, "
            f"got {tuple(x.shape)}"
        )


def relu(x: torch.Tensor) -> torch.Tensor:
    """ReLU(x) = max(x, 0): the original Transformer's activation."""
    x = _check_tensor(x, "x")
    return torch.where(x > 0, x, torch.zeros_like(x))


def relu_squared(x: torch.Tensor) -> torch.Tensor:
    """ReLU²(x) = max(x, 0)²  (So et al., 2021, "Primer"; the modded-nanogpt speedrun's FFN).

    Zero for x ≤ 0 like ReLU, but smooth at 0 (derivative 2·max(x, 0)) and growing
    quadratically: a large pre-activation counts more than in proportion. No gate, so the FFN
    keeps ReLU's 2·D·F parameters."""
    x = _check_tensor(x, "x")
    positive = torch.where(x > 0, x, torch.zeros_like(x))
    return positive * positive


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU(x) = x · Φ(x), Φ the standard normal CDF  (Hendrycks & Gimpel, 2016).

    ``approximate="none"``: exact, Φ(x) = (1 + erf(x / √2)) / 2.
    ``approximate="tanh"``: GPT-2's approximation,
    0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 x³))), within 5e-4 of the exact
    value everywhere. Same convention as ``F.gelu(x, approximate=...)``.
    """
    x = _check_tensor(x, "x")
    if approximate == "none":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + _GELU_CUBIC * x * x * x)
        return 0.5 * x * (1.0 + torch.tanh(inner))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU(x) = x · σ(x), also called Swish  (Elfwing et al., 2018).

    Smooth and not monotonic (minimum ≈ −0.278 at x ≈ −1.278); its derivative
    is zero only at that one point — ReLU's is zero for every negative input.
    """
    x = _check_tensor(x, "x")
    return x * torch.sigmoid(x)


# The activations FeedForward accepts, as explicit math (the module calls torch's).
ACTIVATIONS = {
    "relu": relu,
    "relu2": relu_squared,
    "gelu": gelu,
    "gelu_tanh": lambda x: gelu(x, approximate="tanh"),
}
_FAST = {
    "relu": F.relu,
    "relu2": lambda x: torch.square(F.relu(x)),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


class FeedForward(nn.Module):
    """FFN(x) = act(x W_up + b_up) W_down + b_down, at every position on its own
    (Vaswani et al., 2017, §3.3: ReLU and F = 4D; GPT-2 uses GELU).

    ``activation`` is ``"relu"``, ``"relu2"`` (ReLU²), ``"gelu"`` (exact) or
    ``"gelu_tanh"``.
    Parameters: 2·D·F, plus F + D with ``bias=True``.
    """

    def __init__(
        self, d_model: int, d_ff: int, activation: str = "gelu", bias: bool = False
    ):
        super().__init__()
        self.d_model = _check_width(d_model, "d_model")
        self.d_ff = _check_width(d_ff, "d_ff")
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}"
            )
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be a bool, got {type(bias).__name__}")
        self.activation = activation
        self.w_up = nn.Linear(d_model, d_ff, bias=bias)  # weight (F, D)
        self.w_down = nn.Linear(d_ff, d_model, bias=bias)  # weight (D, F)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d_model)
        hidden = _FAST[self.activation](self.w_up(x))  # (..., F)
        return self.w_down(hidden)  # (..., D)

    def extra_repr(self) -> str:
        return f"{self.d_model}, {self.d_ff}, activation={self.activation!r}"


def _check_glu(x, w_gate, w_up, w_down) -> None:
    for name, value in dict(x=x, w_gate=w_gate, w_up=w_up, w_down=w_down).items():
        _check_tensor(value, name)
    if x.dim() < 1 or w_gate.dim() != 2 or w_up.dim() != 2 or w_down.dim() != 2:
        raise ValueError("x must be (..., D); w_gate, w_up, w_down must be matrices")
    d_model, d_ff = w_gate.shape
    if w_up.shape != (d_model, d_ff):
        raise ValueError(
            f"w_up must have the shape of w_gate, (D, F) = {(d_model, d_ff)}, "
            f"got {tuple(w_up.shape)}"
        )
    if w_down.shape != (d_ff, d_model):
        raise ValueError(
            f"w_down must have shape (F, D) = {(d_ff, d_model)}, "
            f"got {tuple(w_down.shape)}"
        )
    if x.shape[-1] != d_model:
        raise ValueError(
            f"x's last dimension ({x.shape[-1]}) must equal D = {d_model}, "
            f"the rows of w_gate"
        )


def swiglu(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    """SwiGLU(x) = (SiLU(x W_gate) ⊙ (x W_up)) W_down: a GLU (Dauphin et al., 2017)
    with a SiLU gate (Shazeer, 2020).

    Explicit math in the row-vector convention: ``w_gate`` and ``w_up`` have shape
    (D, F), ``w_down`` has shape (F, D). The gate SiLU(x W_gate) multiplies the
    features x W_up elementwise: a gate near 0 switches its feature off.
    """
    _check_glu(x, w_gate, w_up, w_down)
    gate = silu(x @ w_gate)  # (..., F)
    up = x @ w_up  # (..., F)
    return (gate * up) @ w_down  # (..., D)


def geglu(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    """GeGLU(x) = (GELU(x W_gate) ⊙ (x W_up)) W_down  (Shazeer, 2020): SwiGLU with the exact
    GELU as the gate's activation (Gemma uses GeGLU with GELU's tanh approximation). Shapes as
    in :func:`swiglu`."""
    _check_glu(x, w_gate, w_up, w_down)
    return (gelu(x @ w_gate) * (x @ w_up)) @ w_down  # (..., D)


def _silu_prime(a: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(a)
    return s * (1 + a * (1 - s))  # d/da [a σ(a)]


def _gelu_prime(a: torch.Tensor) -> torch.Tensor:
    cdf = 0.5 * (1.0 + torch.erf(a / math.sqrt(2.0)))  # Φ(a)
    pdf = torch.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)  # φ(a)
    return cdf + a * pdf  # d/da [a Φ(a)]


def _gated_backward(x, w_gate, w_up, w_down, grad_out, act, act_prime):
    _check_glu(x, w_gate, w_up, w_down)
    if not isinstance(grad_out, torch.Tensor) or grad_out.shape != x.shape:
        raise ValueError(f"grad_out must be a tensor of x's shape {tuple(x.shape)}, "
                         f"got {tuple(getattr(grad_out, 'shape', ()))}")
    d_model, d_ff = w_gate.shape
    xs = x.reshape(-1, d_model)  # (N, D): every position a row
    g = grad_out.reshape(-1, d_model)  # (N, D)
    a, u = xs @ w_gate, xs @ w_up  # (N, F) each: gate pre-activation, features
    s = act(a)  # (N, F): the gate
    grad_w_down = (s * u).T @ g  # (F, D): hᵀ G, summed over positions
    grad_h = g @ w_down.T  # (N, F)
    grad_u = grad_h * s  # (N, F)
    grad_a = grad_h * u * act_prime(a)  # (N, F)
    grad_w_up = xs.T @ grad_u  # (D, F)
    grad_w_gate = xs.T @ grad_a  # (D, F)
    grad_x = grad_a @ w_gate.T + grad_u @ w_up.T  # (N, D): both paths
    return grad_x.reshape(x.shape), grad_w_gate, grad_w_up, grad_w_down


def swiglu_backward(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
    grad_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward pass of :func:`swiglu`, given G = ∂L/∂y (shape of x):

        a = x W_gate,  s = SiLU(a),  u = x W_up,  h = s ⊙ u,  y = h W_down
        ∂L/∂W_down = hᵀ G,   ∂L/∂h = G W_downᵀ,
        ∂L/∂u = ∂L/∂h ⊙ s,   ∂L/∂a = ∂L/∂h ⊙ u ⊙ SiLU′(a),  SiLU′(a) = σ(a)(1 + a(1 − σ(a))),
        ∂L/∂W_up = xᵀ ∂L/∂u,   ∂L/∂W_gate = xᵀ ∂L/∂a,
        ∂L/∂x = ∂L/∂a W_gateᵀ + ∂L/∂u W_upᵀ.

    The leading dimensions of x are positions; the weights' gradients sum over all of them.
    Returns (grad_x, grad_w_gate, grad_w_up, grad_w_down) with the inputs' shapes.
    """
    return _gated_backward(x, w_gate, w_up, w_down, grad_out, silu, _silu_prime)


def geglu_backward(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
    grad_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward pass of :func:`geglu`: as :func:`swiglu_backward` with the gate's
    derivative GELU′(a) = Φ(a) + a φ(a) (Φ, φ the standard normal CDF and density)."""
    return _gated_backward(x, w_gate, w_up, w_down, grad_out, gelu, _gelu_prime)


class SwiGLU(nn.Module):
    """Llama's gated FFN: w_down(SiLU(w_gate(x)) ⊙ w_up(x)), a gated linear unit
    (Dauphin et al., 2017) with a SiLU gate (Shazeer, 2020).

    Three D×F matrices instead of two, so at equal parameters F shrinks to about
    (2/3)·4D = (8/3)·D (see :func:`swiglu_hidden_dim`). Parameters: 3·D·F. The
    same computation as Hugging Face's ``LlamaMLP``.
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.d_model = _check_width(d_model, "d_model")
        self.d_ff = _check_width(d_ff, "d_ff")
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)  # weight (F, D)
        self.w_up = nn.Linear(d_model, d_ff, bias=False)  # weight (F, D)
        self.w_down = nn.Linear(d_ff, d_model, bias=False)  # weight (D, F)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d_model)
        gate = F.silu(self.w_gate(x))  # (..., F)
        up = self.w_up(x)  # (..., F)
        return self.w_down(gate * up)  # (..., D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}"


FFN_VARIANTS = ("swiglu", "gelu", "relu", "relu2")


def build_ffn(variant: str, d_model: int, d_ff: int, bias: bool = False) -> nn.Module:
    """``"swiglu"`` → :class:`SwiGLU` (never biased); ``"gelu"``, ``"relu"`` or ``"relu2"``
    → :class:`FeedForward` with that activation, biased when ``bias``."""
    if variant == "swiglu":
        if bias:
            raise ValueError("bias=True goes with 'gelu' or 'relu': SwiGLU has no biases")
        return SwiGLU(d_model, d_ff)
    if variant in ("gelu", "relu", "relu2"):
        return FeedForward(d_model, d_ff, activation=variant, bias=bias)
    raise ValueError(f"variant must be one of {FFN_VARIANTS}, got {variant!r}")


def swiglu_hidden_dim(
    d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None
) -> int:
    """Llama's SwiGLU hidden width F, computed as the Llama reference code does:

        F = int(2 · 4D / 3)                  # (2/3)·4D = (8/3)·D, truncated
        F = int(ffn_dim_multiplier · F)      # only with a multiplier (Llama 3)
        F = multiple_of · ceil(F / multiple_of)  # round UP to a multiple

    Llama 2 7B (D = 4096, multiple_of = 256) gives 11008; Llama 3 8B (D = 4096,
    multiplier 1.3, multiple_of = 1024) gives 14336.
    """
    _check_width(d_model, "d_model")
    _check_width(multiple_of, "multiple_of")
    hidden = int(2 * 4 * d_model / 3)
    if ffn_dim_multiplier is not None:
        multiplier = ffn_dim_multiplier
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)):
            raise TypeError(
                "ffn_dim_multiplier must be a number or None, "
                f"got {type(multiplier).__name__}"
            )
        if not (multiplier > 0 and math.isfinite(multiplier)):
            raise ValueError(
                f"ffn_dim_multiplier ({multiplier}) must be positive and finite"
            )
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)  # round up


def ffn_params(
    d_model: int, d_ff: int, variant: str = "swiglu", bias: bool = False
) -> int:
    """Parameters of one FFN: 3·D·F for ``"swiglu"``; 2·D·F (+ F + D with biases)
    for ``"gelu"``, ``"relu"`` and ``"relu2"``. Equals ``sum(p.numel())`` of the module."""
    _check_width(d_model, "d_model")
    _check_width(d_ff, "d_ff")
    if variant == "swiglu":
        if bias:
            raise ValueError("bias=True is not supported for variant 'swiglu'")
        return 3 * d_model * d_ff
    if variant in ("gelu", "relu", "relu2"):
        return 2 * d_model * d_ff + ((d_ff + d_model) if bias else 0)
    raise ValueError(f"variant must be one of {FFN_VARIANTS}, got {variant!r}")

"""Residual connections: where the norm goes (pre-norm or post-norm), stacks of residual
blocks, and the measurements chapter 6 makes on them — activation and gradient norms
layer by layer, and what deleting one block does to the output.

Conventions
-----------
* A *residual sublayer* wraps a norm and a sublayer F (attention or an FFN):

      pre-norm    x + F(Norm(x))   tensor2tensor (2018), GPT-2, GPT-3, Llama, Mistral
      post-norm   Norm(x + F(x))   the original Transformer, BERT (Vaswani et al., 2017)

  Pre-norm was the default of tensor2tensor (Vaswani et al., 2018) before GPT-2 adopted
  it; Wang et al. (2019) and Xiong et al. (2020) analysed why it trains more easily.

  Pre-norm leaves the *residual stream* x un-normalized: every sublayer reads a
  normalized copy and adds its output back. Post-norm normalizes the stream itself after
  every addition.
* A *block* is a module mapping the stream to the stream, usually two residual sublayers
  (attention, then the FFN). A stack of N blocks therefore has 2N residual branches —
  the N in GPT-2's 1/√(2N) initialisation (see :mod:`course_lib.init`).
* x has shape (..., D); the sublayer receives (..., D) and must return (..., D). Extra
  arguments of a residual sublayer's ``forward`` (masks, RoPE tables) go to the
  sublayer.
* Stream states are numbered x_0 (the stack's input) … x_N (after block N). A pre-norm
  stack ends with a final norm (its output is otherwise un-normalized); a post-norm
  stack does not need one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "PLACEMENTS",
    "PreNormResidual",
    "PostNormResidual",
    "residual_sublayer",
    "ResidualStack",
    "build_stack",
    "DepthProfile",
    "depth_profile",
    "block_deletion_effect",
]

PLACEMENTS = ("pre", "post")


# --- validation helpers ---------------------------------------------------------------

def _check_module(value, name: str) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"{name} must be an nn.Module (so its parameters are "
                        f"registered), got {type(value).__name__}")
    return value


def _check_placement(placement) -> str:
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    return placement


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} ({value}) must be at least 1")
    return value


def _check_stream(x, name: str = "x") -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1 or not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of shape (..., D), "
                         f"got dtype {x.dtype} and shape {tuple(x.shape)}")
    return x


def _check_same_shape(out: torch.Tensor, x: torch.Tensor, what: str) -> torch.Tensor:
    if out.shape != x.shape:
        raise ValueError(f"the {what} must return the shape of its input "
                         f"{tuple(x.shape)}, got {tuple(out.shape)}: a residual branch "
                         "adds to the stream")
    return out


# --- the two placements ---------------------------------------------------------------

class PreNormResidual(nn.Module):
    """Pre-norm residual sublayer: y = x + F(Norm(x))  (tensor2tensor; GPT-2; Llama).

    The sublayer reads a normalized copy of the stream; the stream itself is never
    normalized, so the Jacobian is ∂y/∂x = I + J_F(Norm(x)) · J_Norm(x): the identity
    reaches x untouched by the norm.
    """

    def __init__(self, norm: nn.Module, sublayer: nn.Module):
        super().__init__()
        self.norm = _check_module(norm, "norm")
        self.sublayer = _check_module(sublayer, "sublayer")

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """x (..., D) → (..., D); extra arguments (mask, RoPE) go to the sublayer."""
        _check_stream(x)
        update = self.sublayer(self.norm(x), *args, **kwargs)  # (..., D): F's write
        _check_same_shape(update, x, "sublayer")
        return x + update  # the stream keeps its scale


class PostNormResidual(nn.Module):
    """Post-norm residual sublayer: y = Norm(x + F(x))  (Vaswani et al., 2017; BERT).

    The norm sits on the stream itself, so every path — the skip connection included —
    passes through it: ∂y/∂x = J_Norm(x + F(x)) · (I + J_F(x)).
    """

    def __init__(self, norm: nn.Module, sublayer: nn.Module):
        super().__init__()
        self.norm = _check_module(norm, "norm")
        self.sublayer = _check_module(sublayer, "sublayer")

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """x (..., D) → (..., D); extra arguments (mask, RoPE) go to the sublayer."""
        _check_stream(x)
        update = self.sublayer(x, *args, **kwargs)  # (..., D)
        _check_same_shape(update, x, "sublayer")
        return self.norm(x + update)  # the stream is renormalized


def residual_sublayer(placement: str, norm: nn.Module,
                      sublayer: nn.Module) -> nn.Module:
    """The residual sublayer for ``placement``: ``"pre"`` → :class:`PreNormResidual`,
    ``"post"`` → :class:`PostNormResidual`."""
    _check_placement(placement)
    return (PreNormResidual if placement == "pre" else PostNormResidual)(norm, sublayer)


# --- stacks of blocks -----------------------------------------------------------------

class ResidualStack(nn.Module):
    """N blocks applied in turn, x_{ℓ+1} = block_ℓ(x_ℓ), then an optional final norm.

    ``skip`` names blocks to leave out (the stream passes them unchanged), which is how
    the chapter deletes a block; :meth:`stream` returns every state x_0 … x_N for
    measurements.
    """

    def __init__(self, blocks: Sequence[nn.Module],
                 final_norm: nn.Module | None = None):
        super().__init__()
        if isinstance(blocks, nn.Module) or not isinstance(blocks, Sequence) \
                or not blocks:
            raise TypeError("blocks must be a non-empty sequence of nn.Module "
                            "(one per block)")
        for i, block in enumerate(blocks):
            _check_module(block, f"blocks[{i}]")
        self.blocks = nn.ModuleList(blocks)
        if final_norm is not None:
            _check_module(final_norm, "final_norm")
        self.final_norm = final_norm

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    def _check_skip(self, skip: Collection[int]) -> set[int]:
        if isinstance(skip, (int, str)) or not isinstance(skip, Collection):
            raise TypeError("skip must be a collection of block indices, e.g. {3} or "
                            f"(), got {type(skip).__name__}")
        skip = set(skip)
        for i in skip:
            valid = isinstance(i, int) and not isinstance(i, bool)
            if not valid or not 0 <= i < self.n_layers:
                raise ValueError(f"skip holds {i!r}, but block indices run from 0 to "
                                 f"{self.n_layers - 1}")
        return skip

    def stream(self, x: torch.Tensor, skip: Collection[int] = ()) -> list[torch.Tensor]:
        """The residual stream [x_0, x_1, …, x_N], each (..., D), before any final
        norm."""
        _check_stream(x)
        skip = self._check_skip(skip)
        states = [x]
        for i, block in enumerate(self.blocks):
            if i not in skip:
                x = _check_same_shape(block(x), x, f"block {i}")  # (..., D)
            states.append(x)
        return states

    def forward(self, x: torch.Tensor, skip: Collection[int] = ()) -> torch.Tensor:
        """x (..., D) → (..., D): every block but those in ``skip``, then the final
        norm."""
        out = self.stream(x, skip)[-1]
        return out if self.final_norm is None else self.final_norm(out)


def build_stack(
    placement: str,
    n_layers: int,
    make_norm: Callable[[], nn.Module],
    make_sublayers: Callable[[], Sequence[nn.Module]],
) -> ResidualStack:
    """A stack of ``n_layers`` blocks, each the sublayers ``make_sublayers()`` (e.g.
    attention and an FFN) wrapped in ``placement``'s residual sublayer with a fresh
    ``make_norm()``.

    A pre-norm stack gets a final ``make_norm()`` as every pre-norm model has (the
    stream is not normalized otherwise); a post-norm stack's output is already
    normalized and gets none.
    """
    _check_placement(placement)
    _check_positive_int(n_layers, "n_layers")
    if not callable(make_norm) or not callable(make_sublayers):
        raise TypeError("make_norm and make_sublayers must be callables that build "
                        "fresh modules")
    blocks = []
    for _ in range(n_layers):
        sublayers = make_sublayers()
        if isinstance(sublayers, nn.Module) or not isinstance(sublayers, Sequence) \
                or not sublayers:
            raise TypeError("make_sublayers() must return a non-empty list of "
                            "nn.Module, e.g. [attention, ffn]")
        wrapped = [residual_sublayer(placement, make_norm(), f) for f in sublayers]
        blocks.append(nn.Sequential(*wrapped))
    return ResidualStack(blocks, final_norm=make_norm() if placement == "pre" else None)


# --- measurements ---------------------------------------------------------------------

@dataclass(frozen=True)
class DepthProfile:
    """Per-layer measurements of one forward and backward pass (ℓ = 0 … N).

    ``activation_rms[ℓ]`` is the root-mean-square entry of the stream x_ℓ;
    ``grad_norm[ℓ]`` is ‖∂L/∂x_ℓ‖ (Frobenius norm over all positions), the gradient with
    respect to the stream; ``weight_grad_norm[ℓ]`` (ℓ = 0 … N−1) is the norm of the
    gradient with respect to block ℓ's parameters, all of them together.
    """

    activation_rms: torch.Tensor  # (N + 1,)
    grad_norm: torch.Tensor  # (N + 1,)
    weight_grad_norm: torch.Tensor  # (N,)

    @property
    def grad_ratio(self) -> torch.Tensor:
        """‖∂L/∂x_ℓ‖ / ‖∂L/∂x_{ℓ+1}‖ for ℓ = 0 … N−1, shape (N,): how much crossing
        block ℓ backwards multiplies the gradient. Above 1 the gradient grows towards
        the input."""
        return self.grad_norm[:-1] / self.grad_norm[1:]

    @property
    def grad_growth(self) -> torch.Tensor:
        """‖∂L/∂x_0‖ / ‖∂L/∂x_N‖, the product of all the ratios: how many times larger
        the gradient is at the stack's input than at its output (< 1: it vanishes
        towards the input)."""
        return self.grad_norm[0] / self.grad_norm[-1]


def depth_profile(stack: ResidualStack, x: torch.Tensor,
                  cotangent: torch.Tensor) -> DepthProfile:
    """Run ``stack`` on ``x`` and backpropagate L = Σ stack(x) ⊙ cotangent.

    The loss is linear in the output, so ∂L/∂output = ``cotangent`` exactly: the
    measured gradients are those of any loss whose output gradient is ``cotangent``, and
    they depend only on the stack.
    """
    if not isinstance(stack, ResidualStack):
        raise TypeError(f"stack must be a ResidualStack, got {type(stack).__name__}")
    _check_stream(x)
    _check_stream(cotangent, "cotangent")
    if cotangent.shape != x.shape:
        raise ValueError(f"cotangent must have the output's shape {tuple(x.shape)}, "
                         f"got {tuple(cotangent.shape)}")
    x0 = x.detach().requires_grad_(True)
    params = [[p for p in block.parameters() if p.requires_grad]
              for block in stack.blocks]  # block ℓ's θ_ℓ
    with torch.enable_grad():
        states = stack.stream(x0)  # [x_0, …, x_N], each (..., D)
        out = states[-1] if stack.final_norm is None else stack.final_norm(states[-1])
        loss = (out * cotangent).sum()
        flat = [p for block_params in params for p in block_params]
        grads = torch.autograd.grad(loss, states + flat, allow_unused=True)
    stream_grads, weight_grads = grads[: len(states)], grads[len(states):]
    weight_norms, start = [], 0
    for block_params in params:
        block_grads = weight_grads[start:start + len(block_params)]
        squares = [g.pow(2).sum() for g in block_grads if g is not None]
        total = torch.stack(squares).sum() if squares else x.new_zeros(())
        weight_norms.append(total.sqrt())  # ‖∂L/∂θ_ℓ‖: all of block ℓ's parameters
        start += len(block_params)
    return DepthProfile(
        activation_rms=torch.stack([s.detach().pow(2).mean().sqrt() for s in states]),
        grad_norm=torch.stack([g.norm() for g in stream_grads]),
        weight_grad_norm=torch.stack(weight_norms).detach(),
    )


@torch.no_grad()
def block_deletion_effect(stack: ResidualStack, x: torch.Tensor) -> torch.Tensor:
    """Relative change of the output when each block in turn is deleted, shape (N,):

        effect[ℓ] = ‖stack(x) − stack(x, skip={ℓ})‖ / ‖stack(x)‖.
    """
    if not isinstance(stack, ResidualStack):
        raise TypeError(f"stack must be a ResidualStack, got {type(stack).__name__}")
    states = stack.stream(x)  # [x_0, …, x_N]: deleting block ℓ leaves x_0 … x_ℓ alone
    finish = (lambda h: h) if stack.final_norm is None else stack.final_norm
    full = finish(states[-1])
    effects = []
    for i in range(stack.n_layers):
        h = states[i]  # block i is skipped: block i + 1 reads x_i instead of x_{i+1}
        for block in stack.blocks[i + 1:]:
            h = block(h)
        effects.append((finish(h) - full).norm() / full.norm())
    return torch.stack(effects)

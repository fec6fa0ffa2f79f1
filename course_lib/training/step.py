"""Where the weights start, and how one step changes them.

:func:`build_model` draws a model's initial weights from a seed. :func:`train_step` takes one step on
a batch x, y (B, T): the mean cross-entropy over the B·T tokens (nats), its gradient's global norm
clipped to c (g ← g · min(1, c / ‖g‖₂)), then one optimiser step at the given learning rate.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .precision import autocast

__all__ = ["build_model", "train_step"]


def build_model(model_config: ModelConfig, seed: int = 0, device: torch.device | str | None = None) -> nn.Module:
    """A freshly initialised :class:`~course_lib.model.DecoderLM`, its weights drawn from ``seed``
    (the global generator is left as it was)."""
    from ..model import DecoderLM

    with torch.random.fork_rng(devices=[]):  # the CPU generator, put back afterwards
        torch.default_generator.manual_seed(seed)  # the CPU's alone: torch.manual_seed would reseed CUDA's too
        model = DecoderLM(model_config)
    return model.to(device) if device is not None else model


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               lr: float, grad_clip: float | None = 1.0, *, return_grad_norm: bool = False,
               grad_accum: int = 1, precision: str = "float32",
               scaler: torch.amp.GradScaler | None = None):
    """One optimisation step on the batch x, y (B, T); returns the batch's mean loss (a detached
    0-d tensor, not synchronised: call ``.item()`` only when you need the number), and with
    ``return_grad_norm`` the pair (loss, ‖g‖₂): the gradient's global norm *before* clipping, also
    a detached 0-d tensor.

    ``grad_accum`` N > 1 runs the batch as N micro-batches of B / N windows, one forward and backward
    each, and steps once: each micro-batch's mean loss is divided by N before its backward, so the
    gradients add up to the gradient of the whole batch's mean loss,

        ∇ (1/BT) Σ_{b,t} ℓ_bt = Σ_k (1/N) ∇ (1/(B/N)T) Σ_{b ∈ k, t} ℓ_bt,

    and only B / N windows' activations are kept at a time.

    ``precision`` (float32, bfloat16 or float16; :mod:`~course_lib.training.precision`) runs the
    forward passes under autocast; the loss is computed in float32 from the logits either way. With
    a ``scaler`` (float16) each backward pass starts from the loss times the scale S, the gradients
    are divided by S before clipping, and a step whose gradients overflowed is skipped (the
    scaler lowers S; the caller can see it from ``scaler.get_scale()``)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    cast = precision != "float32"

    def backward(value: torch.Tensor) -> None:
        (scaler.scale(value) if scaler is not None else value).backward()

    if grad_accum == 1:
        with autocast(precision, x.device):
            logits = model(x)  # (B, T, V)
        if cast:
            logits = logits.float()
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())  # mean over the B·T tokens, nats
        backward(loss)
    else:
        if isinstance(grad_accum, bool) or not isinstance(grad_accum, int) or grad_accum < 1 \
                or x.shape[0] % grad_accum:
            raise ValueError(f"grad_accum ({grad_accum}) must be a positive int dividing the batch "
                             f"({x.shape[0]} windows)")
        loss = x.new_zeros((), dtype=torch.float32)
        for x_k, y_k in zip(x.chunk(grad_accum), y.chunk(grad_accum)):  # (B / N, T) each
            with autocast(precision, x.device):
                logits = model(x_k)  # (B / N, T, V)
            if cast:
                logits = logits.float()
            part = F.cross_entropy(logits.flatten(0, 1), y_k.flatten()) / grad_accum
            backward(part)  # adds this micro-batch's share to every .grad
            loss += part.detach()
    if scaler is not None:
        scaler.unscale_(optimizer)  # the true gradients (inf or NaN where they overflowed)
    norm = None
    if grad_clip is not None:
        norm = nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True)  # ‖g‖₂ ≤ grad_clip
    elif return_grad_norm:
        norm = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None]))
    if scaler is not None:
        scaler.step(optimizer)  # skipped when a gradient overflowed
        scaler.update()  # S halves after an overflow, doubles after 2,000 clean steps
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return (loss.detach(), norm.detach()) if return_grad_norm else loss.detach()

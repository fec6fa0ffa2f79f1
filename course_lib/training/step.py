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

__all__ = ["build_model", "train_step"]


def build_model(model_config: ModelConfig, seed: int = 0, device: torch.device | str | None = None) -> nn.Module:
    """A freshly initialised :class:`~course_lib.model.DecoderLM`, its weights drawn from ``seed``
    (the global generator is left as it was)."""
    from ..model import DecoderLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DecoderLM(model_config)
    return model.to(device) if device is not None else model


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               lr: float, grad_clip: float | None = 1.0, *, return_grad_norm: bool = False):
    """One optimisation step on the batch x, y (B, T); returns the batch's mean loss (a detached
    0-d tensor, not synchronised: call ``.item()`` only when you need the number), and with
    ``return_grad_norm`` the pair (loss, ‖g‖₂): the gradient's global norm *before* clipping, also
    a detached 0-d tensor."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    logits = model(x)  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())  # mean over the B·T tokens, nats
    loss.backward()
    norm = None
    if grad_clip is not None:
        norm = nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True)  # ‖g‖₂ ≤ grad_clip
    elif return_grad_norm:
        norm = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None]))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return (loss.detach(), norm.detach()) if return_grad_norm else loss.detach()

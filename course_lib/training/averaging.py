"""An exponential moving average of the weights (Polyak & Juditsky, 1992), kept beside a run:

    θ̄₁ = θ₁,    θ̄ₜ = β θ̄ₜ₋₁ + (1 − β) θₜ        after every optimiser step t

θ is what the optimiser moves; θ̄ is what is evaluated, sampled from and saved for use. Step t − k
weighs (1 − β) βᵏ in θ̄ₜ, so the average reaches back about 1 / (1 − β) steps (β = 0.99: a hundred).
Averaging the last iterates cancels part of the noise each step's batch puts into θ, without the
smaller steps that a lower learning rate would take to cancel it.

:func:`weight_average` builds it with the engine PyTorch ships, :class:`torch.optim.swa_utils.AveragedModel`
with :func:`~torch.optim.swa_utils.get_ema_multi_avg_fn`: a copy of the model whose parameters are
updated in place by one multi-tensor ``lerp`` per step (θ̄ ← θ̄ + (1 − β)(θ − θ̄)), its first
update a copy. Only parameters are averaged; buffers (the rotary tables) are the model's own.
"""

from __future__ import annotations

from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

__all__ = ["weight_average"]


def weight_average(model: nn.Module, decay: float) -> AveragedModel:
    """An exponential moving average of ``model``'s parameters with decay β = ``decay`` in (0, 1):
    call ``update_parameters(model)`` after every optimiser step; ``.module`` is the averaged model
    (in eval mode, its gradients off), ``n_averaged`` the number of steps averaged so far."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay < 1:
        raise ValueError(f"decay ({decay!r}) must be a number in (0, 1)")
    average = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(float(decay)), use_buffers=False)
    average.module.eval()
    average.module.requires_grad_(False)
    return average

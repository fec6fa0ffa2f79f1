"""The optimiser: AdamW (Loshchilov & Hutter, 2019) with decoupled weight decay on the matrices only.

    θ ← θ − lr · (m̂ / (√v̂ + ε) + λ θ)     (λ = ``weight_decay`` for parameters of two or more
                                            dimensions, 0 for gains and biases)

:func:`param_groups` splits the parameters; :func:`make_optimizer` builds the optimiser of a run.
"""

from __future__ import annotations

import torch
from torch import nn

from .run_config import TrainConfig

__all__ = ["param_groups", "make_optimizer"]


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay on the matrices, none on the vectors.

    Decayed: every parameter with two or more dimensions — the linear layers' weights and the
    embedding tables (token, and learned positions). Not decayed: norm gains and every bias (one
    dimension). Shrinking a gain or a bias towards 0 is not a simpler model, only a different
    scale or offset. The token table is decayed as in GPT-2 and nanoGPT: with tied embeddings it is
    also the output layer's matrix, and with a 65-character vocabulary every row is trained at every
    step, so decay does not erase rarely seen tokens. A tied table appears once.
    """
    decay, no_decay, seen = [], [], set()
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser of a run: AdamW over :func:`param_groups`, with the config's lr and betas; or,
    with ``config.optimizer == "muon"``, Muon for the blocks' matrices and AdamW for the rest
    (:func:`~course_lib.training.muon.make_muon_optimizer`, the update scaled to AdamW's RMS so
    that one learning rate, one weight decay and one schedule serve both).

    The fused implementation updates every parameter in one kernel per group (CPU and CUDA, torch
    ≥ 2.4): on a 2-core CPU it takes 0.7 ms per step for chapter 12's small model where the
    multi-tensor (``foreach``) one takes 4 ms and the plain loop 4.5 ms — 5 % of a whole training
    step. Where fused is unavailable, ``foreach`` is used."""
    if config.optimizer == "muon":
        from .muon import make_muon_optimizer

        return make_muon_optimizer(model, config.lr, config.lr, config.weight_decay, betas=config.betas)
    groups = param_groups(model, config.weight_decay)
    try:
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, fused=True)
    except (RuntimeError, TypeError, ValueError):  # a device or dtype without the fused kernel
        return torch.optim.AdamW(param_groups(model, config.weight_decay), lr=config.lr, betas=config.betas,
                                 foreach=True)

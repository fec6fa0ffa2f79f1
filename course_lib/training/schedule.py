"""The learning-rate schedule: linear warmup to ``lr``, then a cosine down to ``min_lr`` at the last
step (Loshchilov & Hutter, 2017, without restarts), or a constant rate and a linear cool-down over the
last steps (warmup–stable–decay: Hägele et al., 2024; the modded-nanogpt speedrun) — :func:`lr_at`
gives the rate of one step.
"""

from __future__ import annotations

import math

__all__ = ["lr_at"]


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, total_steps: int,
          cooldown: float | None = None) -> float:
    """The learning rate of step ``step`` (0-based): linear warmup, then cosine decay.

        step < W:        lr · (step + 1) / W
        W ≤ step ≤ S:    min_lr + ½ (lr − min_lr) (1 + cos(π (step − W) / (S − W)))
        step > S:        min_lr

    with W = ``warmup_steps`` and S = ``total_steps``: the first step already moves (lr / W), step
    W − 1 reaches lr, and the cosine falls from lr at step W to min_lr at step S (Loshchilov & Hutter,
    2017, without restarts; the GPT-2/3 and Llama recipe).

    With ``cooldown`` f in (0, 1], the cosine is replaced by a constant rate and a linear fall
    over the last C = round(f · S) steps (at least 1), starting no earlier than W:

        W ≤ step < S − C:  lr
        S − C ≤ step ≤ S:  lr + (min_lr − lr) (step − (S − C)) / C
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step ({step}) must be a non-negative int")
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    if cooldown is not None:
        start = max(warmup_steps, total_steps - max(1, round(cooldown * total_steps)))
        if step < start:
            return lr
        return lr + (min_lr - lr) * (step - start) / max(1, total_steps - start)
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)  # 0 → 1
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))

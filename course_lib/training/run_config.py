"""The configuration of a training run: :class:`TrainConfig`, every field checked when it is built.

A run takes ``steps`` steps of ``batch_size`` B windows of ``context`` T tokens each, B·T tokens per
step (:attr:`TrainConfig.tokens_per_step`); the model's shape is a separate
:class:`~course_lib.config.ModelConfig`. A bad field raises a ``TypeError`` or ``ValueError`` that
names it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .precision import PRECISIONS

__all__ = ["TrainConfig", "OPTIMIZERS"]

OPTIMIZERS = ("adamw", "muon")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} ({value}) must be at least 1")
    return value


def _number(name: str, value, *, minimum: float = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    bad = (value <= minimum) if strict else (value < minimum)
    if bad or not math.isfinite(value):
        raise ValueError(f"{name} ({value}) must be a finite number {'>' if strict else '≥'} {minimum}")
    return float(value)


@dataclass(frozen=True)
class TrainConfig:
    """Everything about a training run except the model's shape (a :class:`ModelConfig`).

    ``batch_size`` B windows of ``context`` T tokens per step, for ``steps`` steps. The learning rate
    warms up linearly over ``warmup_steps`` to ``lr``, then follows a cosine down to ``min_lr`` at
    the last step (:func:`lr_at`); with ``cooldown`` f it holds ``lr`` instead and falls linearly
    to ``min_lr`` over the last f·``steps`` steps. ``optimizer``: ``"adamw"``, AdamW with ``betas``
    and ``weight_decay`` on the matrices (:func:`param_groups`), or ``"muon"``, Muon for the blocks'
    matrices and AdamW for the rest, one learning rate for both
    (:func:`~course_lib.training.muon.make_muon_optimizer`); the gradient's global norm is clipped
    to ``grad_clip`` (None: no clipping). The whole validation split is evaluated every
    ``eval_interval`` steps, after the last step, and before the first when ``eval_at_start``, in
    batches of ``eval_batch_size`` windows of ``eval_context`` tokens (None: ``context``).
    ``seed`` fixes the initial weights and the batches. ``grad_accum`` N splits each step's batch into
    N micro-batches of B / N windows whose gradients add up before the update: the step sees the same
    B windows and takes the same update (to float rounding), with the activations of B / N windows in
    memory at a time. ``precision`` is the number format of the forward and backward passes
    (:mod:`~course_lib.training.precision`): ``"float32"``, ``"bfloat16"`` or ``"float16"`` autocast
    (float16 with a gradient scaler), or ``"auto"``: bfloat16 on a CUDA GPU that has it, float16 on
    one that does not, float32 on a CPU. ``compile`` runs the training steps through
    :func:`torch.compile` (the same numbers, to float rounding, once compiled); evaluation and
    checkpoints use the model itself. ``ema`` β (None: off) keeps an exponential moving average of
    the weights, θ̄ ← β θ̄ + (1 − β) θ after every step (:mod:`~course_lib.training.averaging`), and
    evaluates it instead of θ; a checkpoint holds both, and sampling uses θ̄.
    """

    batch_size: int = 32
    context: int = 128
    steps: int = 2000
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float | None = 1.0
    eval_interval: int = 500
    eval_batch_size: int = 64
    eval_at_start: bool = True
    seed: int = 0
    grad_accum: int = 1
    precision: str = "auto"
    optimizer: str = "adamw"
    cooldown: float | None = None  # None: cosine decay; f: constant, then linear over the last f
    eval_context: int | None = None  # None: the training context
    compile: bool = False  # the training steps' forward and backward through torch.compile
    ema: float | None = None  # None: evaluate the weights; β: their moving average (see above)

    def __post_init__(self) -> None:
        for name in ("batch_size", "context", "steps", "eval_interval", "eval_batch_size"):
            _positive_int(name, getattr(self, name))
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be a non-negative int")
        _number("lr", self.lr, strict=True)
        _number("min_lr", self.min_lr)
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        _number("weight_decay", self.weight_decay)
        betas = tuple(self.betas) if isinstance(self.betas, (tuple, list)) else None
        if betas is None or len(betas) != 2 or not all(
                isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas):
            raise ValueError(f"betas ({self.betas}) must be two numbers in [0, 1)")
        object.__setattr__(self, "betas", (float(betas[0]), float(betas[1])))
        if self.grad_clip is not None:
            _number("grad_clip", self.grad_clip, strict=True)
        if not isinstance(self.eval_at_start, bool):
            raise TypeError(f"eval_at_start must be True or False, got {self.eval_at_start!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed ({self.seed}) must be a non-negative int")
        _positive_int("grad_accum", self.grad_accum)
        if self.batch_size % self.grad_accum:
            raise ValueError(f"grad_accum ({self.grad_accum}) must divide batch_size ({self.batch_size}): "
                             "every micro-batch holds the same number of windows")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.cooldown is not None:
            _number("cooldown", self.cooldown, strict=True)
            if self.cooldown > 1:
                raise ValueError(f"cooldown ({self.cooldown}) must be in (0, 1]: the fraction of the "
                                 f"steps over which the rate falls")
        if self.eval_context is not None:
            _positive_int("eval_context", self.eval_context)
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be True or False, got {self.compile!r}")
        if self.ema is not None and (isinstance(self.ema, bool) or not isinstance(self.ema, (int, float))
                                     or not 0 < self.ema < 1):
            raise ValueError(f"ema ({self.ema!r}) must be None or a decay in (0, 1), e.g. 0.99 (about "
                             "the last hundred steps)")

    def replace(self, **changes) -> TrainConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @property
    def evaluation_context(self) -> int:
        """The window length of an evaluation: ``eval_context``, or the training ``context``."""
        return self.context if self.eval_context is None else self.eval_context

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.context

"""Training a language model: AdamW with decoupled weight decay on the matrices, linear warmup then
cosine decay, gradient clipping, deterministic evaluation over the whole validation split, a progress
bar, a log of every evaluation, and checkpoints that resume exactly.

One step (:func:`train_step`), for a batch x, y of shape (B, T)::

    loss = mean_{b,t} −ln softmax(model(x)[b, t])[y[b, t]]          (nats per token)
    g = ∇loss;  g ← g · min(1, c / ‖g‖₂)                             (clip the global norm to c)
    θ ← AdamW(θ, g, lr_at(step))                                      (Loshchilov & Hutter, 2019)

Losses are in nats per character; divide by ln 2 for bits per character (chapter 1).

Conventions
-----------
* Reproducible: the model's initial weights come from ``seed`` (:func:`build_model`), the batches from
  a CPU ``torch.Generator`` seeded with ``seed + 1``, dropout's masks from generator states seeded
  with ``seed`` (``randomness``; the weights' generator is another one), both owned by the
  :class:`Trainer`; the same seed gives the
  same losses, and a checkpoint carries both states, so that a resumed run continues the exact loss
  trajectory of an uninterrupted one (on a GPU, up to its kernels' own nondeterminism).
* Checkpoints hold only tensors and plain Python values (configs as dicts), written atomically and
  read back with ``torch.load(..., weights_only=True)``: loading never runs pickled code.
* ``tqdm`` is imported when a progress bar is first shown, so ``import course_lib`` needs only torch,
  NumPy and matplotlib.
* Smoke runs: when the environment variable ``COURSE_LIB_MAX_STEPS`` is set to N, every run
  (:class:`Trainer`, :func:`train_on_batches`) is shortened to at most N steps, its warmup and
  evaluation interval shrunk to fit (:func:`smoke_capped`). The test suite sets it to check that
  chapter 12 runs in a Colab-like environment without training for minutes; a real run never sets it.

Modules
-------
One concept per file, everything imported from here (``from course_lib.training import Trainer``):

* ``run_config`` — :class:`TrainConfig`, the run's hyperparameters, validated.
* ``schedule`` — :func:`lr_at`, warmup then cosine decay.
* ``optimizer`` — :func:`param_groups` and :func:`make_optimizer`, AdamW with decay on the matrices.
* ``muon`` — :func:`newton_schulz` and :class:`Muon` (momentum orthogonalised for the blocks'
  matrices), and :func:`make_muon_optimizer`, Muon with AdamW for everything else.
* ``step`` — :func:`build_model` (the initial weights) and :func:`train_step` (one step).
* ``randomness`` — the generator states dropout draws from, seeded per run and kept in checkpoints.
* ``precision`` — :func:`resolve_precision`, :func:`autocast` and :func:`make_grad_scaler`: float32,
  bfloat16 or float16 (with loss scaling) for the forward and backward passes.
* ``distributed`` — :func:`init_distributed`, :func:`rank_rows`, :func:`mean_over_ranks`: several
  processes under torchrun, each training on its rows of the same global batch.
* ``averaging`` — :func:`weight_average`, an exponential moving average of the weights.
* ``evaluation`` — :func:`evaluate`, :func:`bits_per_char` and :func:`loss_per_position`.
* ``progress`` — ``progress_bar`` and ``close_progress_bar``.
* ``loop`` — :func:`smoke_capped`, :func:`train_on_batches` and :class:`Trainer`.
* ``checkpoints`` — :func:`save_checkpoint`, :func:`load_checkpoint` and :class:`CheckpointError`.
* ``presets`` — ``PRESETS`` and :func:`get_preset`.
"""

from __future__ import annotations

from .averaging import weight_average
from .checkpoints import (CHECKPOINT_FORMAT, CheckpointError, load_checkpoint, model_config_from_dict,
                          save_checkpoint, train_config_from_dict)
from .distributed import World, close_distributed, init_distributed, mean_over_ranks, rank_rows
from .evaluation import LN2, bits_per_char, evaluate, loss_per_position
from .loop import Trainer, smoke_capped, train_on_batches
from .muon import (NS_COEFFICIENTS, CombinedOptimizer, Muon, make_muon_optimizer, muon_param_groups,
                   muon_update, newton_schulz, newton_schulz_band)
from .optimizer import make_optimizer, param_groups
from .precision import PRECISIONS, autocast, make_grad_scaler, resolve_precision
from .presets import PRESETS, get_preset
from .progress import close_progress_bar, progress_bar
from .run_config import TrainConfig
from .schedule import lr_at
from .step import build_model, train_step

__all__ = [
    "TrainConfig",
    "CheckpointError",
    "lr_at",
    "param_groups",
    "make_optimizer",
    "NS_COEFFICIENTS",
    "newton_schulz",
    "newton_schulz_band",
    "muon_update",
    "Muon",
    "CombinedOptimizer",
    "muon_param_groups",
    "make_muon_optimizer",
    "build_model",
    "train_step",
    "weight_average",
    "evaluate",
    "bits_per_char",
    "loss_per_position",
    "train_on_batches",
    "smoke_capped",
    "Trainer",
    "save_checkpoint",
    "load_checkpoint",
    "model_config_from_dict",
    "train_config_from_dict",
    "PRESETS",
    "get_preset",
    "PRECISIONS",
    "resolve_precision",
    "autocast",
    "make_grad_scaler",
    "World",
    "init_distributed",
    "close_distributed",
    "rank_rows",
    "mean_over_ranks",
]

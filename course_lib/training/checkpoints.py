"""Checkpoints: the state of a run as tensors and plain Python values (configs as dicts), tagged with
:data:`CHECKPOINT_FORMAT`, written atomically (:func:`save_checkpoint`) and read back with
``torch.load(..., weights_only=True)`` (:func:`load_checkpoint`), so that loading never runs pickled
code. Anything wrong with a checkpoint raises a :class:`CheckpointError`.
"""

from __future__ import annotations

import dataclasses
import os

import torch

from .._io import atomic_write
from ..config import ModelConfig
from .run_config import TrainConfig

__all__ = ["CHECKPOINT_FORMAT", "CheckpointError", "save_checkpoint", "load_checkpoint",
           "model_config_from_dict", "train_config_from_dict"]

CHECKPOINT_FORMAT = "course_lib.training/1"


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, or does not match the model or run it is loaded into."""


def save_checkpoint(state: dict, path: str | os.PathLike) -> None:
    """``torch.save(state)`` to ``path`` atomically: written to a temporary file in the same folder,
    flushed to disk, then renamed over ``path`` (``os.replace``), so a crash at any moment leaves
    either the old checkpoint or the new one, never half of one."""
    atomic_write(path, lambda f: torch.save(state, f), binary=True, suffix=".pt")


_REQUIRED = ("format", "model_config", "train_config", "model", "optimizer", "step", "batch_generator",
             "history", "step_losses", "interval", "elapsed_seconds")


def load_checkpoint(path: str | os.PathLike, *, model_config: ModelConfig | None = None,
                    train_config: TrainConfig | None = None, map_location="cpu") -> dict:
    """Read a checkpoint with ``torch.load(weights_only=True)`` (tensors and plain values only; no
    pickled code runs). When ``model_config`` / ``train_config`` are given, every field must equal
    the checkpoint's (a field the checkpoint predates counts as its default), else
    :class:`CheckpointError` names the first that differs. A missing,
    truncated or foreign file also raises :class:`CheckpointError`."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint {path!r} does not exist")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # a truncated zip, random bytes, a pickle with code in it, ...
        text = str(err).strip()
        first_line = text.splitlines()[0].split(". ")[0] if text else type(err).__name__
        raise CheckpointError(f"checkpoint {path!r} is corrupt or not a course_lib checkpoint "
                              f"({first_line})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path!r} is not a course_lib training checkpoint "
                              f"(format {CHECKPOINT_FORMAT!r} expected)")
    missing = [k for k in _REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path!r} lacks {missing}")
    for label, expected, saved in (("model_config", model_config, state["model_config"]),
                                   ("train_config", train_config, state["train_config"])):
        if expected is None:
            continue
        defaults = {f.name: f.default for f in dataclasses.fields(expected)
                    if f.default is not dataclasses.MISSING}
        for field, value in dataclasses.asdict(expected).items():
            if field not in saved and field not in defaults:
                raise CheckpointError(f"checkpoint's {label} has no field {field!r}")
            # a field added since the checkpoint was written held its default there
            theirs = saved.get(field, defaults.get(field))
            theirs = tuple(theirs) if isinstance(value, tuple) else theirs
            if theirs != value:
                raise CheckpointError(f"checkpoint's {label}.{field} is {theirs!r}, but this run's is "
                                      f"{value!r}")
    return state


def _config_from_dict(cls, values: dict, label: str):
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise CheckpointError(f"checkpoint's {label} has unknown fields {unknown}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def model_config_from_dict(values: dict) -> ModelConfig:
    """A ModelConfig from a checkpoint's plain dict (unknown fields are an error)."""
    return _config_from_dict(ModelConfig, values, "model_config")


def train_config_from_dict(values: dict) -> TrainConfig:
    """A TrainConfig from a checkpoint's plain dict (unknown fields are an error)."""
    return _config_from_dict(TrainConfig, values, "train_config")

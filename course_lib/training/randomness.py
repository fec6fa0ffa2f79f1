"""The randomness a training step draws besides its batch: dropout's masks.

``nn.Dropout``, ``F.dropout`` and ``F.scaled_dot_product_attention(dropout_p=...)`` take no
generator: they draw from torch's global ones, the CPU's for tensors on a CPU and the device's for
tensors on a GPU. A run whose masks depended on whatever had drawn from those before it (a notebook's
earlier cells, another run in the same process) would not be reproducible from its seed, and a
resumed run would draw other masks than the uninterrupted one. So a :class:`~course_lib.training.Trainer`
keeps its own states of the two generators, seeded from the run's seed (:func:`seeded_states`),
steps on them (:func:`drawing_from`), and saves them in its checkpoints. The caller's global
generators are left as they were.

A state is a dict ``{"cpu": ByteTensor, "cuda": ByteTensor or None}``, in the formats of
``torch.get_rng_state()`` and ``torch.cuda.get_rng_state()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["seeded_states", "current_states", "drawing_from"]


def seeded_states(seed: int, device: torch.device | str) -> dict:
    """Fresh generator states for a run on ``device``, seeded with ``seed``: the CPU's, and the GPU's
    when ``device`` is one (None otherwise). Nothing global changes."""
    device = torch.device(device)
    cuda = torch.Generator(device).manual_seed(seed).get_state() if device.type == "cuda" else None
    return {"cpu": torch.Generator().manual_seed(seed).get_state(), "cuda": cuda}


def current_states(device: torch.device | str) -> dict:
    """The global generators' states now, for a run on ``device``."""
    device = torch.device(device)
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return {"cpu": torch.get_rng_state(), "cuda": cuda}


@contextlib.contextmanager
def drawing_from(states: dict, device: torch.device | str) -> Iterator[None]:
    """Inside the block the global generators continue from ``states``; on leaving, they are put
    back as they were before it (read :func:`current_states` inside the block to keep where the
    block's draws got to)."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else []):
        torch.set_rng_state(states["cpu"])
        if cuda and states.get("cuda") is not None:
            torch.cuda.set_rng_state(states["cuda"], device)
        yield

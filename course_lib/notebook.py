"""What the first cell of every chapter and exercise notebook calls, and the glue helper.

The setup cell itself (identical in every notebook, kept so by a test) installs ``course_lib`` when it
is missing, as on Colab, then calls :func:`setup`.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from .device import get_device


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (all devices) with ``seed``."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def setup(seed: int = 0) -> torch.device:
    """Seed the generators, set readable print and plot defaults, and return the device to use."""
    seed_everything(seed)
    torch.set_printoptions(precision=4, sci_mode=False)
    np.set_printoptions(precision=4, suppress=True)
    import matplotlib as mpl

    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 110,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    device = get_device()
    print(f"course_lib ready on {device} (seed {seed})")
    return device


def glue(name: str, value: Any, display: bool = False) -> Any:
    """Store ``value`` under ``name`` for the book's ``{glue}`` roles, and return it.

    Uses ``myst_nb.glue`` when it is installed (book builds); elsewhere, e.g. on Colab, it only returns
    the value, so chapters run without the book toolchain.
    """
    if isinstance(value, torch.Tensor):
        value = value.item() if value.numel() == 1 else value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    try:
        from myst_nb import glue as _myst_glue
    except ImportError:
        return value
    _myst_glue(name, value, display=display)
    return value


def show_source(obj: Any):
    """Display the source of a course_lib function or class, highlighted, so a page cannot drift from
    the package it documents."""
    import inspect

    from IPython.display import Code

    return Code(inspect.getsource(obj), language="python")

"""The one place in course_lib that chooses a device.

Everything else takes tensors and follows them: code in the book and the exercises creates tensors
with ``device=device`` and never calls ``.cuda()``, so the same notebook runs on a laptop CPU, in CI
and on a Colab GPU.
"""

from __future__ import annotations

import torch


def get_device() -> torch.device:
    """Return ``cuda`` when a CUDA GPU is visible, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def usable_device(name: str | None = None, option: str = "--device") -> torch.device:
    """``name`` ("cpu", "cuda", "cuda:1", …) as a device on which a tensor can be made here, or
    :func:`get_device`'s choice when ``name`` is None. What the command lines call on their
    ``--device``: a name that is not a device, or one this machine cannot use (no GPU, or a torch
    built without CUDA), raises a ValueError in one line that names ``option``."""
    if name is None:
        return get_device()
    try:
        device = torch.device(name)
        torch.empty(0, device=device)
    except (RuntimeError, ValueError, AssertionError) as err:  # AssertionError: torch built without CUDA
        raise ValueError(f"{option} {name!r} is not usable here: {str(err).splitlines()[0]}") from None
    return device


def synchronize(device: torch.device | str) -> None:
    """Wait until ``device`` has finished the work queued on it. A CUDA GPU runs operations
    asynchronously: a call returns once its kernel is queued, so a clock read after it measures
    the queueing, not the work. Nothing to wait for on a CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)

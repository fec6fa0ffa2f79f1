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

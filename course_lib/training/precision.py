"""Mixed precision: which number format the forward and backward passes compute in.

The weights, their gradients and AdamW's moments stay in float32 (the *master* copy). Under
``torch.autocast`` the matrix multiplications — most of the FLOPs — run in a 16-bit format, and the
operations that need range or accuracy (softmax, norms, the loss) stay in float32:

* ``"float32"``: no autocast; the reference.
* ``"bfloat16"``: 8 exponent bits like float32, so the same range (about 1e±38) and no overflow,
  but 8 significant bits (about 3 decimal digits). Needs no loss scaling. Runs on recent CUDA GPUs
  (compute capability 8.0 and up: A100, H100, L4, RTX 30xx) and on CPUs.
* ``"float16"``: 5 exponent bits, range about 6e−5 … 65,504 (smaller numbers lose precision and
  vanish below 6e−8), 11 significant bits. Small gradients underflow to zero, so the loss is
  multiplied by a scale S before the backward pass and the gradients divided by S before the
  step (``torch.amp.GradScaler``). A step whose gradients overflowed to inf or NaN is skipped and S
  halved; after 2,000 clean steps S doubles. For GPUs without bfloat16, such as Colab's T4.

:func:`resolve_precision` turns ``"auto"`` into one of them for a device: bfloat16 on a CUDA GPU
that computes in it natively, float16 on one that does not, float32 on a CPU (where autocast saves
little and costs accuracy). "Natively" matters: ``torch.cuda.is_bf16_supported()`` also answers
yes for a GPU that can only *emulate* bfloat16 (a T4, compute capability 7.5), slowly.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["PRECISIONS", "DTYPES", "resolve_precision", "autocast", "make_grad_scaler"]

PRECISIONS = ("auto", "float32", "bfloat16", "float16")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_precision(precision: str, device: torch.device | str, *, float16: bool = True) -> str:
    """``precision`` as one of float32, bfloat16, float16 for ``device``: ``"auto"`` picks bfloat16
    on a CUDA GPU that computes in it natively, float16 on one that does not (float32 instead with
    ``float16=False``, for an optimiser that cannot take float16's gradient scaler), float32
    elsewhere. An explicit 16-bit precision on a device without autocast for it raises a
    ValueError."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    device = torch.device(device)
    if precision == "auto":
        if device.type != "cuda":
            return "float32"
        native = torch.cuda.is_bf16_supported(including_emulation=False)  # of the current GPU
        return "bfloat16" if native else "float16" if float16 else "float32"
    if device.type not in ("cpu", "cuda") and precision != "float32":
        raise ValueError(f"precision {precision!r} needs a CPU or a CUDA device, not {device.type!r}")
    return precision


def autocast(precision: str, device: torch.device | str):
    """A context manager: ``torch.autocast`` to the 16-bit format of ``precision`` on ``device``, or
    nothing for float32."""
    device = torch.device(device)
    if precision == "float32":
        return contextlib.nullcontext()
    if precision not in DTYPES:
        raise ValueError(f"precision must be one of {tuple(DTYPES)} (resolve 'auto' first), got {precision!r}")
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


def make_grad_scaler(precision: str, device: torch.device | str) -> torch.amp.GradScaler | None:
    """A ``GradScaler`` for float16 (None otherwise): the loss is scaled up before the backward pass
    so that small gradients survive float16, and steps with overflowed gradients are skipped."""
    if precision != "float16":
        return None
    return torch.amp.GradScaler(torch.device(device).type)

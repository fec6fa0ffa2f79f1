"""Calling the course's ``torch.autograd.Function`` subclasses at the cost of the C++ call alone.

``Function.apply`` is a Python wrapper around ``torch._C._FunctionBase.apply``. For a Function in
the ``setup_context`` style (the style ``torch.func`` transforms require, which RoPE's and
RMSNorm's hand-written backward passes use), that wrapper binds every call's arguments to
``forward``'s signature with ``inspect.signature`` and maps them for dead functorch wrappers, tens
of microseconds of Python per call (pytorch/pytorch#189573). A small model's training step
launches kernels of about that length, so the gaps add up: in chapter 12's 4-layer model (17 such
calls a step) the wrapper cost 1.5 % of the step (README, benchmark section).

:func:`apply_function` takes the wrapper's own fast path: outside ``torch.func`` transforms, with
positional arguments, the wrapper has nothing to do but hand them to the C++ ``apply``, so this
calls it directly. Under a transform (vmap, jacrev, …) it goes through ``Function.apply``.
"""

from __future__ import annotations

import torch

__all__ = ["apply_function"]

try:  # private helpers of Function.apply itself (torch ≥ 2.1); without them, use the wrapper
    from torch._C import _are_functorch_transforms_active
    from torch._functorch.utils import unwrap_dead_wrappers
except ImportError:  # pragma: no cover - older or rearranged torch
    _are_functorch_transforms_active = None


def apply_function(function: type[torch.autograd.Function], *args):
    """``function.apply(*args)``, with every argument of ``forward`` given positionally."""
    if (_are_functorch_transforms_active is None or torch.compiler.is_compiling()
            or _are_functorch_transforms_active()):
        # under a transform, or while torch.compile traces (Dynamo knows Function.apply, not
        # the C++ call behind it): the public path
        return function.apply(*args)
    # what Function.apply does after binding the arguments, when no transform is active
    return super(torch.autograd.Function, function).apply(*unwrap_dead_wrappers(args))

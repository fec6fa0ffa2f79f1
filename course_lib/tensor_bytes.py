"""How many bytes of new tensors a computation creates, counted operator by operator.

Chapter 3 measures the memory of attention with it: the explicit math, which makes several
(H, T, T) tensors, against the fused kernel, which makes none.

Conventions
-----------
* :class:`NewTensorBytes` is a ``TorchDispatchMode`` — the hook that
  ``torch.utils.flop_counter`` is built on. While it is active it sees every aten operator
  that runs and the tensors it returns. A returned tensor counts when its storage is new:
  not the storage of one of the operator's inputs (a view, or an in-place result) and not
  one already counted in the same call. Its size is the storage's ``nbytes()``.
* Only what operators *return* is seen. Scratch memory that a fused kernel allocates and
  frees inside one call, and memory the allocator rounds up or caches, are not; nor are
  tensors created outside the ``with`` block. The count is what a computation creates, not
  its peak memory.
* ``by_op`` splits the total by operator name (``"aten.where.self"``,
  ``"aten.mm.default"``, …), in the order the operators first ran.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["NewTensorBytes", "bytes_created"]


class NewTensorBytes(TorchDispatchMode):
    """Adds up the bytes of every new tensor an operator returns while active.

    ``total`` is the sum, ``by_op`` the same bytes by operator name::

        with NewTensorBytes() as counter:
            y = x @ w
        counter.total  # y.numel() * y.element_size()
    """

    def __init__(self):
        super().__init__()
        self.total = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # the inputs' storages, and so views of them and in-place results, are not new
        known = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() in known:
                continue
            known.add(storage.data_ptr())
            self.total += storage.nbytes()
            name = str(func)
            self.by_op[name] = self.by_op.get(name, 0) + storage.nbytes()
        return out


def bytes_created(fn: Callable[[], object]) -> int:
    """The bytes of the new tensors that calling ``fn()`` creates (see :class:`NewTensorBytes`)."""
    with NewTensorBytes() as counter:
        fn()
    return counter.total

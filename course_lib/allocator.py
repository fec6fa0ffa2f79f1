"""Where a new tensor's memory comes from on a CPU, and how to keep its cost out of timings.

A tensor of a few megabytes is memory that PyTorch's CPU allocator asks the C library for. glibc
serves a block above its *mmap threshold* with pages fresh from the operating system, and the first
write to each page is a page fault: the kernel maps it and fills it with zeros, time that belongs to
no computation. A freed block is handed back, or kept in the heap for the next request, by rules
that depend on the process's history: glibc raises the threshold when a mapped block is freed, and
trims the heap's top when enough free memory collects there. So two identical operations can take
very different times in one process, one writing into memory already mapped and the other into
memory faulted in afresh, and the difference grows when other programs fault memory in at the same
time (measured in chapter 5 with a second process allocating beside it).

:func:`keep_freed_memory` fixes both rules: blocks up to 32 MiB (``M_MMAP_THRESHOLD``, the largest
glibc allows) come from the heap, and the heap is trimmed only when more than 1 GiB is free at its
top (``M_TRIM_THRESHOLD``). Setting either also switches off glibc's adjustment of both. A timed
operation then writes into memory the process already has, whatever ran before it.
:func:`~course_lib.notebook.setup` calls it in every chapter; the benchmarks call it before timing.
"""

from __future__ import annotations

import ctypes

__all__ = ["keep_freed_memory"]

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters, from glibc's <malloc.h>


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory in the process (blocks up to 32 MiB from the heap, the heap
    trimmed only beyond 1 GiB of free space at its top) instead of returning it to the kernel, so
    that new tensors reuse pages already mapped. True when glibc took both settings; False where
    the C library is not glibc (macOS, Windows, musl), which is then left as it is."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 1 << 30))

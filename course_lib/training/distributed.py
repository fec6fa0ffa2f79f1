"""Data-parallel training across processes, started by torchrun (the launcher PyTorch ships).

    torchrun --standalone --nproc_per_node=N -m course_lib.train ...

starts N copies of the command. torchrun tells each its place in the environment variables ``RANK``
(0 … N − 1), ``WORLD_SIZE`` (N) and ``LOCAL_RANK`` (its GPU on this machine); :func:`init_distributed`
reads them and joins the process group: NCCL between GPUs, gloo between CPU processes. Without
torchrun the same code runs as a world of one, with no process group at all.

How a step divides, with B the batch size of the run:

* every rank draws the *same* global batch of B windows from the run's generator (each rank holds
  a copy of it, seeded alike) and keeps its own B / N rows (:func:`rank_rows`): rank r takes rows
  r·B/N … (r + 1)·B/N − 1. So N processes see exactly the windows one process sees, and a run's
  batches do not depend on N;
* each rank computes the mean loss over its rows and its gradient; DistributedDataParallel averages
  the gradients across the ranks during the backward pass, which is the gradient of the mean over
  all B windows, because every rank holds the same number of tokens:

      ∇ (1/B) Σ_b ℓ_b = (1/N) Σ_r ∇ (N/B) Σ_{b ∈ rank r} ℓ_b;

* every rank then clips the same gradient and takes the same AdamW step, so the weights stay equal
  without being sent;
* the logged loss is the mean of the ranks' losses (:func:`mean_over_ranks`), the loss of the
  whole batch; only rank 0 prints, writes the log and saves checkpoints (:attr:`World.is_main`).
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

__all__ = ["World", "init_distributed", "close_distributed", "rank_rows", "mean_over_ranks"]


@dataclasses.dataclass(frozen=True)
class World:
    """Where this process stands: ``rank`` of ``size`` processes, on ``device`` (None: whatever
    device the model is on)."""

    rank: int = 0
    size: int = 1
    device: torch.device | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that prints and writes."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} ({value!r}) must be an integer") from None


def init_distributed(device: torch.device) -> World:
    """Join the process group torchrun set up, if any: a :class:`World` of one (no group) when
    ``WORLD_SIZE`` is unset or 1. On a CUDA ``device`` each process takes GPU ``LOCAL_RANK`` and the
    group talks over NCCL; on a CPU over gloo."""
    size = _env_int("WORLD_SIZE") or 1
    if size == 1:
        return World(0, 1, device)
    rank, local_rank = _env_int("RANK"), _env_int("LOCAL_RANK")
    if rank is None or local_rank is None:
        raise ValueError("WORLD_SIZE is set but RANK or LOCAL_RANK is not: start the run with torchrun")
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK {local_rank} has no GPU: {torch.cuda.device_count()} visible")
        device = torch.device(device.type, local_rank)  # this process's GPU
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return World(rank, size, device)


def close_distributed() -> None:
    """Leave the process group (a no-op without one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_rows(batch: torch.Tensor, world: World) -> torch.Tensor:
    """This rank's rows of a global batch (B, …): rows r·B/N … (r + 1)·B/N − 1 of rank r among N.
    B must divide by N (every rank then holds the same number of tokens, which makes the average of
    the ranks' mean losses the mean over the whole batch)."""
    if batch.shape[0] % world.size:
        raise ValueError(f"the batch ({batch.shape[0]} windows) must divide among {world.size} processes")
    share = batch.shape[0] // world.size
    return batch[world.rank * share:(world.rank + 1) * share]  # (B / N, …)


def mean_over_ranks(value: torch.Tensor, world: World) -> torch.Tensor:
    """The mean of a 0-d tensor over the ranks (itself in a world of one): every rank gets it."""
    if not world.distributed:
        return value
    total = value.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total / world.size

"""A Shakespeare model that has learned to copy: chapter 12 finds its induction heads on natural text.

Chapter 12's main model, trained on Tiny Shakespeare alone, forms no induction head within a CPU's
budget: at this size and length its loss is spent on spelling. This model sees the same text, but
half of every batch is made of *repeated passages* (:func:`~course_lib.data.repeated_passages`): a
passage of 16 … 65 characters of the training text written out again and again, with a period that
changes from batch to batch. Copying pays there, and a period that changes means the only way to
copy is to find where the current text occurred before — an induction head. Its heads are then
scored and switched off on *unrepeated* validation text, where the copying it learned has to prove
itself on names and phrases that recur by themselves.

    python -m course_lib.experiments.copying --out course_lib/experiments/results

trains it (on one thread, about ten minutes on the machine that made the committed copy) and writes
``OUT/copying/model.pt`` (an existing one is kept unless ``--force`` is given): the weights, both configs, every step's loss and the provenance. Training is
deterministic: the same command, thread count, torch and CPU give the same weights.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import sys
import time
from collections.abc import Callable

import torch

from .._cli import OneLineParser
from .._io import atomic_write
from ..config import ModelConfig
from ..data import get_batch, load_char_data, repeated_passages
from ..model import DecoderLM
from ..training import TrainConfig, build_model, lr_at, make_optimizer, train_step
from ..training.progress import close_progress_bar, progress_bar
from .provenance import provenance
from .runner import RESULTS

__all__ = ["COPY_MODEL", "COPY_RUN", "REPEAT_SHARE", "MIN_PERIOD", "copying_batches", "train_copying_model",
           "save_copying_model", "load_copying_model", "model_path", "main"]

# Two blocks (the fewest an induction circuit needs), four heads each, width 128, context 128.
COPY_MODEL = ModelConfig(vocab_size=65, d_model=128, n_layers=2, n_heads=4, d_ff=340, max_seq_len=128,
                         tie_embeddings=True, init_std=128 ** -0.5)
COPY_RUN = TrainConfig(batch_size=16, context=128, steps=2000, lr=3e-3, min_lr=3e-4, warmup_steps=100,
                       weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, seed=0)
REPEAT_SHARE = 0.5  # the share of each batch's rows that are repeated passages
MIN_PERIOD = 16  # the shortest repeated passage (characters)
THREADS = 1  # training is deterministic for a fixed thread count; the committed model used one


def model_path(out: str | os.PathLike = RESULTS) -> str:
    """Where the model lives under a results folder ``out``: ``out/copying/model.pt``."""
    return os.path.join(os.fspath(out), "copying", "model.pt")


def copying_batches(train_data: torch.Tensor, config: TrainConfig,
                    generator: torch.Generator) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """A function of no arguments returning the next batch (x, y), each (B, T): the first
    ⌊B · REPEAT_SHARE⌋ rows are repeated passages, the others ordinary windows of ``train_data``,
    both drawn with ``generator``."""
    n_repeated = int(config.batch_size * REPEAT_SHARE)

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        xr, yr = repeated_passages(train_data, n_repeated, config.context, generator, MIN_PERIOD)  # (R, T)
        xo, yo = get_batch(train_data, config.batch_size - n_repeated, config.context, generator)  # (B − R, T)
        return torch.cat([xr, xo]), torch.cat([yr, yo])  # (B, T) each

    return next_batch


@contextlib.contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_copying_model(*, stop_after: int | None = None,
                        progress: bool = False) -> tuple[DecoderLM, list[float], float]:
    """Train :data:`COPY_MODEL` with :data:`COPY_RUN` on mixed batches (:func:`copying_batches`), on
    :data:`THREADS` thread(s). ``stop_after``: stop after that many steps, on the full run's
    learning-rate schedule (to check a run against the committed one cheaply). Returns the model,
    every step's training loss (nats) and the training time (seconds)."""
    config = COPY_RUN
    steps = config.steps if stop_after is None else min(int(stop_after), config.steps)
    train_data = load_char_data().train
    with _threads(THREADS):
        model = build_model(COPY_MODEL, seed=config.seed)
        optimizer = make_optimizer(model, config)
        next_batch = copying_batches(train_data, config, torch.Generator().manual_seed(config.seed))
        model.train()
        bar = progress_bar(steps) if progress else None
        losses: list[float] = []
        start = time.perf_counter()
        try:
            for step in range(steps):
                x, y = next_batch()  # (B, T) each
                lr = lr_at(step, lr=config.lr, min_lr=config.min_lr, warmup_steps=config.warmup_steps,
                           total_steps=config.steps)
                losses.append(float(train_step(model, optimizer, x, y, lr, config.grad_clip)))
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                close_progress_bar(bar)
        seconds = time.perf_counter() - start
    model.eval()
    return model, losses, seconds


def save_copying_model(model: DecoderLM, losses: list[float], seconds: float, path: str | os.PathLike,
                       command: list[str] | None = None) -> None:
    """Write the model, its configs, its step losses, the training time and the provenance to
    ``path``, atomically (a failure leaves no half-written file)."""
    state = {
        "model_config": dataclasses.asdict(COPY_MODEL),
        "train_config": dataclasses.asdict(COPY_RUN),
        "repeat_share": REPEAT_SHARE,
        "min_period": MIN_PERIOD,
        "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "step_losses": losses,
        "train_seconds": seconds,
        # plain values only (torch.__version__ is a str subclass), so that weights_only loading reads it
        "provenance": json.loads(json.dumps({**provenance(command), "threads": THREADS}, default=str)),
    }
    os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
    atomic_write(path, lambda f: torch.save(state, f), binary=True, suffix=".pt")


def load_copying_model(path: str | os.PathLike | None = None,
                       device: torch.device | str = "cpu") -> tuple[DecoderLM, dict]:
    """The committed model (or the one at ``path``), in eval mode on ``device``, and its record (the
    saved dict without the weights). Raises FileNotFoundError naming the regenerating command when
    the file is missing."""
    path = os.fspath(path) if path is not None else model_path()
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist; make it with "
                                f"`python -m course_lib.experiments.copying --out {os.path.dirname(os.path.dirname(path))}`")
    state = torch.load(path, map_location="cpu", weights_only=True)
    model = DecoderLM(ModelConfig(**{k: tuple(v) if isinstance(v, list) else v
                                     for k, v in state["model_config"].items()}))
    model.load_state_dict(state.pop("model"))
    return model.to(device).eval(), state




def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m course_lib.experiments.copying",
                     description="Train chapter 12's copying model and write OUT/copying/model.pt.")
    parser.add_argument("--out", default=RESULTS, metavar="DIR",
                        help="results folder (default: the package's own, where the committed model lives)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--force", action="store_true", help="train again even if OUT holds the model")
    args = parser.parse_args(argv)
    path = model_path(args.out)
    if os.path.exists(path) and not args.force:
        print(f"{path} exists: kept (--force trains it again)")
        return 0
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.access(os.path.dirname(path), os.W_OK):
            raise PermissionError(f"{os.path.dirname(path)} is not writable")
    except OSError as err:
        print(f"{parser.prog}: error: cannot write to {args.out!r} ({err.strerror or err})", file=sys.stderr)
        return 2
    model, losses, seconds = train_copying_model(progress=not args.no_progress)
    command = ["python", "-m", "course_lib.experiments.copying", "--out", args.out]
    save_copying_model(model, losses, seconds, path, command)
    print(f"wrote {path}: {len(losses)} steps in {seconds:.0f} s, last loss {losses[-1]:.3f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Train a character-level language model on Tiny Shakespeare from the command line.

    python -m course_lib.train                          # preset shakespeare-cpu,
                                                        # into runs/shakespeare-cpu
    python -m course_lib.train --preset shakespeare-gpu --out runs/gpu
    python -m course_lib.train --out runs/cpu --resume  # continue a run from
                                                        # its checkpoint
    python -m course_lib.train --precision bfloat16     # autocast (default auto:
                                                        # bfloat16 on a recent GPU)
    torchrun --standalone --nproc_per_node=2 -m course_lib.train --preset tiny
                                                        # data parallel: 2 processes

Writes into ``--out``: ``checkpoint.pt`` (model, both configs, optimiser state, step,
the batch generator; saved atomically after every evaluation) and ``log.json`` (the
run's settings and one record per evaluation: step, train loss, validation loss in nats
per character, tokens per second, elapsed seconds). Bad input ends with a one-line error
and exit status 2.

Under torchrun the N processes train one run together
(:mod:`course_lib.training.distributed`): each takes its share of every batch, the gradients
are averaged, and rank 0 prints and writes; the log is the one a single process would write.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import sys
import tempfile
import time

import torch

from ._cli import OneLineParser
from ._io import write_json
from .data import CorpusError, load_char_data
from .device import usable_device
from .training.distributed import close_distributed, init_distributed
from .training import PRECISIONS, PRESETS, CheckpointError, Trainer, build_model, get_preset

CHECKPOINT = "checkpoint.pt"
LOG = "log.json"




def _parsed(text: str, kind: type, ok, rule: str):
    """``kind(text)`` if ``ok`` holds for it, else an argparse error stating ``rule``."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text} {rule}")
    return value


def positive_int(text: str) -> int:
    return _parsed(text, int, lambda v: v >= 1, "must be at least 1")


def non_negative_int(text: str) -> int:
    return _parsed(text, int, lambda v: v >= 0, "must be non-negative")


def positive_float(text: str) -> float:
    return _parsed(text, float, lambda v: v > 0 and math.isfinite(v), "must be a finite number > 0")


def non_negative_float(text: str) -> float:
    return _parsed(text, float, lambda v: v >= 0 and math.isfinite(v), "must be a finite number ≥ 0")


def probability(text: str) -> float:
    return _parsed(text, float, lambda v: 0 < v <= 1, "must lie in (0, 1]")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m course_lib.train", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="presets:\n" + "\n".join(f"  {name:16} {_describe(name)}" for name in PRESETS))
    p.add_argument("--preset", default="shakespeare-cpu", metavar="NAME",
                   help="the run to train: model shape and training settings (default: shakespeare-cpu; "
                        "listed below)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="folder for checkpoint.pt and log.json, created if needed (default: runs/PRESET)")
    p.add_argument("--steps", type=positive_int, metavar="N", default=None,
                   help="train for N steps instead of the preset's number (the schedule follows N)")
    p.add_argument("--seed", type=non_negative_int, metavar="S", default=None,
                   help="seed for the initial weights and the batches (default: the preset's)")
    p.add_argument("--grad-accum", type=positive_int, metavar="N", default=None,
                   help="split each step's batch into N micro-batches (same batch and update, less "
                        "memory; N must divide the batch size)")
    p.add_argument("--ema", type=float, metavar="BETA", default=None,
                   help="evaluate, save and sample from a moving average of the weights, "
                        "θ̄ ← BETA·θ̄ + (1 − BETA)·θ after every step (0 < BETA < 1; 0.99: about the "
                        "last hundred steps)")
    p.add_argument("--target-loss", type=positive_float, metavar="X", default=None,
                   help="stop at the first evaluation whose validation loss is at or below X nats "
                        "per character, and report the time it took")
    p.add_argument("--precision", default=None, choices=PRECISIONS,
                   help="number format of the forward and backward passes (default: the preset's, "
                        "auto: bfloat16 on a GPU that has it, float16 on one that does not, float32 "
                        "on a CPU)")
    p.add_argument("--compile", action="store_true",
                   help="run the training steps through torch.compile (compiling takes a while first)")
    p.add_argument("--device", default=None, metavar="DEV",
                   help="cpu or cuda (default: cuda when available, else cpu)")
    p.add_argument("--threads", type=positive_int, metavar="N", default=None,
                   help="CPU threads for torch (default: torch's choice, one per core)")
    p.add_argument("--resume", action="store_true",
                   help="continue from DIR/checkpoint.pt (same preset and settings) instead of starting anew")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (evaluations are still printed)")
    return p


def _describe(name: str) -> str:
    model, run = PRESETS[name]
    kind = "modern block" if model.norm == "rms" and model.ffn == "swiglu" else "GPT-2 block"
    return (f"{kind}, {model.n_layers} layers × {model.d_model}, context {run.context}, batch {run.batch_size}, "
            f"{run.steps} steps")


def _prepare_out(out: str, resume: bool) -> str:
    """Create ``out`` and check that files can be written there (before any training)."""
    try:
        os.makedirs(out, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as err:
        raise ValueError(f"--out {out!r} is not a writable folder: {err.strerror or err}") from None
    if resume and not os.path.exists(os.path.join(out, CHECKPOINT)):
        raise ValueError(f"--resume: no {CHECKPOINT} in --out {out!r} to continue from")
    return out


def run(args: argparse.Namespace) -> dict:
    """Train as ``args`` say; return the log written to log.json."""
    model_config, train_config = get_preset(args.preset)
    changes = {k: v for k, v in (("steps", args.steps), ("seed", args.seed),
                                 ("grad_accum", args.grad_accum), ("precision", args.precision),
                                 ("ema", args.ema),
                                 ("compile", args.compile or None))
               if v is not None}
    if changes:
        train_config = train_config.replace(**changes)
    out = _prepare_out(args.out or os.path.join("runs", args.preset), args.resume)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = usable_device(args.device)
    world = init_distributed(device)  # a world of one unless started by torchrun
    device = world.device

    corpus = load_char_data()
    if corpus.tokenizer.vocab_size != model_config.vocab_size:
        raise ValueError(f"preset {args.preset!r} has vocab_size {model_config.vocab_size}, the corpus "
                         f"{corpus.tokenizer.vocab_size} characters")
    model = build_model(model_config, train_config.seed, device)
    progress = not args.no_progress
    checkpoint = os.path.join(out, CHECKPOINT)
    if args.resume:
        trainer = Trainer.from_checkpoint(checkpoint, model, corpus.train, corpus.val, train_config,
                                          progress=progress, world=world)
    else:
        trainer = Trainer(model, corpus.train, corpus.val, train_config, progress=progress,
                          vocab=corpus.tokenizer.vocab, world=world)
    n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    log = {
        "preset": args.preset,
        "parameters": n_params,
        "model_config": dataclasses.asdict(model_config),
        "train_config": dataclasses.asdict(train_config),
        "device": str(device),
        "processes": world.size,
        "precision": trainer.precision,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "evaluations": trainer.history,
    }
    say = print if world.is_main else (lambda *a, **k: None)  # rank 0 speaks and writes
    processes = f", {world.size} processes" if world.distributed else ""
    say(f"{args.preset}: {n_params:,} parameters on {device} ({torch.get_num_threads()} threads"
        f"{processes}, {trainer.precision}); "
        f"{train_config.steps} steps of {train_config.batch_size} × {train_config.context} tokens; "
        f"writing to {out}", flush=True)

    def on_eval(t: Trainer, record: dict) -> None:
        if not world.is_main:
            return
        t.save(checkpoint)
        log["evaluations"] = t.history
        log["skipped_steps"] = t.skipped_steps
        write_json(log, os.path.join(out, LOG), allow_nan=True)
        if not progress:
            print(f"step {record['step']}: val loss {record['val_loss']:.4f} nats/char, "
                  f"{record['elapsed_seconds']:.1f} s", flush=True)

    started = time.perf_counter()
    trainer.train(on_eval=on_eval, target_loss=args.target_loss)
    if not world.is_main:
        return log
    if args.target_loss is not None:
        hit = trainer.reached_target
        log["target"] = {"loss": args.target_loss, "reached": hit is not None,
                         "step": hit["step"] if hit else None,
                         "elapsed_seconds": hit["elapsed_seconds"] if hit else None}
        if hit:
            say(f"target {args.target_loss:g} reached: validation loss {hit['val_loss']:.4f} at step "
                f"{hit['step']}, {hit['elapsed_seconds']:.1f} s after the start (evaluations included)")
        else:
            best = min(r["val_loss"] for r in trainer.history)
            say(f"target {args.target_loss:g} not reached in {trainer.step} steps; best validation "
                f"loss {best:.4f}")
    log["evaluations"] = trainer.history
    write_json(log, os.path.join(out, LOG), allow_nan=True)
    last = trainer.history[-1]
    say(f"done: step {last['step']}, validation loss {last['val_loss']:.4f} nats/char "
          f"({last['val_bits_per_char']:.3f} bits/char, perplexity {math.exp(last['val_loss']):.2f}), "
          f"{trainer.elapsed:.1f} s of training ({time.perf_counter() - started:.1f} s this session)")
    return log


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        run(args)
    except KeyboardInterrupt:
        print("\ninterrupted: the last checkpoint written after an evaluation is intact", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError, CheckpointError, CorpusError) as err:
        rank = os.environ.get("RANK")
        where = f" (rank {rank})" if rank not in (None, "0") else ""
        print(f"python -m course_lib.train: error{where}: {err}", file=sys.stderr)
        return 2
    finally:
        close_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())

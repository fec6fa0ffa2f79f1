"""One run of a grid: train the row's model with one seed and return its record (a JSON-ready dict).

This is what each worker process executes. The record holds the two configs as run, the log of
every evaluation with the *training* time at each (evaluations excluded, so that rows are compared
at equal compute time, not equal time spent evaluating), the final validation loss, whether the run
diverged (a loss that is not finite), optionally every step's loss and gradient norm, the probes'
results, and the provenance (:mod:`~course_lib.experiments.provenance`).

Deterministic: with the same configs, seed, thread count, torch and CPU, a step-budget run
reproduces its record's losses exactly. A wall-clock run is not, since its step count comes from a
timing (:func:`calibrated_steps`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

import torch

from ..data import CharData, get_batch, load_char_data
from ..training import TrainConfig, Trainer, build_model, make_optimizer, resolve_precision, train_step
from .grid import Grid, Row
from .probes import PROBES
from .provenance import provenance

__all__ = ["run_one", "calibrated_steps", "interleaved_step_seconds", "finite_or_none"]


def finite_or_none(value):
    """JSON has no NaN or infinity: a non-finite float becomes None (nested lists and dicts too)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def _timed_step(row: Row, model, optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    """One step of ``row`` as its run takes it (its micro-batches and its number format), at a
    tenth of its learning rate: what calibration times."""
    config = row.train
    train_step(model, optimizer, x, y, config.lr * 0.1, config.grad_clip, grad_accum=config.grad_accum,
               precision=resolve_precision(config.precision, "cpu")).item()


def calibrated_steps(row: Row, corpus: CharData, seconds: float, calibration_steps: int = 30) -> int:
    """How many steps of ``row`` fit in ``seconds`` of training here: ``calibration_steps`` steps of
    a throwaway copy are timed and the median of the second half (after warm-up) taken as the
    step's time. The learning-rate schedule is then laid out over that many steps."""
    model = build_model(row.model, seed=12345)
    optimizer = make_optimizer(model, row.train)
    generator = torch.Generator().manual_seed(12345)
    times = []
    for _ in range(calibration_steps):
        x, y = get_batch(corpus.train, row.train.batch_size, row.train.context, generator)
        tick = time.perf_counter()
        _timed_step(row, model, optimizer, x, y)
        times.append(time.perf_counter() - tick)
    step_seconds = statistics.median(times[len(times) // 2:])
    return max(2, round(seconds / step_seconds))


def interleaved_step_seconds(rows: tuple[Row, ...], corpus: CharData, calibration_steps: int = 30
                             ) -> list[float]:
    """Seconds per training step of each row, timed side by side: one step of each row in turn,
    ``calibration_steps`` rounds, on throwaway models; each row's median over the second half of
    the rounds (after warm-up). Interleaving puts any drift in the machine's speed on every row
    alike, so that their ratios hold where the absolute times do not."""
    runs = []
    for row in rows:
        model = build_model(row.model, seed=12345)
        runs.append((row, model, make_optimizer(model, row.train), torch.Generator().manual_seed(12345)))
    times: list[list[float]] = [[] for _ in rows]
    for _ in range(calibration_steps):
        for k, (row, model, optimizer, generator) in enumerate(runs):
            x, y = get_batch(corpus.train, row.train.batch_size, row.train.context, generator)
            tick = time.perf_counter()
            _timed_step(row, model, optimizer, x, y)
            times[k].append(time.perf_counter() - tick)
    return [statistics.median(t[len(t) // 2:]) for t in times]


def _budget_steps(grid: Grid, row: Row, config: TrainConfig, corpus: CharData) -> tuple[TrainConfig, dict]:
    """The config of a run under ``grid.budget_row``'s time, and what the budget was made of."""
    reference = grid.row(grid.budget_row)
    if row.label == reference.label:
        step_seconds = ref_seconds = interleaved_step_seconds((row,), corpus, grid.calibration_steps)[0]
        steps = row.train.steps
    else:
        step_seconds, ref_seconds = interleaved_step_seconds((row, reference), corpus, grid.calibration_steps)
        steps = max(2, round(grid.budget_fraction * reference.train.steps * ref_seconds / step_seconds))
    config = config.replace(steps=steps, warmup_steps=min(config.warmup_steps, steps // 2),
                            eval_interval=max(1, steps // grid.evaluations))
    budget = {"row": reference.label, "reference_steps": reference.train.steps,
              "reference_step_seconds": ref_seconds, "step_seconds": step_seconds,
              "fraction_per_step": step_seconds / (reference.train.steps * ref_seconds)}
    return config, budget


def _training_seconds(history: list[dict], tokens_per_step: int) -> list[float]:
    """Cumulative training time (evaluations excluded) at each evaluation, from each interval's
    tokens per second."""
    out, total, last_tokens = [], 0.0, 0
    for entry in history:
        if entry["tokens_per_second"]:
            total += (entry["tokens"] - last_tokens) / entry["tokens_per_second"]
        last_tokens = entry["tokens"]
        out.append(total)
    return out


def run_one(grid: Grid, row: Row, seed: int, command: list[str] | None = None,
            code: dict | None = None, corpus: CharData | None = None, *,
            train_config: TrainConfig | None = None, until: int | None = None) -> dict:
    """Train ``row`` with ``seed`` (on ``grid.threads`` threads) and return its record.

    ``train_config``: run exactly this config instead of the row's (with no calibration) — how a
    wall-clock run is reproduced from its record. ``until``: stop after this many steps, evaluate,
    and skip the probes — a prefix of the run, for checking a committed record cheaply (the steps
    taken are the same as in the whole run: the schedule depends on ``steps``, not on ``until``).
    The global random generator is seeded with ``seed`` and restored after; dropout's masks come
    from the trainer's own generator states, seeded with ``seed`` too (the same masks as when they
    came from the global generator, which the committed records were made with)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _run(grid, row, seed, command, code, corpus, train_config, until)


def _run(grid, row, seed, command, code, corpus, train_config, until) -> dict:
    torch.set_num_threads(grid.threads)
    corpus = corpus or load_char_data()
    train_data = corpus.train if row.train_chars is None else corpus.train[:row.train_chars]
    config: TrainConfig = row.train.replace(seed=seed)
    budget = None
    if train_config is not None:
        config = train_config
    elif grid.budget_row is not None:
        config, budget = _budget_steps(grid, row, config, corpus)
    elif grid.seconds is not None:
        steps = calibrated_steps(row, corpus, grid.seconds, grid.calibration_steps)
        config = config.replace(steps=steps, warmup_steps=min(config.warmup_steps, steps // 2),
                                eval_interval=min(config.eval_interval, steps))
    model = build_model(row.model, seed=seed)
    trainer = Trainer(model, train_data, corpus.val, config, progress=False, vocab=corpus.tokenizer.vocab)
    trainer.train(until=None if until is None else min(until, config.steps))
    history = trainer.history
    final = history[-1]["val_loss"]
    record = {
        "grid": grid.name,
        "row": row.label,
        "seed": seed,
        "model_config": dataclasses.asdict(row.model),
        "train_config": dataclasses.asdict(trainer.config),
        "train_chars": row.train_chars,
        "parameters": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
        "steps": trainer.step,
        "final_val_loss": final,
        "diverged": not all(math.isfinite(loss) for loss in trainer.step_losses) or not math.isfinite(final),
        "train_seconds": _training_seconds(history, trainer.config.tokens_per_step)[-1],
        "history": [dict(entry, train_seconds=t) for entry, t in
                    zip(history, _training_seconds(history, trainer.config.tokens_per_step))],
    }
    if budget is not None:
        record["budget"] = budget
    if grid.record_steps:
        record["step_losses"] = [round(v, 5) if math.isfinite(v) else v for v in trainer.step_losses]
        record["grad_norms"] = [round(v, 5) if math.isfinite(v) else v for v in trainer.grad_norms]
    if grid.probes and until is None:
        model.eval()
        record["probes"] = {probe.name: PROBES[probe.name](model, corpus, **probe.kwargs)
                            for probe in grid.probes}
    record["provenance"] = provenance(command, code=code)
    return finite_or_none(record)

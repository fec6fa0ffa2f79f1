"""Run a grid: every (row, seed) not yet finished, in parallel processes, then summarize.

Layout of the output folder ``out`` for a grid called NAME::

    out/NAME/runs/<row>-s<seed>.json   one record per run (course_lib.experiments.run), written
                                       atomically when the run ends
    out/NAME/summary.json              per row: mean, spread and 95 % interval of the final loss and
                                       of the loss at equal wall-clock time; each row against the
                                       first, seed by seed; the provenance

A run whose record exists and was made from the same definition (configs, budget, probes) is
finished and is not run again, so an interrupted grid resumes where it stopped; a record made from
a different definition is run again and replaced.

Runs go in worker processes (``spawn``: a fresh interpreter, so no thread pool is shared with the
parent), ``grid.threads`` torch threads each, as many at once as the cores allow. With one worker the
runs go in this process (its thread count is restored afterwards).
"""

from __future__ import annotations

import concurrent.futures as futures
import dataclasses
import json
import multiprocessing
import os
import statistics

import torch

from .._io import write_json
from ..config import ModelConfig
from ..training import TrainConfig
from .grid import Grid, Row
from .provenance import git_commit, provenance
from .run import run_one
from .stats import interpolate_at, paired_difference, summarize

__all__ = ["run_grid", "summarize_grid", "record_path", "load_records", "load_results", "spec", "same_spec",
           "default_workers", "RESULTS"]

# The course's committed results, inside the package (chapter 12 reads them, in Colab too).
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def spec(grid: Grid, row: Row) -> dict:
    """What defines a run apart from its seed, as plain JSON values: a record made from another
    spec is stale."""
    out = {
        "model_config": dataclasses.asdict(row.model),
        "train_config": {k: v for k, v in dataclasses.asdict(row.train).items() if k != "seed"},
        "train_chars": row.train_chars,
        "seconds": grid.seconds,
        "probes": [[p.name, dict(p.options)] for p in grid.probes],
        "record_steps": grid.record_steps,
        "threads": grid.threads,
    }
    if grid.budget_row is not None:  # only then: the records of other grids stay valid
        reference = grid.row(grid.budget_row)
        out["budget"] = {"row": reference.label, "model_config": dataclasses.asdict(reference.model),
                         "train_config": dataclasses.asdict(reference.train),
                         "evaluations": grid.evaluations}
        if grid.budget_fraction != 1:  # only then: records made before it existed stay valid
            out["budget"]["fraction"] = grid.budget_fraction
    return json.loads(json.dumps(out))


def _without_defaults(values: dict, cls) -> dict:
    """``values`` less the fields that hold ``cls``'s default: a field added to a config later,
    with a default that keeps the old behaviour, leaves the records made before it valid."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    defaults = json.loads(json.dumps(defaults))  # as the record stores them (tuples → lists)
    return {k: v for k, v in values.items() if k not in defaults or defaults[k] != v}


def same_spec(recorded: dict | None, current: dict) -> bool:
    """Whether a record's ``spec`` describes the run ``current`` describes: equal after dropping the
    config fields that hold their defaults (see :func:`_without_defaults`)."""
    if not isinstance(recorded, dict):
        return False

    def canonical(s: dict) -> dict:  # the run's configs and its budget row's
        out = dict(s)
        if isinstance(out.get("model_config"), dict):
            out["model_config"] = _without_defaults(out["model_config"], ModelConfig)
        if isinstance(out.get("train_config"), dict):
            out["train_config"] = _without_defaults(out["train_config"], TrainConfig)
        if isinstance(out.get("budget"), dict):
            out["budget"] = canonical(out["budget"])
        return out

    return canonical(recorded) == canonical(current)


def record_path(out: str | os.PathLike, grid: Grid, row: Row, seed: int) -> str:
    return os.path.join(os.fspath(out), grid.name, "runs", f"{row.slug}-s{seed}.json")


def _read(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _finished(out, grid: Grid, row: Row, seed: int) -> dict | None:
    record = _read(record_path(out, grid, row, seed))
    if record is None or not same_spec(record.get("spec"), spec(grid, row)) or record.get("seed") != seed:
        return None
    return record


def load_records(out: str | os.PathLike, grid: Grid) -> dict[tuple[str, int], dict]:
    """The finished runs' records, by (row label, seed); stale or missing ones are left out."""
    found = {}
    for row, seed in grid.runs():
        record = _finished(out, grid, row, seed)
        if record is not None:
            found[(row.label, seed)] = record
    return found


def load_results(name: str, out: str | os.PathLike = RESULTS) -> tuple[dict, dict[tuple[str, int], dict]]:
    """The committed results of the grid called ``name``: its summary and its records by (row,
    seed). A grid that has not been run into ``out``, or whose records are stale (its definition
    changed since), raises a ValueError that says which command regenerates it."""
    from .grids import get_grid

    grid = get_grid(name)
    command = f"python -m course_lib.experiments {name} --out course_lib/experiments/results"
    summary = _read(os.path.join(os.fspath(out), name, "summary.json"))
    records = load_records(out, grid)
    if summary is None or len(records) != len(grid.runs()):
        raise ValueError(f"grid {name!r} has {len(records)} of {len(grid.runs())} current runs in {out}; "
                         f"regenerate it with `{command}`")
    return summary, records


def default_workers(grid: Grid) -> int:
    """As many processes as the cores allow at ``grid.threads`` threads each."""
    return max(1, (os.cpu_count() or 1) // grid.threads)


def _check_writable(folder: str) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".write-test-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as err:
        raise ValueError(f"output folder {folder!r} is not writable: {err.strerror or err}") from None


def _run_and_tag(grid: Grid, row: Row, seed: int, command, code) -> dict:
    record = run_one(grid, row, seed, command=command, code=code)
    record["spec"] = spec(grid, row)
    return record


def run_grid(grid: Grid, out: str | os.PathLike, *, workers: int | None = None,
             command: list[str] | None = None, progress: bool = True,
             max_runs: int | None = None) -> dict:
    """Run every unfinished (row, seed) of ``grid`` into ``out``, then write and return the summary
    (:func:`summarize_grid`). ``workers``: parallel processes (default :func:`default_workers`).
    ``command``: the command line stored as provenance (default: this process's). ``max_runs``:
    run at most this many now (the rest stay to do; the summary says the grid is incomplete)."""
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a Grid, got {type(grid).__name__}")
    folder = os.path.join(os.fspath(out), grid.name, "runs")
    _check_writable(folder)
    todo = [(row, seed) for row, seed in grid.runs() if _finished(out, grid, row, seed) is None]
    if max_runs is not None:
        todo = todo[:max_runs]
    total = len(grid.runs())
    workers = min(workers or default_workers(grid), max(1, len(todo)))
    code = git_commit()
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm  # imported here: course_lib needs only torch, numpy, matplotlib

        bar = tqdm(total=total, initial=total - len(todo), unit="run", desc=grid.name, dynamic_ncols=True)

    def done(record: dict) -> None:
        row = grid.row(record["row"])
        write_json(record, record_path(out, grid, row, record["seed"]), indent=None)
        if bar is not None:
            bar.set_postfix_str(f"{row.label} s{record['seed']}: {record['final_val_loss']:.4f}", refresh=False)
            bar.update(1)

    try:
        if workers == 1:
            threads = torch.get_num_threads()
            try:
                for row, seed in todo:
                    done(_run_and_tag(grid, row, seed, command, code))
            finally:
                torch.set_num_threads(threads)
        elif todo:
            context = multiprocessing.get_context("spawn")
            with futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                pending = [pool.submit(_run_and_tag, grid, row, seed, command, code) for row, seed in todo]
                try:
                    for future in futures.as_completed(pending):
                        done(future.result())
                except BaseException:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
    finally:
        if bar is not None:
            bar.close()
    summary = summarize_grid(grid, out, command=command)
    write_json(summary, os.path.join(os.fspath(out), grid.name, "summary.json"), indent=1)
    return summary


def summarize_grid(grid: Grid, out: str | os.PathLike, command: list[str] | None = None) -> dict:
    """Per row, over its seeds: the final validation loss (equal steps, the row's budget) and the
    validation loss at equal wall-clock time, each as :func:`~course_lib.experiments.stats.summarize`;
    and each row against the first, seed by seed (:func:`~course_lib.experiments.stats.paired_difference`).

    Equal wall-clock time is the shortest of the rows' median training times: every run's
    validation curve is read there by linear interpolation between its evaluations (so rows whose
    step is faster are read before their last step; a run that ended earlier than that time counts
    with its last loss). A run first evaluated after that time has no reading there, and the summary
    of its row at equal time, and its comparison at equal time, are None: a grid whose runs are
    short beside its budget row (``budget_fraction``) compares the ends of the runs instead.
    Diverged runs are left out of both summaries and listed instead."""
    records = load_records(out, grid)
    by_row = {row.label: [records[(row.label, s)] for s in grid.seeds if (row.label, s) in records]
              for row in grid.rows}
    present = {label: rs for label, rs in by_row.items() if rs}
    ends = [statistics.median(r["train_seconds"] for r in rs) for rs in present.values()]
    equal_time = min(ends) if ends else None

    def at_time(record: dict) -> float | None:
        history = [h for h in record["history"] if h["val_loss"] is not None]
        if equal_time >= history[-1]["train_seconds"]:  # the run was over by then: its last loss
            return history[-1]["val_loss"]
        if equal_time < history[0]["train_seconds"]:  # not yet evaluated then: no reading
            return None
        return interpolate_at([h["train_seconds"] for h in history], [h["val_loss"] for h in history],
                              equal_time)

    def at_equal_time(runs: list[dict]) -> list[float] | None:  # None: some run has no reading
        values = [at_time(r) for r in runs]
        return None if not values or None in values else values

    rows = {}
    for label, rs in present.items():
        converged = [r for r in rs if not r["diverged"]]
        rows[label] = {
            "seeds": [r["seed"] for r in rs],
            "diverged_seeds": [r["seed"] for r in rs if r["diverged"]],
            "parameters": rs[0]["parameters"],
            "steps": statistics.median(r["steps"] for r in rs),
            "train_seconds": summarize([r["train_seconds"] for r in rs]),
            "final_val_loss": summarize([r["final_val_loss"] for r in converged]) if converged else None,
            "val_loss_at_equal_time": summarize(readings) if (readings := at_equal_time(converged)) else None,
        }
    reference = grid.rows[0].label
    comparisons = {}
    for label in present:
        if label == reference or reference not in present:
            continue
        seeds = [s for s in grid.seeds if (label, s) in records and (reference, s) in records
                 and not records[(label, s)]["diverged"] and not records[(reference, s)]["diverged"]]
        if not seeds:
            continue
        mine = [records[(label, s)] for s in seeds]
        theirs = [records[(reference, s)] for s in seeds]
        comparisons[f"{label} - {reference}"] = {
            "seeds": seeds,
            "final_val_loss": paired_difference([r["final_val_loss"] for r in mine],
                                                [r["final_val_loss"] for r in theirs]),
            "val_loss_at_equal_time": paired_difference(mine_then, theirs_then)
            if (mine_then := at_equal_time(mine)) and (theirs_then := at_equal_time(theirs)) else None,
        }
    origins = [r["provenance"] for r in records.values()]
    return {
        "grid": grid.name,
        "description": grid.description,
        "complete": len(records) == len(grid.runs()),
        "runs": len(records),
        "of": len(grid.runs()),
        "seeds": list(grid.seeds),
        "equal_time_seconds": equal_time,
        "rows": rows,
        "against_first_row": comparisons,
        "provenance": {
            **provenance(command),
            "commits": sorted({str(o["commit"]) + ("+dirty" if o["dirty"] else "") for o in origins}),
            "cpus": sorted({o["cpu"] for o in origins}),
            "torch_versions": sorted({o["torch"] for o in origins}),
            "run_threads": sorted({o["threads"] for o in origins}),
        },
    }

"""course_lib.experiments: the statistics against published values, grids that refuse bad
definitions, runs that reproduce exactly, a runner that skips finished runs and resumes an
interrupted grid, the command line's one-line errors, and the committed grids against a re-run."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.config import ModelConfig
from course_lib.experiments import (GRIDS, IN_PROGRESS, Grid, Probe, Row, get_grid, interpolate_at,
                                    load_records, load_results, paired_difference, record_path, run_grid,
                                    run_one, summarize, summarize_grid, t_quantile)
from course_lib.experiments import __main__ as cli
from course_lib.experiments import runner as runner_module
from course_lib.training import TrainConfig, get_preset

from conftest import wait_for_replays
from course_lib.experiments.provenance import same_kernels
from replay_grids import COMMITTED, chosen_run, run_key

ROOT = Path(__file__).resolve().parents[1]
# What a run executes: the model, the data, the training loop and the runner (a record whose
# provenance lists one of these as uncommitted did not come from its commit's code).
TRAINING_CODE = tuple(f"course_lib/{name}" for name in (
    "attention.py", "block.py", "config.py", "data.py", "embeddings.py", "ffn.py", "init.py", "model.py",
    "norms.py", "positional.py", "residual.py", "kv_cache.py", "sampling.py", "checkpointing.py", "_autograd.py",
    "_io.py", "training/", "experiments/run.py", "experiments/runner.py", "experiments/grid.py",
    "experiments/grids.py", "experiments/probes.py"))

TINY = ModelConfig(vocab_size=65, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=16,
                   tie_embeddings=True, init_std=0.25)
TINY_RUN = TrainConfig(batch_size=4, context=16, steps=6, lr=3e-3, min_lr=3e-4, warmup_steps=2,
                       eval_interval=3, eval_batch_size=1024, eval_at_start=True)


def tiny_grid(**changes) -> Grid:
    grid = Grid("tiny-test", "two tiny rows", rows=(Row("a", TINY, TINY_RUN),
                                                    Row("b", TINY.replace(ffn="gelu"), TINY_RUN)),
                seeds=(0, 1))
    return grid.replace(**changes)


# --- statistics -----------------------------------------------------------------------------------

@pytest.mark.parametrize("df, expected", [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571),
                                          (10, 2.228), (30, 2.042), (120, 1.980)])
def test_t_quantile_matches_the_published_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=6e-4)


def test_t_quantile_other_levels_and_errors():
    assert t_quantile(0.95, 4) == pytest.approx(2.132, abs=6e-4)
    assert t_quantile(0.995, 3) == pytest.approx(5.841, abs=6e-4)
    assert t_quantile(0.975, 10**6) == pytest.approx(1.95996, abs=1e-4)  # the normal's quantile
    with pytest.raises(ValueError, match="p"):
        t_quantile(0.3, 3)
    with pytest.raises(ValueError, match="df"):
        t_quantile(0.975, 0)


def test_summarize_mean_spread_interval():
    s = summarize([1.0, 2.0, 3.0])
    assert (s["n"], s["mean"], s["min"], s["max"]) == (3, 2.0, 1.0, 3.0)
    assert s["std"] == pytest.approx(1.0)
    half = t_quantile(0.975, 2) / math.sqrt(3)
    assert (s["low"], s["high"]) == (pytest.approx(2 - half), pytest.approx(2 + half))
    one = summarize([1.5])
    assert one["mean"] == 1.5 and one["std"] is None and one["low"] is None
    with pytest.raises(ValueError, match="values"):
        summarize([])


def test_paired_difference_says_whether_a_difference_was_found():
    assert paired_difference([1.0, 1.1, 1.2], [0.9, 1.0, 1.05])["found"] is True
    # per-seed differences of both signs: the interval contains 0
    assert paired_difference([1.0, 1.1, 1.2], [1.05, 1.0, 1.25])["found"] is False
    assert paired_difference([1.0], [0.5])["found"] is None
    with pytest.raises(ValueError, match="pair up"):
        paired_difference([1.0, 2.0], [1.0])


def test_interpolate_at():
    assert interpolate_at([0, 10, 20], [3.0, 2.0, 1.0], 15) == pytest.approx(1.5)
    assert interpolate_at([0, 10], [3.0, 2.0], 10) == 2.0
    assert math.isnan(interpolate_at([0, 10], [3.0, 2.0], 11))


# --- grids ----------------------------------------------------------------------------------------

def test_grids_refuse_bad_definitions():
    with pytest.raises(ValueError, match="distinct"):
        Grid("g", "", rows=(Row("a", TINY, TINY_RUN), Row("a", TINY, TINY_RUN)))
    with pytest.raises(ValueError, match="seeds"):
        Grid("g", "", rows=(Row("a", TINY, TINY_RUN),), seeds=(1, 1))
    with pytest.raises(ValueError, match="label"):
        Row("a/b", TINY, TINY_RUN)
    with pytest.raises(ValueError, match="context"):
        Row("a", TINY, TINY_RUN.replace(context=32))
    with pytest.raises(ValueError, match="no rows"):
        Grid("g", "", rows=())


def test_the_course_grids_are_well_formed():
    assert not set(GRIDS) & set(IN_PROGRESS), "a grid is either done or in progress"
    for name, grid in {**GRIDS, **IN_PROGRESS}.items():
        assert grid.name == name and get_grid(name) is grid
        assert len(grid.seeds) >= 3, f"{name}: at least three seeds"
        assert all(grid.row(r.label) is r for r in grid.rows)
    with pytest.raises(ValueError, match="unknown grid 'nope'"):
        get_grid("nope")


def test_equal_parameters_in_the_architecture_grid():
    from course_lib.counting import count_params

    modern, gpt2 = (count_params(row.model).total for row in GRIDS["arch"].rows)
    assert abs(modern - gpt2) / modern < 0.02


# --- runs -----------------------------------------------------------------------------------------

def _losses(record: dict) -> list:
    return [(h["step"], h["val_loss"], h["train_loss"]) for h in record["history"]]


def test_same_seed_same_numbers_other_seed_other_numbers():
    grid = tiny_grid()
    row = grid.rows[0]
    first, again, other = run_one(grid, row, 0), run_one(grid, row, 0), run_one(grid, row, 1)
    assert _losses(first) == _losses(again)
    assert _losses(first) != _losses(other)
    assert first["steps"] == TINY_RUN.steps and not first["diverged"]
    prov = first["provenance"]
    for key in ("commit", "dirty", "torch", "threads", "cpu", "date", "command"):
        assert key in prov, key
    assert prov["threads"] == grid.threads and prov["torch"] == torch.__version__


def test_a_run_leaves_the_callers_random_state_and_threads_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    run_grid(tiny_grid(seeds=(0,), rows=(Row("a", TINY, TINY_RUN.replace(steps=2, eval_interval=2)),)),
             _tmp("state"), workers=1, progress=False)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads


def _tmp(name: str) -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"exp-{name}-"))


def test_a_prefix_of_a_run_is_the_runs_own_beginning():
    grid = tiny_grid()
    whole = run_one(grid, grid.rows[0], 0)
    prefix = run_one(grid, grid.rows[0], 0, until=3)
    assert _losses(prefix) == _losses(whole)[:2]


def test_dropout_masks_come_from_the_seed():
    grid = tiny_grid(rows=(Row("d", TINY.replace(dropout=0.3), TINY_RUN),))
    assert _losses(run_one(grid, grid.rows[0], 0)) == _losses(run_one(grid, grid.rows[0], 0))


def test_record_steps_keeps_every_loss_and_gradient_norm():
    grid = tiny_grid(record_steps=True)
    record = run_one(grid, grid.rows[0], 0)
    assert len(record["step_losses"]) == len(record["grad_norms"]) == TINY_RUN.steps
    assert all(g > 0 for g in record["grad_norms"])


def test_a_budget_row_sets_every_runs_steps_by_the_ratio_of_step_times():
    """A row four blocks deep takes several times longer per step: under the narrow row's time it
    gets fewer steps, in the ratio of the step times measured side by side; the budget row keeps
    its own steps. (Depth, not width, makes the difference sure: a model this small costs its
    per-module overhead, and a row only four times as wide once measured as fast as the narrow one.)"""
    wide = TINY.replace(d_model=32, n_heads=2, d_ff=128, n_layers=4)
    run = TINY_RUN.replace(steps=40, eval_interval=40, eval_at_start=False)
    grid = Grid("budget-test", "", rows=(Row("narrow", TINY, run), Row("wide", wide, run)),
                seeds=(0,), budget_row="narrow", evaluations=2, calibration_steps=10)
    narrow = run_one(grid, grid.rows[0], 0)
    assert narrow["steps"] == 40 and narrow["budget"]["row"] == "narrow"
    record = run_one(grid, grid.rows[1], 0)
    budget = record["budget"]
    expected = round(40 * budget["reference_step_seconds"] / budget["step_seconds"])
    assert record["steps"] == expected < 40
    assert record["train_config"]["eval_interval"] == max(1, expected // 2)
    assert budget["fraction_per_step"] == pytest.approx(budget["step_seconds"] / (40 * budget["reference_step_seconds"]))
    from course_lib.experiments.runner import spec

    short = grid.replace(budget_fraction=0.5)
    half = run_one(short, short.rows[1], 0)
    ratio = half["budget"]["reference_step_seconds"] / half["budget"]["step_seconds"]
    assert half["steps"] == round(0.5 * 40 * ratio)  # half the narrow row's time, measured anew
    assert run_one(short, short.rows[0], 0)["steps"] == 40  # the budget row: its whole run
    assert spec(short, short.rows[1])["budget"]["fraction"] == 0.5 and "fraction" not in spec(grid, grid.rows[1])["budget"]
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="budget_fraction"):
            grid.replace(budget_fraction=bad)
    with pytest.raises(ValueError, match="needs a budget_row"):
        Grid("g", "", rows=grid.rows, budget_fraction=0.5)
    with pytest.raises(ValueError, match="no row 'missing'"):
        grid.replace(budget_row="missing")
    with pytest.raises(ValueError, match="seconds or budget_row"):
        grid.replace(seconds=5.0)


def test_calibration_times_the_step_the_run_takes(monkeypatch):
    """A row that accumulates its gradient over micro-batches is timed doing so: calibration runs the
    row's own step (its grad_accum and its number format), not a whole-batch float32 step."""
    from course_lib.data import load_char_data
    from course_lib.experiments import run as run_module

    seen = []
    real = run_module.train_step

    def spy(*args, **kwargs):
        seen.append((kwargs.get("grad_accum", 1), kwargs.get("precision", "float32")))
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "train_step", spy)
    accumulated = Row("acc", TINY, TINY_RUN.replace(batch_size=4, grad_accum=2, precision="auto"))
    run_module.interleaved_step_seconds((accumulated, tiny_grid().rows[0]), load_char_data(), 2)
    assert seen == [(2, "float32"), (1, "float32")] * 2
    seen.clear()
    run_module.calibrated_steps(accumulated, load_char_data(), 1.0, 2)
    assert seen == [(2, "float32")] * 2


def test_the_short_speedrun_grid_ends_at_the_preset():
    """speedrun-short's last row is the shakespeare-speedrun preset (model and schedule; the steps
    are the budget's), and each row after the second changes one thing."""
    grid = get_grid("speedrun-short")
    model, run = get_preset("shakespeare-speedrun")
    last = grid.rows[-1]
    assert last.model == model
    assert last.train.replace(steps=run.steps, eval_interval=run.eval_interval, seed=run.seed,
                              precision=run.precision, eval_context=None) == run
    assert grid.budget_row == "recipe" and grid.budget_fraction == pytest.approx(1 / 6)
    for above, row in zip(grid.rows[1:], grid.rows[2:]):
        changed = {k for k, v in dataclasses.asdict(row.train).items() if getattr(above.train, k) != v}
        changed |= {k for k, v in dataclasses.asdict(row.model).items() if getattr(above.model, k) != v}
        allowed = {"min_lr"} if row.label.startswith("lr") else (
            {"n_layers", "n_heads", "n_kv_heads", "d_ff", "init_std"} if row.label == "3x96" else set())
        assert len(changed - allowed) == 1, f"{row.label}: changes {sorted(changed)}"


def test_the_long_speedrun_grid_is_the_preset_then_four_changes_then_four_more():
    """speedrun-long: the recipe, the short grid's last row (the preset) given the recipe's whole
    time, then the four changes its label and chapter 13 name, and nothing else; then micro-batches,
    the weights' moving average, a hashed trigram table and one block fewer, one row each."""
    grid, short = get_grid("speedrun-long"), get_grid("speedrun-short")
    assert grid.budget_row == "recipe" and grid.budget_fraction == 1
    assert grid.rows[0] == short.rows[0] == GRIDS["speedrun"].rows[0]
    assert grid.evaluations == GRIDS["speedrun"].evaluations  # so that the recipe's runs are the same
    preset, bigram, split, averaged, trigram, shallower = grid.rows[1:]
    assert (preset.model, preset.train) == (short.rows[-1].model, short.rows[-1].train)
    assert bigram.model == preset.model.replace(bigram_embed=True)
    assert bigram.train == preset.train.replace(batch_size=48, lr=1.2e-2, min_lr=0.0)
    assert (split.model, split.train) == (bigram.model, bigram.train.replace(grad_accum=2))
    assert (averaged.model, averaged.train) == (split.model, split.train.replace(ema=0.99))
    assert (trigram.model, trigram.train) == (averaged.model.replace(trigram_buckets=2 ** 14), averaged.train)
    assert (shallower.model, shallower.train) == (trigram.model.replace(n_layers=2), trigram.train)
    assert trigram.model.n_layers == 3 and shallower.label == "2x96"


def test_the_long_speedrun_preset_is_the_long_grids_last_row():
    """shakespeare-speedrun-long is speedrun-long's last row (model and schedule), with its own
    fixed number of steps, evaluated once, at the end."""
    model, run = get_preset("shakespeare-speedrun-long")
    last = get_grid("speedrun-long").rows[-1]
    assert last.model == model
    assert last.train.replace(steps=run.steps, eval_interval=run.eval_interval, seed=run.seed,
                              precision=run.precision, eval_context=None) == run
    assert run.eval_interval == run.steps


def test_the_speedrun_rows_change_one_thing_each():
    """Each row of the speedrun grid differs from the row above it in the one thing its label names
    (SwiGLU and ReLU² change d_ff with the activation, to keep the parameters)."""
    rows = GRIDS["speedrun"].rows
    assert rows[0].label == "recipe" and (rows[0].model, rows[0].train.replace(
        eval_context=None, eval_at_start=True, eval_batch_size=64, precision="auto")) == (
        get_preset("nanogpt-cpu")[0], get_preset("nanogpt-cpu")[1].replace(eval_batch_size=64))
    for above, row in zip(rows, rows[1:]):
        model = {k for k, v in dataclasses.asdict(row.model).items() if getattr(above.model, k) != v}
        train = {k for k, v in dataclasses.asdict(row.train).items() if getattr(above.train, k) != v}
        changed = model | train
        assert len(changed - {"d_ff", "min_lr"}) == 1, f"{row.label}: changes {sorted(changed)}"


def test_a_probe_is_recorded():
    grid = tiny_grid(probes=(Probe("loss_by_position", (("context", 16), ("windows", 8))),))
    curve = run_one(grid, grid.rows[0], 0)["probes"]["loss_by_position"]
    assert len(curve) == 16 and all(0 < v < 10 for v in curve)


# --- the runner -----------------------------------------------------------------------------------

def test_the_runner_skips_finished_runs_and_reruns_stale_ones(tmp_path, monkeypatch):
    grid = tiny_grid()
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert summary["complete"] and summary["runs"] == 4
    before = {k: _losses(r) for k, r in load_records(tmp_path, grid).items()}

    calls = []

    def counting(*args, **kwargs):
        calls.append(args[1:3])
        return real(*args, **kwargs)

    real = runner_module.run_one
    monkeypatch.setattr(runner_module, "run_one", counting)
    run_grid(grid, tmp_path, workers=1, progress=False)
    assert calls == []  # nothing run again
    assert {k: _losses(r) for k, r in load_records(tmp_path, grid).items()} == before

    changed = grid.replace(rows=(grid.rows[0], Row("b", grid.rows[1].model, TINY_RUN.replace(lr=1e-3))))
    run_grid(changed, tmp_path, workers=1, progress=False)
    assert [(row.label, seed) for row, seed in calls] == [("b", 0), ("b", 1)]  # only the stale row


def test_a_config_field_added_with_its_default_leaves_records_valid():
    from course_lib.experiments.runner import same_spec, spec

    grid = tiny_grid()
    current = spec(grid, grid.rows[0])
    older = json.loads(json.dumps(current))
    del older["train_config"]["grad_clip"]  # a record made before the field existed ...
    del older["model_config"]["dropout"]
    assert same_spec(older, current)  # ... still describes the run, since both hold defaults
    changed = spec(grid, Row("a", TINY.replace(dropout=0.1), TINY_RUN))
    assert not same_spec(older, changed)  # a field set away from its default is a change
    assert not same_spec(current, spec(grid, Row("a", TINY, TINY_RUN.replace(lr=1e-3))))
    assert not same_spec(None, current) and not same_spec("spec", current)
    # in a grid with a budget row, the budget row's configs too
    budget_grid = tiny_grid(budget_row="a")
    current = spec(budget_grid, budget_grid.rows[1])
    older = json.loads(json.dumps(current))
    del older["budget"]["train_config"]["grad_clip"], older["budget"]["model_config"]["dropout"]
    assert same_spec(older, current)
    older["budget"]["train_config"]["lr"] = 1e-3
    assert not same_spec(older, current)


def test_an_interrupted_grid_resumes_to_the_same_records(tmp_path, monkeypatch):
    grid = tiny_grid()
    real = runner_module.run_one
    count = [0]

    def interrupted(*args, **kwargs):
        count[0] += 1
        if count[0] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "run_one", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_grid(grid, tmp_path / "a", workers=1, progress=False)
    assert len(load_records(tmp_path / "a", grid)) == 2
    assert not [p for p in (tmp_path / "a").rglob("*") if p.name.startswith(".tmp-")]  # no half files
    monkeypatch.setattr(runner_module, "run_one", real)
    summary = run_grid(grid, tmp_path / "a", workers=1, progress=False)
    assert summary["complete"]
    run_grid(grid, tmp_path / "b", workers=1, progress=False)
    resumed, clean = load_records(tmp_path / "a", grid), load_records(tmp_path / "b", grid)
    assert {k: _losses(r) for k, r in resumed.items()} == {k: _losses(r) for k, r in clean.items()}


def test_parallel_workers_give_the_same_numbers_as_one_process(tmp_path):
    grid = tiny_grid()
    run_grid(grid, tmp_path / "one", workers=1, progress=False)
    run_grid(grid, tmp_path / "two", workers=2, progress=False)
    one, two = load_records(tmp_path / "one", grid), load_records(tmp_path / "two", grid)
    assert len(two) == 4
    assert {k: _losses(r) for k, r in one.items()} == {k: _losses(r) for k, r in two.items()}


def test_the_summary_compares_rows_at_equal_steps_and_equal_time(tmp_path):
    grid = tiny_grid()
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert set(summary["rows"]) == {"a", "b"}
    a = summary["rows"]["a"]
    finals = [load_records(tmp_path, grid)[("a", s)]["final_val_loss"] for s in (0, 1)]
    assert a["final_val_loss"]["mean"] == pytest.approx(sum(finals) / 2)
    assert a["final_val_loss"]["low"] < a["final_val_loss"]["mean"] < a["final_val_loss"]["high"]
    records = load_records(tmp_path, grid)
    medians = [statistics.median(records[(label, s)]["train_seconds"] for s in (0, 1)) for label in "ab"]
    assert summary["equal_time_seconds"] == min(medians)
    assert a["val_loss_at_equal_time"]["n"] == 2
    comparison = summary["against_first_row"]["b - a"]
    assert comparison["seeds"] == [0, 1] and comparison["final_val_loss"]["found"] in (True, False)
    on_disk = json.loads((tmp_path / grid.name / "summary.json").read_text())
    assert on_disk["rows"].keys() == summary["rows"].keys()
    assert on_disk["provenance"]["commits"] and on_disk["provenance"]["run_threads"] == [1]


def test_a_run_not_yet_evaluated_at_equal_time_has_no_reading_there(tmp_path):
    """When the equal time comes before a row's first evaluation (its runs are long beside the
    others'), that row's summary and comparisons at equal time are None, not NaN, and the summary
    is still written as strict JSON."""
    grid = tiny_grid()
    run_grid(grid, tmp_path, workers=1, progress=False)
    for seed in grid.seeds:  # row a: evaluated only at its end, long after row b has finished
        path = tmp_path / grid.name / "runs" / f"a-s{seed}.json"
        record = json.loads(path.read_text())
        record["history"] = [dict(h, train_seconds=1e6 + h["train_seconds"]) for h in record["history"][-1:]]
        record["train_seconds"] = record["history"][-1]["train_seconds"]
        path.write_text(json.dumps(record))
    summary = summarize_grid(grid, tmp_path)
    assert summary["rows"]["a"]["val_loss_at_equal_time"] is None
    assert summary["rows"]["b"]["val_loss_at_equal_time"]["n"] == 2
    assert summary["against_first_row"]["b - a"]["val_loss_at_equal_time"] is None
    assert summary["against_first_row"]["b - a"]["final_val_loss"]["n"] == 2
    json.dumps(summary, allow_nan=False)
    from course_lib.experiments.report import rows_table

    lines = rows_table(summary, "val_loss_at_equal_time").splitlines()
    assert any(line.startswith("a ") and line.endswith("not yet evaluated at that time") for line in lines)


# --- the command line -----------------------------------------------------------------------------

def test_cli_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown grid 'nope'" in err
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert cli.main(["lr-sweep", "--out", str(blocked / "sub")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not writable" in err
    assert cli.main([]) == 2
    assert "name a grid" in capsys.readouterr().err
    assert cli.main(["--list"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in GRIDS)


def test_cli_bad_option_is_one_line_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "course_lib.experiments", "arch", "--workers", "0"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--workers" in done.stderr and "Traceback" not in done.stderr


# --- the committed results ------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(GRIDS))
def test_every_grid_is_committed_complete_and_current(name):
    grid = GRIDS[name]
    summary, records = load_results(name)  # raises, naming the command, when stale or missing
    recomputed = json.loads(json.dumps(summarize_grid(grid, COMMITTED)))
    recomputed["provenance"] = summary["provenance"]  # when and by which command it was written
    assert summary == recomputed, f"{name}: summary.json does not summarize its records"
    assert summary["complete"] and summary["provenance"]["command"].startswith("python -m course_lib.experiments")
    for record in records.values():  # the code that trained was the commit's
        prov = record["provenance"]
        assert prov["commit"] and prov["dirty"] is not None, f"{name}: provenance without a commit"
        touched = [f for f in prov["dirty_files"] if f.startswith(TRAINING_CODE)] if prov["dirty"] else []
        assert not touched, f"{name} {record['row']} s{record['seed']}: trained with uncommitted {touched}"


@pytest.fixture(scope="module")
def replays():
    return wait_for_replays()


@pytest.mark.parametrize("name", list(GRIDS))
def test_a_committed_grid_reproduces(name, replays):
    """One committed run of each grid, re-run for its first evaluation interval with the record's
    own train config and thread count (tests/replay_grids.py, run in the background: which run,
    and why, is its ``chosen_run``): with the CPU, instruction set, torch and threads that made the
    record (``same_kernels``) the losses agree exactly. Elsewhere the kernels add in another order,
    and training carries the last-bit differences forward: the first evaluation agrees to 5·10⁻³.
    (Measured 2026-12-07, records of an earlier 'AMD EPYC' replayed on an AVX-512 one: within
    2·10⁻⁷ for every replay but the learning-rate sweep's, whose rate of 3·10⁻² is the sweep's
    highest to train; it moved by 2.4·10⁻³ in 100 steps.)"""
    grid, row, record = chosen_run(name)
    again = replays.get(name)
    assert again is not None, f"{name} was not replayed"
    assert (again["row"], again["seed"]) == (row.label, record["seed"])
    until = again["until"]
    assert until == record["train_config"]["eval_interval"]
    committed = [h for h in record["history"] if h["step"] <= until]
    prov = record["provenance"]
    same_machine = same_kernels(prov, again["provenance"])
    assert committed, f"{name}: the record has no evaluation up to step {until}"
    for old, new in zip(committed, again["history"], strict=True):
        assert old["step"] == new["step"]
        if same_machine:
            assert (old["val_loss"], old["train_loss"]) == (new["val_loss"], new["train_loss"])
        else:
            assert new["val_loss"] == pytest.approx(old["val_loss"], rel=5e-3)


# --- reading results ------------------------------------------------------------------------------

def test_report_table_and_curves(tmp_path):
    from course_lib.experiments.report import rows_table, val_curves

    grid = tiny_grid()
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    table = rows_table(summary)
    lines = table.splitlines()
    assert len(lines) == 3 + len(grid.rows) and lines[1].startswith("a ") and lines[2].startswith("b ")
    assert lines[-1].strip() == f"python -m course_lib.experiments {grid.name} --out course_lib/experiments/results"
    mean_bits = summary["rows"]["a"]["final_val_loss"]["mean"] / math.log(2)
    assert f"{mean_bits:.3f}" in lines[1]
    assert lines[2].rstrip().endswith((" yes", " no")) and "found" in lines[0]
    assert max(len(line) for line in lines) <= 88  # fits the book's code column
    xs, ys = val_curves(load_records(tmp_path, grid), "a")
    assert ys.shape == (2, len(xs)) and list(xs) == [0, 3, 6]
    assert ys[:, -1] == pytest.approx([load_records(tmp_path, grid)[("a", s)]["final_val_loss"] / math.log(2)
                                       for s in (0, 1)])
    with pytest.raises(ValueError, match="no records"):
        val_curves(load_records(tmp_path, grid), "zzz")


def test_the_same_run_in_two_committed_grids_has_the_same_numbers():
    """A run that two grids hold (the modern block of ``arch`` and the σ = 1/√D row of
    ``init-scale``; the recipe of ``speedrun`` and of ``speedrun-long``) was run in different
    processes at different times: its records agree to the last bit, as determinism promises."""
    holders: dict[str, list[tuple[str, dict]]] = {}
    for name in GRIDS:
        for (label, seed), record in load_results(name)[1].items():
            holders.setdefault(run_key(record), []).append((f"{name}/{label}/s{seed}", record))
    shared = {key: runs for key, runs in holders.items() if len(runs) > 1}
    names = {where.split("/")[0] for runs in shared.values() for where, _ in runs}
    assert {"arch", "init-scale", "speedrun", "speedrun-long"} <= names
    for runs in shared.values():
        (first, a), *others = runs
        for where, b in others:
            assert [h["val_loss"] for h in a["history"]] == [h["val_loss"] for h in b["history"]], \
                f"{first} and {where}"


def test_every_committed_record_is_tracked_by_git():
    """The results ship with the repository: a record that exists here but is ignored or
    untracked would vanish from a fresh clone (and a `runs/` ignore rule once did that)."""
    import shutil

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "ls-files", "course_lib/experiments/results"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    tracked = set(done.stdout.split())
    for name, grid in GRIDS.items():
        for row, seed in grid.runs():
            path = Path(record_path(COMMITTED, grid, row, seed)).relative_to(ROOT).as_posix()
            assert path in tracked, f"{path} is not tracked by git"
        assert f"course_lib/experiments/results/{name}/summary.json" in tracked

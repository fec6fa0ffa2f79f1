"""Reading the speedrun grid (course_lib/experiments/speedrun.py) on made-up records whose answers are
known: the time to a loss, the table over seeds, the comparison with the row above, the waterfall."""

from __future__ import annotations

import math

import matplotlib
import pytest

from course_lib.config import ModelConfig
from course_lib.experiments import Grid, Row
from course_lib.experiments.speedrun import ingredient_table, ingredient_table_text, plot_waterfall, time_to_loss
from course_lib.training import TrainConfig

matplotlib.use("Agg")


def record(row, seed, curve, fraction_per_step=0.01):
    """A record with validation losses ``curve`` at steps 10, 20, …"""
    history = [{"step": 10 * (i + 1), "val_loss": loss} for i, loss in enumerate(curve)]
    return {"row": row, "seed": seed, "history": history, "final_val_loss": curve[-1], "steps": 10 * len(curve),
            "budget": {"row": "base", "fraction_per_step": fraction_per_step,  # base: 30 steps of 1 s
                       "step_seconds": 30 * fraction_per_step, "reference_step_seconds": 1.0}}


def grid(*labels):
    model = ModelConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=1, d_ff=16, max_seq_len=8)
    train = TrainConfig(batch_size=2, context=8, steps=10)
    return Grid(name="toy", description="toy", rows=tuple(Row(label, model, train) for label in labels),
                seeds=(0, 1, 2), budget_row=labels[0])


def test_time_to_loss_interpolates_between_evaluations():
    r = record("a", 0, [3.0, 2.0, 1.0], fraction_per_step=0.02)
    assert time_to_loss(r, 1.5) == pytest.approx(25 * 0.02)  # halfway from step 20 (2.0) to 30 (1.0)
    assert time_to_loss(r, 2.0) == pytest.approx(20 * 0.02)  # reached exactly at an evaluation
    assert time_to_loss(r, 3.5) == pytest.approx(10 * 0.02)  # below at the first evaluation: its step
    assert time_to_loss(r, 0.5) is None  # never reached
    # a diverged evaluation (NaN) is not a crossing
    assert time_to_loss(record("a", 0, [3.0, float("nan"), 1.0]), 2.0) == pytest.approx(20 * 0.01)


def test_time_to_loss_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="budget"):
        time_to_loss({**record("a", 0, [2.0]), "budget": None}, 1.0)
    with pytest.raises(ValueError, match="target"):
        time_to_loss(record("a", 0, [2.0]), math.nan)


def toy_records():
    """base ends at 2.0 on average; flat ends within base's seed-to-seed spread (no difference), just
    below 2.0; fast reaches 2.0 at half the time in every seed; slow never reaches it with seed 2."""
    records = {}
    for s, wiggle in enumerate((-0.01, 0.0, 0.01)):
        records[("base", s)] = record("base", s, [3.0, 2.5, 2.0 + wiggle], fraction_per_step=1 / 30)
        records[("fast", s)] = record("fast", s, [2.5, 2.0 + wiggle, 1.6], fraction_per_step=1 / 40)
        records[("flat", s)] = record("flat", s, [3.0, 2.5, 1.99 - wiggle / 2], fraction_per_step=1 / 30)
        records[("slow", s)] = record("slow", s, [3.0, 2.6, 2.1 if s == 2 else 1.9], fraction_per_step=1 / 30)
    return records


def test_ingredient_table_reads_each_row_and_compares_it_with_the_row_above():
    table = ingredient_table(toy_records(), grid("base", "flat", "fast", "slow"))
    assert table["target"] == pytest.approx(2.0)
    base, fast, flat, slow = (table["rows"][k] for k in ("base", "fast", "flat", "slow"))
    assert base["fraction"]["mean"] == 1.0 and base["speedup"]["mean"] == 1.0 and "versus_previous" not in base
    # fast reaches 2.0 ± 0.01 near step 20 of 40 → about half the time; interval from 3 seeds
    assert fast["fraction"]["mean"] == pytest.approx(0.5, abs=0.01)
    assert fast["fraction"]["low"] < fast["fraction"]["mean"] < fast["fraction"]["high"]
    assert fast["speedup"]["mean"] == pytest.approx(1 / fast["fraction"]["mean"])
    assert fast["speedup"]["low"] == pytest.approx(1 / fast["fraction"]["high"])
    assert fast["versus_previous"]["row"] == "flat" and fast["versus_previous"]["loss"]["found"]
    assert fast["versus_previous"]["log_time"]["found"] and fast["versus_previous"]["log_time"]["mean"] < 0
    # flat ends where base does, its seed differences of both signs: no difference found
    assert flat["versus_previous"]["loss"]["found"] is False
    assert flat["versus_previous"]["loss"]["low"] < 0 < flat["versus_previous"]["loss"]["high"]
    assert slow["reached"] == 2 and slow["fraction"] is None and slow["speedup"] is None
    assert slow["versus_previous"]["log_time"] is None  # nothing to compare when a seed never got there
    # what the seeds took: steps (median), a step's cost in the budget row's steps (median), worst loss
    assert fast["steps"] == 30 and fast["step_cost"] == pytest.approx(0.75) and base["step_cost"] == 1.0
    assert slow["worst"] == 2.1 and fast["worst"] == pytest.approx(1.6)


def test_ingredient_table_text_and_waterfall():
    import matplotlib.pyplot as plt

    table = ingredient_table(toy_records(), grid("base", "flat", "fast", "slow"))
    text = ingredient_table_text(table)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 88
    assert lines[2].startswith("base") and "1 (the target)" in lines[2]
    assert lines[3].startswith("flat") and " same " in lines[3]
    assert lines[4].startswith("fast") and " better " in lines[4] and "0.50 [" in lines[4]
    assert "not reached by 1 seed(s)" in lines[5]
    fig, ax = plt.subplots()
    plot_waterfall(ax, table)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "flat", "fast", "slow"]
    assert any(t.get_text() == "not reached" for t in ax.texts)
    plt.close(fig)


def test_ingredient_table_refuses_a_grid_it_cannot_read():
    with pytest.raises(ValueError, match="budget_row"):
        ingredient_table({}, Grid(name="g", description="", rows=grid("a").rows))
    with pytest.raises(ValueError, match="fewer than two seeds"):
        ingredient_table({("base", 0): record("base", 0, [2.0])}, grid("base"))

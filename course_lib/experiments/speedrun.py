"""Reading the speedrun grid (chapter 13): how long each row takes to reach the recipe's loss, and
what each change buys over the row before it.

Every run of the grid trains for the budget row's training time (``Grid(budget_row=...)``): its
record's ``budget["fraction_per_step"]`` is one of its steps as a fraction of that time, measured
against the budget row's step, interleaved. So a step count converts to time as a fraction of the
recipe's, and the two measures the chapter reports are

* the **loss in the recipe's time**: the run's final validation loss;
* the **time to the recipe's loss**: the first time the run's validation curve reaches the target,
  the budget row's mean final loss over seeds, as a fraction of the recipe's training time.

Times count training steps only (evaluation left out): they are ratios of step times taken side by
side, which hold on a machine whose speed drifts. Whole processes, evaluation included, are what
``benchmarks/speedrun.py`` times for the finished preset.
"""

from __future__ import annotations

import math
import statistics

from .grid import Grid
from .stats import paired_difference, summarize

__all__ = ["time_to_loss", "ingredient_table", "ingredient_table_text", "plot_waterfall"]


def time_to_loss(record: dict, target: float) -> float | None:
    """The fraction of the budget row's training time that ``record``'s run took to first reach
    validation loss ``target`` (nats), or None when it never did.

    The crossing is read on the validation curve: the first evaluation at or below ``target``, its
    step interpolated linearly between that evaluation and the one before (the loss falls between
    evaluations too, so this is an estimate whose resolution is the evaluation interval); when the
    first evaluation is already below, its step (an upper bound). The step times
    ``budget["fraction_per_step"]`` is the fraction."""
    if not math.isfinite(target):
        raise ValueError(f"target must be a finite loss, got {target!r}")
    budget = record.get("budget")
    if not budget:
        raise ValueError(f"record {record.get('row')!r} s{record.get('seed')} has no budget: it was not "
                         "trained in a budget row's time")
    curve = [(h["step"], h["val_loss"]) for h in record["history"]
             if h["val_loss"] is not None and math.isfinite(h["val_loss"])]
    previous = None
    for step, loss in curve:
        if loss <= target:
            if previous is not None:
                (s0, l0) = previous
                step = s0 + (step - s0) * (l0 - target) / (l0 - loss)
            return step * budget["fraction_per_step"]
        previous = (step, loss)
    return None


def _speedup(fraction: dict | None) -> dict | None:
    """1 / fraction: the mean's reciprocal and the interval's ends swapped."""
    if fraction is None:
        return None
    flip = lambda x: None if x is None else 1.0 / x  # noqa: E731
    return {"mean": flip(fraction["mean"]), "low": flip(fraction["high"]), "high": flip(fraction["low"])}


def ingredient_table(records: dict, grid: Grid) -> dict:
    """Per row of ``grid`` (in order), over its seeds:

    * ``loss``: the final validation loss, in the budget row's time (:func:`summarize`);
    * ``fraction``: the time to the target as a fraction of the budget row's (:func:`time_to_loss`),
      summarized when every seed reached it, else None, with ``reached`` counting the seeds that did;
      the budget row's is 1 by definition (the target is its own mean loss at its end);
    * ``speedup``: 1 / fraction, mean and interval;
    * ``versus_previous``: the paired (seed by seed) difference from the row above, of the loss and,
      where both rows reached the target with every seed, of the log of the time: ``found`` says
      whether the 95 % interval excludes 0;
    * ``steps``: the median number of steps the seeds took; ``step_cost``: the median cost of one
      step in steps of the budget row (measured side by side, ``record["budget"]``); ``worst``:
      the highest final loss among the seeds.

    ``target`` is the budget row's mean final loss."""
    if grid.budget_row is None:
        raise ValueError(f"grid {grid.name!r} has no budget_row: it is not a speedrun grid")
    by_row = {row.label: [records[(row.label, s)] for s in grid.seeds if (row.label, s) in records]
              for row in grid.rows}
    missing = [label for label, runs in by_row.items() if len(runs) < 2]
    if missing:
        raise ValueError(f"grid {grid.name!r}: rows {missing} have fewer than two seeds recorded; "
                         f"run the grid first (python -m course_lib.experiments {grid.name})")
    target = statistics.mean(r["final_val_loss"] for r in by_row[grid.budget_row])
    table = {"grid": grid.name, "target": target, "budget_row": grid.budget_row,
             "budget_fraction": grid.budget_fraction, "rows": {}}
    previous = None
    for row in grid.rows:
        runs = by_row[row.label]
        times = {r["seed"]: (1.0 if row.label == grid.budget_row else time_to_loss(r, target)) for r in runs}
        reached = sum(t is not None for t in times.values())
        fraction = summarize(list(times.values())) if reached == len(runs) else None
        entry = {"seeds": sorted(times), "loss": summarize([r["final_val_loss"] for r in runs]),
                 "fraction": fraction, "reached": reached, "speedup": _speedup(fraction),
                 "steps": statistics.median(r["steps"] for r in runs),
                 "step_cost": statistics.median(
                     r["budget"]["step_seconds"] / r["budget"]["reference_step_seconds"] for r in runs),
                 "worst": max(r["final_val_loss"] for r in runs),
                 "_times": times, "_losses": {r["seed"]: r["final_val_loss"] for r in runs}}
        if previous is not None:
            seeds = [s for s in entry["seeds"] if s in previous["_losses"]]
            versus = {"row": previous["label"], "seeds": seeds,
                      "loss": paired_difference([entry["_losses"][s] for s in seeds],
                                                [previous["_losses"][s] for s in seeds]),
                      "log_time": None}
            if fraction is not None and previous["fraction"] is not None:
                versus["log_time"] = paired_difference([math.log(entry["_times"][s]) for s in seeds],
                                                       [math.log(previous["_times"][s]) for s in seeds])
            entry["versus_previous"] = versus
        entry["label"] = row.label
        table["rows"][row.label] = entry
        previous = entry
    for entry in table["rows"].values():
        del entry["_times"], entry["_losses"], entry["label"]
    return table


def ingredient_table_text(table: dict) -> str:
    """The table as text, at most 88 characters wide: per row, the loss at the end of its budget
    (the recipe's time, or the grid's ``budget_fraction`` of it; mean and 95 % interval, nats per
    character), whether it differs from the row above, and the time to the recipe's loss as a
    fraction of the recipe's time, with its interval."""
    fraction = table.get("budget_fraction", 1.0)
    budget = "recipe time" if fraction == 1 else f"1/{round(1 / fraction)} of it"
    lines = [f"{'row':<16} {'loss in ' + budget:<22} {'vs above':<8} {'time to recipe loss':<24} n",
             "-" * 76]
    for label, row in table["rows"].items():
        loss = row["loss"]
        loss_text = f"{loss['mean']:.3f} [{loss['low']:.3f}, {loss['high']:.3f}]"
        versus = row.get("versus_previous")
        change = "" if versus is None else ("better" if versus["loss"]["found"] and versus["loss"]["mean"] < 0
                                            else "worse" if versus["loss"]["found"] else "same")
        if label == table["budget_row"]:
            time_text = "1 (the target)"
        elif row["fraction"] is None:
            time_text = f"not reached by {len(row['seeds']) - row['reached']} seed(s)"
        else:
            f = row["fraction"]
            time_text = f"{f['mean']:.2f} [{f['low']:.2f}, {f['high']:.2f}]"
        lines.append(f"{label:<16} {loss_text:<22} {change:<8} {time_text:<24} {len(row['seeds'])}")
    lines.append(f"target: the {table['budget_row']}'s mean loss, {table['target']:.4f} nats/char; "
                 "95 % t intervals over seeds")
    return "\n".join(lines)


def plot_waterfall(ax, table: dict) -> None:
    """The cumulative speed-up, row by row, as a waterfall on a log axis: each bar runs from the
    row above's mean speed-up to this row's (green up, red down), with this row's 95 % interval as
    an error bar. A row with a seed that never reached the target in the recipe's time has no
    speed-up to draw (it is below 1): it is marked "not reached" at 1, where the next row starts."""
    level = 1.0
    labels = list(table["rows"])
    for i, label in enumerate(labels):
        row = table["rows"][label]
        s = row["speedup"]
        if s is None:
            ax.plot(i, 1.0, "x", color="C3", ms=8)
            ax.annotate("not reached", (i, 1.0), xytext=(0, 8), textcoords="offset points",
                        rotation=90, ha="center", va="bottom", fontsize=7, color="C3")
            level = 1.0
            continue
        low, high = sorted((level, s["mean"]))
        color = "0.6" if label == table["budget_row"] else ("C2" if s["mean"] >= level else "C3")
        ax.bar(i, max(high - low, 1e-3), bottom=low, color=color, width=0.7)
        if s["low"] is not None and s["high"] is not None and label != table["budget_row"]:
            ax.errorbar(i, s["mean"], yerr=[[s["mean"] - s["low"]], [s["high"] - s["mean"]]],
                        color="k", capsize=3, lw=1)
        level = s["mean"]
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    times = FuncFormatter(lambda value, _: f"×{value:g}")  # ×2, ×3, not 2×10⁰
    ax.yaxis.set_major_formatter(times)
    ax.yaxis.set_minor_formatter(times)
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("speed-up over the recipe (×)")

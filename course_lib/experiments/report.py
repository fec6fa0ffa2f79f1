"""Reading a grid's results: a table of its rows and their validation curves across seeds.

Losses are stored in nats per character; the table and the figures show bits (nats / ln 2), the
unit chapter 12 compares with the entropies of chapter 1. Every table ends with the command that
regenerates the grid it reads (:func:`regenerate_command`), so a printed result names its source.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["regenerate_command", "rows_table", "val_curves", "plot_val_curves"]

LN2 = math.log(2.0)


def _bits(value):
    return None if value is None else value / LN2


def regenerate_command(grid: str) -> str:
    """The command that re-runs grid ``grid`` into the results shipped with ``course_lib`` (run
    from the repository root; finished runs are kept, so delete the grid's folder to start over)."""
    if not isinstance(grid, str) or not grid:
        raise ValueError(f"grid must be a grid name, got {grid!r}")
    return f"python -m course_lib.experiments {grid} --out course_lib/experiments/results"


def rows_table(summary: dict, key: str = "final_val_loss") -> str:
    """A text table of a grid's rows: mean, seed-to-seed standard deviation and 95 % interval of
    ``key`` (``"final_val_loss"``, equal steps, or ``"val_loss_at_equal_time"``) in bits per
    character, then the paired difference of each row from the first and whether its interval
    excludes 0 (``found``: yes, a difference was found; no, none was). The last two lines name the
    command that regenerates the grid."""
    lines = [f"{'row':<14} {'n':>2} {'mean':>6} {'sd':>5}  {'95 % interval':<16} {'steps':>5}"
             f"  {'minus first row, paired':<24}  {'found':<5}"]
    first = next(iter(summary["rows"]))
    for label, row in summary["rows"].items():
        s = row[key]
        if s is None:
            why = ("every seed diverged" if len(row["diverged_seeds"]) == len(row["seeds"])
                   else "not yet evaluated at that time")
            lines.append(f"{label:<14} {len(row['seeds']):>2}  {why}")
            continue
        interval = "" if s["low"] is None else f"[{_bits(s['low']):.3f}, {_bits(s['high']):.3f}]"
        sd = "" if s["std"] is None else f"{_bits(s['std']):.3f}"
        versus = ""
        comparison = summary["against_first_row"].get(f"{label} - {first}")
        if comparison is not None and comparison[key] is not None and comparison[key]["low"] is not None:
            d = comparison[key]
            versus = (f"{_bits(d['mean']):+.3f} [{_bits(d['low']):+.3f}, {_bits(d['high']):+.3f}]"
                      f"  {'yes' if d['found'] else 'no':<5}")
        diverged = f" ({len(row['diverged_seeds'])} diverged)" if row["diverged_seeds"] else ""
        lines.append(f"{label:<14} {s['n']:>2} {_bits(s['mean']):>6.3f} {sd:>5}  {interval:<16} "
                     f"{row['steps']:>5g}  {versus}{diverged}".rstrip())
    lines += ["regenerate with:", f"  {regenerate_command(summary['grid'])}"]
    return "\n".join(lines)


def val_curves(records: dict, row: str, x: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """The validation curves of one row, in bits: ``(xs, ys)`` with ys (seeds, evaluations),
    x being ``"step"`` or ``"train_seconds"`` (each seed's own times, averaged across seeds)."""
    runs = [record for (label, _), record in sorted(records.items()) if label == row]
    if not runs:
        raise ValueError(f"no records for row {row!r}")
    length = min(len(r["history"]) for r in runs)
    ys = np.array([[np.nan if h["val_loss"] is None else h["val_loss"] / LN2 for h in r["history"][:length]]
                   for r in runs])
    xs = np.array([[h[x] for h in r["history"][:length]] for r in runs]).mean(axis=0)
    return xs, ys


def plot_val_curves(ax, records: dict, rows, x: str = "step", colors=None) -> None:
    """Each row's mean validation curve (bits) with a band from its lowest to its highest seed."""
    for i, row in enumerate(rows):
        xs, ys = val_curves(records, row, x)
        color = (colors or {}).get(row, f"C{i}")
        ax.plot(xs, ys.mean(axis=0), "o-", ms=3, color=color, label=f"{row} (n = {len(ys)})")
        ax.fill_between(xs, ys.min(axis=0), ys.max(axis=0), color=color, alpha=0.2, lw=0)

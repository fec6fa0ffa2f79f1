"""Run a named grid of training runs and summarize it.

    python -m course_lib.experiments --list
    python -m course_lib.experiments NAME --out course_lib/experiments/results

Runs every (row, seed) of grid NAME that is not finished yet, in parallel processes, each writing
its record to OUT/NAME/runs/ when it ends; then writes OUT/NAME/summary.json (mean, spread and 95 %
interval per row, at equal steps and at equal wall-clock time, with provenance). Run the same
command again after an interruption: finished runs are kept. Bad input ends with a one-line error
and exit status 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from .._cli import OneLineParser
from .grids import GRIDS, IN_PROGRESS, get_grid
from .runner import default_workers, run_grid

PROG = "python -m course_lib.experiments"




def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("name", nargs="?", metavar="NAME", help="the grid to run (see --list)")
    p.add_argument("--out", default="runs/experiments", metavar="DIR",
                   help="output folder (default: runs/experiments; the book's results live in "
                        "course_lib/experiments/results, inside the package)")
    p.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                   help="parallel processes (default: cores // the grid's threads per run)")
    p.add_argument("--max-runs", type=_positive_int, default=None, metavar="N",
                   help="run at most N unfinished runs now, then summarize what is there")
    p.add_argument("--list", action="store_true", help="list the grids and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _listing() -> str:
    lines = []
    for name, grid in {**GRIDS, **IN_PROGRESS}.items():
        if grid.budget_row is not None:
            budget = f"the time of row {grid.budget_row!r}"
        else:
            budget = f"{grid.seconds:g} s each" if grid.seconds else f"{grid.rows[0].train.steps} steps"
        lines.append(f"{name:18} {len(grid.rows)} rows × {len(grid.seeds)} seeds, {budget}: "
                     f"{grid.description}" + (" (results in progress)" if name in IN_PROGRESS else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.list:
        print(_listing())
        return 0
    try:
        if args.name is None:
            known = sorted(GRIDS) + sorted(IN_PROGRESS)
            raise ValueError(f"name a grid to run; one of {known} (--list describes them)")
        grid = get_grid(args.name)
        command = [*PROG.split(), *argv]
        print(f"{grid.name}: {len(grid.runs())} runs, {args.workers or default_workers(grid)} at a time, "
              f"into {args.out}", flush=True)
        summary = run_grid(grid, args.out, workers=args.workers, command=command,
                           progress=not args.no_progress, max_runs=args.max_runs)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished runs are kept; run `{shlex.join([*PROG.split(), *argv])}` "
              "again to resume", file=sys.stderr)
        return 130
    except Exception as err:  # one line, never a traceback
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    for label, row in summary["rows"].items():
        final = row["final_val_loss"]
        text = "all diverged" if final is None else (
            f"{final['mean']:.4f}" + ("" if final["low"] is None else f" [{final['low']:.4f}, {final['high']:.4f}]"))
        print(f"  {label:28} final val loss {text} (n = {len(row['seeds'])})")
    state = "complete" if summary["complete"] else f"{summary['runs']} of {summary['of']} runs"
    print(f"{grid.name}: {state}; summary in {args.out}/{grid.name}/summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

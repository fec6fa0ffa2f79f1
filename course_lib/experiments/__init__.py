"""Experiments that hold: named grids of training runs × seeds, run in parallel, resumable, with
provenance, summarized as means with 95 % intervals and compared at equal steps and at equal
wall-clock time.

    python -m course_lib.experiments NAME --out course_lib/experiments/results

The course's committed results live in ``results/`` beside this file, inside the package, so that
chapter 12 reads them wherever it runs — the site's build, Jupyter, or Colab, where only the package
is installed (as with the corpus). :func:`load_results` reads one grid's summary and records.

* :mod:`.grid` — :class:`Grid`, :class:`Row`, :class:`Probe`: what a grid is.
* :mod:`.grids` — :data:`GRIDS`, the course's named grids, defined in one place.
* :mod:`.run` — one run in a worker: train, evaluate, probe, record.
* :mod:`.runner` — :func:`run_grid`: the parallel, resumable runner and :func:`summarize_grid`.
* :mod:`.stats` — mean, spread, Student's t interval, paired differences.
* :mod:`.report` — a grid's table and validation curves, for the chapters.
* :mod:`.speedrun` — chapter 13's reading of the speedrun grid: time to the recipe's loss, the
  table of ingredients, the waterfall.
* :mod:`.provenance` — commit, torch, threads, CPU, date, command.
* :mod:`.copying` — chapter 12's copying model, trained on half-repeated batches, its weights
  committed (``python -m course_lib.experiments.copying``).
"""

from .grid import Grid, Probe, Row
from .grids import GRIDS, IN_PROGRESS, get_grid
from .run import run_one
from .runner import RESULTS, load_records, load_results, record_path, run_grid, summarize_grid
from .stats import interpolate_at, paired_difference, summarize, t_quantile

__all__ = ["Grid", "Row", "Probe", "GRIDS", "IN_PROGRESS", "get_grid", "run_one", "run_grid", "summarize_grid",
           "load_records", "load_results", "RESULTS", "record_path", "summarize", "paired_difference", "interpolate_at", "t_quantile"]

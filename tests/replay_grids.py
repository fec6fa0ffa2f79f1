"""The start of one committed run of each grid, trained again: what ``test_a_committed_grid_reproduces``
(tests/test_experiments.py) compares with the committed record.

    python tests/replay_grids.py OUT NAME [NAME ...]

For each grid NAME, :func:`chosen_run` picks one committed run; it is re-run up to its first
evaluation with the record's own train config and the grid's thread count, and OUT (JSON) is
rewritten whole after every grid: per grid, the row, the seed, the replayed history and provenance.
A run that two grids hold is replayed once for both. conftest.py starts this in the background,
beside the book build, so that the two cores share the work; the test waits for it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from course_lib._io import write_json
from course_lib.config import ModelConfig
from course_lib.experiments import GRIDS, Grid, Row, record_path, run_one
from course_lib.experiments.runner import RESULTS
from course_lib.training import TrainConfig

COMMITTED = Path(RESULTS)  # the results shipped with course_lib


def config(cls, values: dict):
    """A config from its record (JSON turned tuples into lists)."""
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def run_key(record: dict) -> str:
    """What determines a run: its model, its train config (steps included) and its seed, every field
    spelled out (a record made before a field existed holds it at its default)."""
    return json.dumps([dataclasses.asdict(config(ModelConfig, record["model_config"])),
                       dataclasses.asdict(config(TrainConfig, record["train_config"])),
                       record["seed"]], sort_keys=True)


def first_record(grid: Grid, row: Row) -> dict:
    return json.loads(Path(record_path(COMMITTED, grid, row, grid.seeds[0])).read_text())


def chosen_run(name: str) -> tuple[Grid, Row, dict]:
    """The run of grid ``name`` to replay: the first seed of the row whose first evaluation comes
    soonest (in a grid with a budget row, the rows differ sixfold), unless a row is the same run as
    one in another grid (the modern block of ``arch`` and the σ = 1/√D row of ``init-scale``; the
    recipe of ``speedrun`` and ``speedrun-long``): then that row, replayed once for both grids."""
    grid = GRIDS[name]
    elsewhere = {run_key(first_record(other, row)) for other in GRIDS.values() if other is not grid
                 for row in other.rows}

    def cost(row):  # shared runs first, then the soonest first evaluation
        record = first_record(grid, row)
        return (run_key(record) not in elsewhere,
                record["train_config"]["eval_interval"] * record["train_seconds"] / record["steps"])

    row = min(grid.rows, key=cost)
    return grid, row, first_record(grid, row)


def main(argv: list[str]) -> int:
    out, names = Path(argv[0]), argv[1:]
    out.parent.mkdir(parents=True, exist_ok=True)
    results, replays = {}, {}
    for name in names:
        grid, row, record = chosen_run(name)
        train = config(TrainConfig, record["train_config"])
        key = run_key(record)
        if key not in replays:
            replays[key] = run_one(grid, row, record["seed"], train_config=train, until=train.eval_interval)
        again = replays[key]
        results[name] = {"row": row.label, "seed": record["seed"], "until": train.eval_interval,
                         "history": again["history"], "provenance": again["provenance"]}
        write_json(results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

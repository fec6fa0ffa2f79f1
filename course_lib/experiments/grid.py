"""A grid of runs: rows of (model config, train config), each trained once per seed.

A :class:`Grid` is the unit the runner works on and the book reads: ``rows × seeds`` training runs
of the character model on Tiny Shakespeare, under a budget of steps (each row's
``TrainConfig.steps``) or of wall-clock seconds (``seconds``: each run's step count is calibrated
so that training takes about that long, so rows are compared at equal time rather than equal work),
or of another row's time (``budget_row``: each run takes as long as that row's steps take, the two
timed side by side in the same process, so that the budget follows the machine's speed).
Seed ``s`` replaces the row's ``TrainConfig.seed``: it fixes the initial weights and the order of
the batches, so two rows run with the same seed see the same text in the same order and can be
compared seed by seed (:func:`~course_lib.experiments.stats.paired_difference`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from ..config import ModelConfig
from ..training import TrainConfig

__all__ = ["Row", "Probe", "Grid"]

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._=+-]*$")


@dataclass(frozen=True)
class Probe:
    """A measurement taken on the trained model: the name of a function in
    :data:`course_lib.experiments.probes.PROBES` and its keyword arguments (as pairs, so that the
    probe stays hashable). Its result is stored in the run's record under ``name``."""

    name: str
    options: tuple[tuple[str, object], ...] = ()

    @property
    def kwargs(self) -> dict:
        return dict(self.options)


@dataclass(frozen=True)
class Row:
    """One configuration of a grid. ``train_chars``: train on the first N characters of the
    training split only (None: all of it), the way to make a small model overfit quickly."""

    label: str
    model: ModelConfig
    train: TrainConfig
    train_chars: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not _LABEL.match(self.label):
            raise ValueError(f"label {self.label!r} must be letters, digits, spaces and . _ = + - "
                             "(it names the run's file)")
        if not isinstance(self.model, ModelConfig):
            raise TypeError(f"row {self.label!r}: model must be a ModelConfig")
        if not isinstance(self.train, TrainConfig):
            raise TypeError(f"row {self.label!r}: train must be a TrainConfig")
        if self.train.context > self.model.max_seq_len:
            raise ValueError(f"row {self.label!r}: context ({self.train.context}) exceeds max_seq_len "
                             f"({self.model.max_seq_len})")
        if self.train_chars is not None and (not isinstance(self.train_chars, int) or self.train_chars < 2):
            raise ValueError(f"row {self.label!r}: train_chars ({self.train_chars}) must be an int ≥ 2")

    @property
    def slug(self) -> str:
        """The label as a file name: spaces and '=' become '-'."""
        return re.sub(r"[ =]+", "-", self.label)


@dataclass(frozen=True)
class Grid:
    """``rows`` × ``seeds`` runs, with what the runner records for each.

    ``seconds``: a wall-clock budget per run (None: each row's step budget). ``probes``:
    measurements on each trained model. ``record_steps``: keep every step's training loss and
    gradient norm (for learning-rate sweeps and divergence), not only the evaluations. ``threads``:
    torch threads per run; runs go in parallel processes, as many as the cores allow at this count.
    ``budget_row``: the label of the row whose training time is every run's budget. Each run times
    its row's step and that row's step, interleaved (``calibration_steps`` each, the median of the
    second half), trains ``round(steps_ref · t_ref / t_row)`` steps with its schedule laid over
    them, and evaluates ``evaluations`` times along the way; the budget row itself trains its own
    steps. Budgets as ratios of times taken together hold on a machine whose speed drifts.
    ``budget_fraction`` f < 1 gives every other row f of the budget row's time instead (its schedule
    fitted to that shorter run), while the budget row still trains its own steps: how a run that
    ends sooner compares with the budget row's whole run.
    """

    name: str
    description: str
    rows: tuple[Row, ...]
    seeds: tuple[int, ...] = (0, 1, 2)
    seconds: float | None = None
    probes: tuple[Probe, ...] = ()
    record_steps: bool = False
    threads: int = 1
    calibration_steps: int = field(default=30, repr=False)
    budget_row: str | None = None
    evaluations: int = 20
    budget_fraction: float = 1.0

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError(f"grid {self.name!r} has no rows")
        slugs = [row.slug for row in self.rows]
        if len(set(slugs)) != len(slugs):
            raise ValueError(f"grid {self.name!r}: row labels must be distinct, got {slugs}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or any(
                isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ValueError(f"grid {self.name!r}: seeds {self.seeds} must be distinct non-negative ints")
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"grid {self.name!r}: seconds ({self.seconds}) must be positive")
        if self.budget_row is not None:
            if self.seconds is not None:
                raise ValueError(f"grid {self.name!r}: give seconds or budget_row, not both")
            self.row(self.budget_row)  # raises, naming the rows, when there is no such row
        if isinstance(self.budget_fraction, bool) or not isinstance(self.budget_fraction, (int, float)) \
                or not 0 < self.budget_fraction <= 1:
            raise ValueError(f"grid {self.name!r}: budget_fraction ({self.budget_fraction!r}) must be in (0, 1]")
        if self.budget_fraction != 1 and self.budget_row is None:
            raise ValueError(f"grid {self.name!r}: budget_fraction needs a budget_row, whose time it divides")
        if isinstance(self.evaluations, bool) or not isinstance(self.evaluations, int) or self.evaluations < 1:
            raise ValueError(f"grid {self.name!r}: evaluations ({self.evaluations}) must be a positive int")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise ValueError(f"grid {self.name!r}: threads ({self.threads}) must be a positive int")

    def runs(self) -> list[tuple[Row, int]]:
        """Every (row, seed), seed-major: the first seed of every row comes first, so that a grid
        stopped early has each row at least once."""
        return [(row, seed) for seed in self.seeds for row in self.rows]

    def row(self, label: str) -> Row:
        for row in self.rows:
            if row.label == label:
                return row
        raise ValueError(f"grid {self.name!r} has no row {label!r}; rows: {[r.label for r in self.rows]}")

    def replace(self, **changes) -> Grid:
        return dataclasses.replace(self, **changes)

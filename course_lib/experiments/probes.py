"""Measurements taken on a model once its run has trained, stored in the run's record.

Each probe is ``probe(model, corpus, **options) -> JSON value``. A grid names its probes
(:class:`~course_lib.experiments.grid.Probe`); the runner calls them in the worker process, after
the last evaluation, with the model in eval mode.
"""

from __future__ import annotations

from ..data import CharData
from ..training import loss_per_position

__all__ = ["PROBES", "loss_by_position"]


def loss_by_position(model, corpus: CharData, *, context: int, windows: int = 256,
                     batch_size: int = 32) -> list[float]:
    """The validation loss (nats) at each position 0 … context − 1 of a window, averaged over the
    first ``windows`` non-overlapping windows of the validation split
    (:func:`~course_lib.training.loss_per_position`). With ``context`` beyond the training length
    it shows how the model copes with positions it never trained on; a model whose positions
    cannot go that far (a learned table) is run at its own maximum."""
    device = next(model.parameters()).device
    context = min(context, model.config.max_seq_len)
    curve = loss_per_position(model, corpus.val.to(device), context, batch_size, max_windows=windows)
    return [round(float(v), 6) for v in curve]


PROBES = {"loss_by_position": loss_by_position}

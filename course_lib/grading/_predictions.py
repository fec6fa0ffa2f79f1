"""Prediction tasks: the student works numbers out on paper, before running anything, and returns them
from ``predictions() -> dict``; the checker says which prediction is off and, when the value reveals a
known misunderstanding, which one — never the right value.

A prediction task is described by the true values (computed, never typed in) and, key by key, the
wrong values that reveal a specific misunderstanding::

    NORM_PREDICTIONS = predictions_task(
        truth=lambda: {"gain_ratio": (1 / eps) / (1 / eps**0.5), ...},
        wrong={"gain_ratio": [(1e6, "that is the largest gain of the outside convention alone ...")], ...},
        seed=504,
    )
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from ._core import Case, Forbid, GradingError, Plain, Task, TensorOutput

__all__ = ["predictions_task"]


def predictions_task(*, truth: Callable[[], dict[str, float]], wrong: dict[str, list[tuple[float, str]]],
                     seed: int, rtol: float | dict[str, float] = 1e-3, atol: float | dict[str, float] = 1e-6,
                     forbid: Forbid = Forbid(),
                     advice: str = "Work it out on paper first, then run the experiment below it.",
                     name: str = "predictions", prepare: Callable[[], None] | None = None) -> Task:
    """A :class:`Task` grading ``predictions()``: a dict with one number (or one list of numbers, when the
    true value is a list) per key of ``truth()``, each within ``atol + rtol · |true value|`` (a tolerance
    may also be given key by key, as a dict). ``wrong[key]`` lists (value, what it reveals); a last entry
    with the value None speaks to any other wrong value of that key."""
    computed: dict = {}  # the true values, computed by reference() before the student's call (unwatched)
    shape: dict = {}  # key -> None (one number) or the length of its list

    def layout() -> dict:
        """The keys of ``truth()`` and their sizes, found on first use rather than at import: a truth
        may train or build things, and every notebook imports every checker."""
        if not shape:
            values = computed or truth()
            shape.update({k: (len(v) if isinstance(v, (list, tuple)) else None) for k, v in values.items()})
            unknown = set(wrong) - set(shape)
            if unknown:
                raise ValueError(f"wrong predictions for unknown keys {sorted(unknown)}; "
                                 f"the keys are {list(shape)}")
        return shape

    def tolerance(key: str) -> tuple[float, float]:
        return (rtol[key] if isinstance(rtol, dict) else rtol, atol[key] if isinstance(atol, dict) else atol)

    def near(key: str, got: list[float], value: list[float]) -> bool:
        r, a = tolerance(key)
        def close(g: float, v: float) -> bool:
            if not (math.isfinite(g) and math.isfinite(v)):  # inf and NaN match only themselves
                return g == v or (math.isnan(g) and math.isnan(v))
            return abs(g - v) <= a + r * abs(v)

        return len(got) == len(value) and all(close(g, v) for g, v in zip(got, value))

    def flat(key: str, value) -> list[float]:
        return [float(v) for v in value] if layout()[key] is not None else [float(value)]

    def reference() -> torch.Tensor:
        computed.update(truth())
        return torch.tensor([v for k in layout() for v in flat(k, computed[k])], dtype=torch.float64)

    def number(key: str, value) -> float:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if value is ... or value is None:
            raise GradingError(f"the prediction for '{key}' is still empty: replace ... with a number.")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise GradingError(f"the prediction for '{key}' should be a number, but it is a "
                               f"{type(value).__name__}.")
        return float(value)

    def read(student) -> torch.Tensor:
        """The student's numbers, each key's replaced by the true value when within that key's tolerance
        (so the comparison that follows is exact and every key keeps its own tolerance)."""
        sizes = layout()  # filled by reference(), which runs first
        keys = tuple(sizes)
        given = student()
        if not isinstance(given, dict):
            raise GradingError(f"`{name}()` should return a dict with the keys {list(keys)}, but it returns a "
                               f"{type(given).__name__}.")
        missing = [k for k in keys if k not in given]
        if missing:
            raise GradingError(f"`{name}()` has no value for {missing}: fill in every key.")
        true = computed
        values = []
        for key in keys:
            value = given[key]
            if isinstance(value, torch.Tensor) and value.dim() == 1:
                value = value.tolist()
            if sizes[key] is None:
                numbers_ = [number(key, value)]
            elif not isinstance(value, (list, tuple)) or len(value) != sizes[key]:
                raise GradingError(f"the prediction for '{key}' should be a list of {sizes[key]} numbers.")
            else:
                numbers_ = [number(key, v) for v in value]
            values += flat(key, true[key]) if near(key, numbers_, flat(key, true[key])) else numbers_
        return torch.tensor(values, dtype=torch.float64)

    def explain(got: torch.Tensor, want: torch.Tensor, case: Case) -> str | None:
        at = 0
        for key, size in layout().items():
            n = size or 1
            g, w = got[at:at + n].tolist(), want[at:at + n].tolist()
            at += n
            if g == w:
                continue
            for value, why in wrong.get(key, []):
                if value is None or near(key, g, flat(key, value)):  # None: any other wrong value
                    return f"`{key}`: {why}"
            return Plain(f"`{key}` is not what happens. {advice}")
        return None

    return Task(name=name, reference=reference, seed=seed, cases=lambda gen: [Case("your predictions", ())],
                run=read, output=TensorOutput(), rtol=0.0, atol=0.0, explain=explain, forbid=forbid,
                prepare=prepare)

"""Catalogues of realistic wrong answers, one module per assignment (``exNN.py``), grown with each one.

Each :class:`Wrong` is code a student might really write in one answer cell — written as a student
would, not derived from the checkers' mistake models — and the words the feedback must contain for the
mistake to count as *named*. ``expect=None`` marks an answer whose feedback is expected to be generic
(at most 10 % of an assignment's catalogue). tests/test_mistake_catalogue.py runs every entry through
its checker; tests/test_exercises.py submits the first entry of each task through nbgrader.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Wrong:
    answer: str  # grade_id of the answer cell it replaces, e.g. "layer-norm-answer"
    expect: str | None  # a fragment of the feedback that names the mistake (None: generic feedback)
    code: str  # the whole cell, as the student would write it


def catalogues() -> dict[str, list[Wrong]]:
    """assignment name -> its catalogue, for every exNN module in this package."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("ex"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            found[module.ASSIGNMENT] = list(module.WRONG)
    return found

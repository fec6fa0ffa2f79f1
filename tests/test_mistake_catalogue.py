"""Every catalogued realistic mistake is caught, and for at least 90 % of each assignment's catalogue the
feedback names it (tests/mistakes/). The wrong code runs in the namespace the student's notebook would
have: the source notebook's import and helper cells and the other tasks' solutions."""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import re
from collections import Counter

import pytest

from grading_helpers import no_values_leak
from mistakes import catalogues

ROOT = pathlib.Path(__file__).resolve().parents[1]
CATALOGUES = catalogues()
ENTRIES = [(assignment, i) for assignment, wrongs in sorted(CATALOGUES.items()) for i in range(len(wrongs))]
MIN_PER_TASK = 6
MIN_NAMED_SHARE = 0.9


def _source(assignment: str) -> dict:
    (path,) = sorted((ROOT / "exercises" / "source" / assignment).glob("*.ipynb"))
    return json.loads(path.read_text())


def _grade_id(cell: dict) -> str | None:
    return cell["metadata"].get("nbgrader", {}).get("grade_id")


_NAMESPACES: dict[str, dict] = {}


def namespace(assignment: str) -> dict:
    """The source notebook's code cells run in order, except the setup cell, the self-checks and the
    test cells: imports, helpers and every task's solution."""
    if assignment not in _NAMESPACES:
        ns: dict = {"__name__": "__main__"}
        cells = [c for c in _source(assignment)["cells"][1:] if c["cell_type"] == "code"]
        for cell in cells:
            source = "".join(cell["source"])
            meta = cell["metadata"].get("nbgrader", {})
            if meta.get("grade") or "@self_check" in source:
                continue
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, f"<{assignment}>", "exec"), ns)
        _NAMESPACES[assignment] = ns
    return dict(_NAMESPACES[assignment])


def checker_call(assignment: str, answer_id: str) -> tuple[str, str]:
    """(checker name, student name) from the hidden one-liner of the task's test cell."""
    test_id = answer_id.removesuffix("-answer") + "-tests"
    (cell,) = [c for c in _source(assignment)["cells"] if _grade_id(c) == test_id]
    hidden = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", "".join(cell["source"]), re.S)
    checker, student = re.fullmatch(r"(check_\w+)\((\w+)\)", hidden.group(1).strip()).groups()
    return checker, student


def run_wrong(assignment: str, index: int) -> str:
    """The feedback message for one catalogued wrong answer."""
    import course_lib.grading as grading

    wrong = CATALOGUES[assignment][index]
    ns = namespace(assignment)
    exec(compile(wrong.code, f"<{assignment}:{wrong.answer}>", "exec"), ns)
    checker, student = checker_call(assignment, wrong.answer)
    with pytest.raises(AssertionError) as info:
        getattr(grading, checker)(ns[student])
    return str(info.value)


@pytest.mark.parametrize("assignment, index", ENTRIES,
                         ids=[f"{a}-{CATALOGUES[a][i].answer}-{i}" for a, i in ENTRIES])
def test_a_catalogued_mistake_fails_and_is_named(assignment, index):
    wrong = CATALOGUES[assignment][index]
    message = run_wrong(assignment, index)
    no_values_leak(message)
    if wrong.expect is not None:
        assert wrong.expect in " ".join(message.split()), message


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_every_task_has_enough_catalogued_mistakes_and_most_are_named(assignment):
    wrongs = CATALOGUES[assignment]
    answers = {_grade_id(c) for c in _source(assignment)["cells"]
               if c["metadata"].get("nbgrader", {}).get("solution")}
    per_task = Counter(w.answer for w in wrongs)
    assert set(per_task) == answers, "every answer cell has a catalogue, and only answer cells"
    assert min(per_task.values()) >= MIN_PER_TASK, per_task
    named = sum(w.expect is not None for w in wrongs)
    assert named / len(wrongs) >= MIN_NAMED_SHARE, f"{named} of {len(wrongs)} named"


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_the_solutions_pass(assignment):
    import course_lib.grading as grading

    ns = namespace(assignment)
    for cell in _source(assignment)["cells"]:
        answer = _grade_id(cell)
        if answer and cell["metadata"]["nbgrader"].get("solution"):
            checker, student = checker_call(assignment, answer)
            getattr(grading, checker)(ns[student])

"""The exercises, graded for real: nbgrader runs on a temporary copy of exercises/ and scores are read
from its gradebook.

- the committed release equals a fresh `nbgrader generate_assignment` (not stale);
- the source (with solutions) gets full marks, the release gets zero;
- for every task, a known wrong answer loses exactly that task's points;
- edited test cells are restored before grading; an infinite loop costs only its task;
- grading leaves submitted/ untouched, and feedback does not show hidden tests.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from exercise_mistakes import MISTAKES

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
ALL_ASSIGNMENTS = sorted(p.name for p in (EXERCISES / "source").iterdir() if p.is_dir())
# While writing one assignment, COURSE_ASSIGNMENTS=02_x,03_y restricts grading to those (make test: all).
ASSIGNMENTS = [a for a in ALL_ASSIGNMENTS if a in os.environ.get("COURSE_ASSIGNMENTS", a).split(",")]
# Per-cell limit while testing: long enough for the setup cell on a slow machine, short enough that
# the infinite-loop submission does not dominate the suite. (The course's own limit: nbgrader_config.py.)
TEST_TIMEOUT = 20
LOOP_ASSIGNMENT, LOOP_TASK = "01_information_theory", "entropy-answer"


def notebooks(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(folder.glob("*.ipynb"))


def load(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())


def graded_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]


def answer_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution")]


def cell(nb: dict, grade_id: str) -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def grading_cell_of(answer_id: str) -> str:
    """Convention: the answer cell `<task>-answer` is graded by the test cell `<task>-tests`."""
    return answer_id.removesuffix("-answer") + "-tests"


def with_cell(nb: dict, grade_id: str, source: str) -> dict:
    nb = copy.deepcopy(nb)
    cell(nb, grade_id)["source"] = source
    return nb


def _nbgrader_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *args]


def _env() -> dict:
    # nbgrader runs helper programs (alembic) found on PATH: put this environment's bin first
    return dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def nbgrader(*args: str, cwd: pathlib.Path) -> None:
    nbgrader_in_parallel([cwd], *args)


def nbgrader_in_parallel(folders: list[pathlib.Path], *args: str) -> None:
    """Run the same nbgrader command in several course folders at once (one per core)."""
    procs = [(folder, subprocess.Popen(_nbgrader_command(*args), cwd=folder, env=_env(), text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
             for folder in folders]
    for folder, proc in procs:
        out, _ = proc.communicate(timeout=1800)
        assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed in {folder}:\n{out[-4000:]}"


def submissions() -> dict[tuple[str, str], dict]:
    """(student, assignment) -> notebook to submit. One notebook per assignment."""
    subs = {}
    for assignment in ASSIGNMENTS:
        (src_path,) = notebooks(EXERCISES / "source" / assignment)
        (rel_path,) = notebooks(EXERCISES / "release" / assignment)
        src = load(src_path)
        subs[("solution", assignment)] = src
        subs[("blank", assignment)] = load(rel_path)
        for answer_id, wrong in MISTAKES.get(assignment, {}).items():
            subs[(f"wrong-{answer_id}", assignment)] = with_cell(src, answer_id, wrong)
    if LOOP_ASSIGNMENT not in ASSIGNMENTS:
        return subs
    src = load(notebooks(EXERCISES / "source" / LOOP_ASSIGNMENT)[0])
    wrong = MISTAKES[LOOP_ASSIGNMENT][LOOP_TASK]
    tampered = with_cell(src, LOOP_TASK, wrong)
    tampered = with_cell(tampered, grading_cell_of(LOOP_TASK), "# I removed the tests.\npass\n")
    subs[("tampered", LOOP_ASSIGNMENT)] = tampered
    name = re.search(r"def (\w+)\(", wrong).group(1)
    looping = with_cell(src, LOOP_TASK, f"def {name}(*args, **kwargs):\n    while True:\n        pass\n")
    answer_at = looping["cells"].index(cell(looping, LOOP_TASK))
    del looping["cells"][answer_at + 1]  # the self-check would hang too: one time-out is enough
    subs[("looping", LOOP_ASSIGNMENT)] = looping
    return subs


# Grading is split into two course folders (two gradebooks) that nbgrader processes at the same time.
N_SHARDS = 2


def shard_of(assignment: str) -> int:
    return ALL_ASSIGNMENTS.index(assignment) % N_SHARDS


@pytest.fixture(scope="session")
def courses(tmp_path_factory) -> dict[int, pathlib.Path]:
    """Copies of the course directory, assignments generated and recorded in each one's gradebook."""
    roots = {}
    for assignment in ASSIGNMENTS:
        shard = shard_of(assignment)
        if shard not in roots:
            roots[shard] = tmp_path_factory.mktemp(f"course{shard}")
            shutil.copy(EXERCISES / "nbgrader_config.py", roots[shard])
        shutil.copytree(EXERCISES / "source" / assignment, roots[shard] / "source" / assignment)
    nbgrader_in_parallel(list(roots.values()), "generate_assignment", "*", "--force")
    return roots


def course_of(courses, assignment: str) -> pathlib.Path:
    return courses[shard_of(assignment)]


def _hashes(folder: pathlib.Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="session")
def graded(courses) -> dict:
    """Submit every variant, autograde them all (the shards in parallel), and return the scores."""
    subs = submissions()
    for (student, assignment), nb in subs.items():
        (name,) = [p.name for p in notebooks(EXERCISES / "source" / assignment)]
        folder = course_of(courses, assignment) / "submitted" / student / assignment
        folder.mkdir(parents=True)
        (folder / name).write_text(json.dumps(nb, indent=1))
    before = {shard: _hashes(root / "submitted") for shard, root in courses.items()}
    nbgrader_in_parallel(list(courses.values()), "autograde", "*", f"--Execute.timeout={TEST_TIMEOUT}")
    after = {shard: _hashes(root / "submitted") for shard, root in courses.items()}

    from nbgrader.api import Gradebook

    scores = {}
    for student, assignment in subs:
        (name,) = [p.stem for p in notebooks(EXERCISES / "source" / assignment)]
        with Gradebook(f"sqlite:///{course_of(courses, assignment) / 'gradebook.db'}") as gb:
            nb = gb.find_submission_notebook(name, assignment, student)
            scores[(student, assignment)] = {g.name: (g.score, g.max_score) for g in nb.grades}
    return {"scores": scores, "unchanged": before == after, "courses": courses}


# --- the release ------------------------------------------------------------------------------------

@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_is_up_to_date(courses, assignment):
    fresh = {p.name: load(p) for p in notebooks(course_of(courses, assignment) / "release" / assignment)}
    committed = {p.name: load(p) for p in notebooks(EXERCISES / "release" / assignment)}
    assert fresh.keys() == committed.keys()
    for name in fresh:
        assert fresh[name] == committed[name], f"exercises/release/{assignment}/{name} is stale: run `make exercises`"
    assert sorted(p.name for p in (EXERCISES / "release").iterdir()) == ALL_ASSIGNMENTS


# --- the notebooks' nbgrader metadata -----------------------------------------------------------------

@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_metadata_is_clean_and_tests_call_checkers(assignment):
    (path,) = notebooks(EXERCISES / "source" / assignment)
    nb = load(path)
    ids = []
    for c in nb["cells"]:
        meta = c["metadata"].get("nbgrader")
        if meta is None:
            continue
        keys = {"grade", "solution", "locked", "schema_version", "grade_id"} | ({"points"} if meta.get("grade") else set())
        assert set(meta) == keys, f"{path.name}: unexpected nbgrader keys {sorted(set(meta) ^ keys)}"
        assert meta["schema_version"] == 3
        ids.append(meta["grade_id"])
        source = "".join(c["source"])
        if meta["grade"]:
            assert meta["locked"] and meta["points"] > 0
            hidden = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", source, re.S)
            assert hidden, f"{meta['grade_id']} has no hidden tests"
            for line in hidden.group(1).strip().splitlines():
                assert re.fullmatch(r"check_\w+\(\w+\)", line), f"hidden tests must be checker one-liners: {line!r}"
        if meta["solution"]:
            assert "### BEGIN SOLUTION" in source and "### END SOLUTION" in source
    answers = [c["metadata"]["nbgrader"]["grade_id"] for c in answer_cells(nb)]
    tests = [c["metadata"]["nbgrader"]["grade_id"] for c in graded_cells(nb)]
    assert [grading_cell_of(a) for a in answers] == tests, "every answer cell <task>-answer needs one test cell <task>-tests"
    assert len(tests) >= 2 and len(set(ids)) == len(ids)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_task_has_a_known_mistake(assignment):
    (path,) = notebooks(EXERCISES / "source" / assignment)
    answers = {c["metadata"]["nbgrader"]["grade_id"] for c in answer_cells(load(path))}
    assert set(MISTAKES.get(assignment, {})) == answers


def test_validator_passes_the_source_and_fails_a_wrong_answer(tmp_path):
    """`nbgrader validate` (which always exits 0) as an instructor would use it, via its Validator."""
    from nbgrader.validator import Validator

    (src,) = notebooks(EXERCISES / "source" / LOOP_ASSIGNMENT)
    assert Validator().validate(str(src)) == {}
    wrong = tmp_path / src.name
    wrong.write_text(json.dumps(with_cell(load(src), LOOP_TASK, MISTAKES[LOOP_ASSIGNMENT][LOOP_TASK])))
    assert "failed" in Validator().validate(str(wrong))


# --- grading ------------------------------------------------------------------------------------------

def total(scores: dict) -> tuple[float, float]:
    return sum(s for s, _ in scores.values()), sum(m for _, m in scores.values())


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_gets_full_marks(graded, assignment):
    score, max_score = total(graded["scores"][("solution", assignment)])
    assert max_score > 0 and score == max_score, graded["scores"][("solution", assignment)]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_gets_zero(graded, assignment):
    assert total(graded["scores"][("blank", assignment)])[0] == 0


@pytest.mark.parametrize("assignment, answer_id", [(a, t) for a in ASSIGNMENTS for t in MISTAKES.get(a, {})])
def test_a_wrong_task_loses_exactly_its_points(graded, assignment, answer_id):
    scores = graded["scores"][(f"wrong-{answer_id}", assignment)]
    for grade_id, (score, max_score) in scores.items():
        expected = 0 if grade_id == grading_cell_of(answer_id) else max_score
        assert score == expected, f"{grade_id}: {score}/{max_score} with a mistake in {answer_id}"


needs_loop_assignment = pytest.mark.skipif(LOOP_ASSIGNMENT not in ASSIGNMENTS, reason="COURSE_ASSIGNMENTS excludes it")


@needs_loop_assignment
def test_edited_test_cells_are_restored(graded):
    scores = graded["scores"][("tampered", LOOP_ASSIGNMENT)]
    assert scores == graded["scores"][(f"wrong-{LOOP_TASK}", LOOP_ASSIGNMENT)]
    assert scores[grading_cell_of(LOOP_TASK)][0] == 0


@needs_loop_assignment
def test_an_infinite_loop_costs_only_its_task(graded):
    scores = graded["scores"][("looping", LOOP_ASSIGNMENT)]
    for grade_id, (score, max_score) in scores.items():
        assert score == (0 if grade_id == grading_cell_of(LOOP_TASK) else max_score), scores


def test_grading_does_not_change_submissions(graded):
    assert graded["unchanged"]


@needs_loop_assignment
@pytest.mark.parametrize("student", [f"wrong-{LOOP_TASK}", "looping"])
def test_feedback_names_the_mistake_and_hides_the_hidden_tests(graded, student):
    course = course_of(graded["courses"], LOOP_ASSIGNMENT)
    nbgrader("generate_feedback", LOOP_ASSIGNMENT, f"--student={student}", cwd=course)
    (html,) = (course / "feedback" / student / LOOP_ASSIGNMENT).glob("*.html")
    text = html.read_text()
    assert "HIDDEN TESTS" not in text and "check_entropy(entropy)" not in text
    assert "course_lib/grading" not in text  # no traceback into the checkers
    expected = "Likely mistake: 0 · log 0 must count as 0" if student.startswith("wrong") else "did not finish in time"
    assert expected in " ".join(text.split())  # the message is wrapped over several lines


def test_course_config():
    text = (EXERCISES / "nbgrader_config.py").read_text()
    assert re.search(r"c\.Execute\.timeout = \d+", text)
    assert "ClearHiddenTests" in text

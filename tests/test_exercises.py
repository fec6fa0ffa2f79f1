"""The exercises, graded for real: nbgrader runs on a temporary copy of exercises/ and scores are read
from its gradebook.

- the committed release equals a fresh `nbgrader generate_assignment` (not stale);
- the source (with solutions) gets full marks, the release gets zero;
- a wrong answer in a task costs exactly that task's points (two submissions per assignment: the odd
  tasks wrong, then the even ones, each with its first catalogued mistake);
- edited test cells are restored; a missing, misnamed or unparsable function, a process exit, a segfault
  or an infinite loop costs only its task, and a loop costs at most 15 s;
- grading leaves submitted/ untouched, and no feedback shows hidden tests, checker code or paths.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from mistakes import catalogues

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
ALL_ASSIGNMENTS = sorted(p.name for p in (EXERCISES / "source").iterdir() if p.is_dir())
# While writing one assignment, COURSE_ASSIGNMENTS=02_x,03_y restricts grading to those (make test: all).
ASSIGNMENTS = [a for a in ALL_ASSIGNMENTS if a in os.environ.get("COURSE_ASSIGNMENTS", a).split(",")]
CATALOGUES = catalogues()
# The assignment on which faults, leaks and time limits are tried.
SPECIAL = "05_normalization"
LOOP_BUDGET = 15.0  # seconds an infinite loop may cost, visible check and hidden test together


def notebooks(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(folder.glob("*.ipynb"))


def load(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())


def source(assignment: str) -> dict:
    return load(notebooks(EXERCISES / "source" / assignment)[0])


def meta(cell: dict) -> dict:
    return cell["metadata"].get("nbgrader", {})


def answer_ids(nb: dict) -> list[str]:
    return [meta(c)["grade_id"] for c in nb["cells"] if meta(c).get("solution")]


def cell(nb: dict, grade_id: str) -> dict:
    return next(c for c in nb["cells"] if meta(c).get("grade_id") == grade_id)


def grading_cell_of(answer_id: str) -> str:
    """Convention: the answer cell `<task>-answer` is graded by the test cell `<task>-tests`."""
    return answer_id.removesuffix("-answer") + "-tests"


def with_cells(nb: dict, replacements: dict[str, str]) -> dict:
    nb = copy.deepcopy(nb)
    for grade_id, text in replacements.items():
        cell(nb, grade_id)["source"] = text
    return nb


def first_wrong(assignment: str) -> dict[str, str]:
    """One realistic wrong answer per task: the first catalogued one that the feedback names."""
    wrong = {}
    for entry in CATALOGUES.get(assignment, []):
        if entry.expect is not None:
            wrong.setdefault(entry.answer, entry.code)
    return wrong


def function_name(code: str) -> str:
    return re.search(r"def (\w+)\(", code).group(1)


# --- nbgrader, run in temporary course folders ----------------------------------------------------

def _env() -> dict:
    # nbgrader runs helper programs (alembic) found on PATH: put this environment's bin first
    return dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def nbgrader_in_parallel(folders: list[pathlib.Path], *args: str) -> None:
    """Run the same nbgrader command in several course folders at once (one per core)."""
    procs = [(folder, subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=folder, env=_env(),
                                       text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
             for folder in folders]
    for folder, proc in procs:
        out, _ = proc.communicate(timeout=1800)
        assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed in {folder}:\n{_errors_first(out)}"


def _errors_first(out: str, limit: int = 4000) -> str:
    """nbgrader's output for a failure's message: its ERROR records first (with the traceback that
    follows one), since the one that names the cause may be far from the end, then the end."""
    records = re.split(r"(?m)^(?=\[\w+ \| )", out)  # "[AutogradeApp | INFO] …" and the lines after it
    errors = "".join(record for record in records if re.match(r"\[\w+ \| ERROR\]", record))
    return f"{errors[:limit]}\n[…]\n{out[-limit:]}" if errors else out[-limit:]


def nbgrader(*args: str, cwd: pathlib.Path) -> None:
    nbgrader_in_parallel([cwd], *args)


# --- what is submitted ---------------------------------------------------------------------------

def special_submissions() -> dict[str, tuple[dict, set[str]]]:
    """Submissions to SPECIAL that probe faults and leaks: name -> (notebook, tasks expected to fail)."""
    src = source(SPECIAL)
    answers = answer_ids(src)
    first, second, third = answers[0], answers[1], answers[2]
    wrong = first_wrong(SPECIAL)
    name1, name2, name3 = (function_name("".join(cell(src, a)["source"])) for a in (first, second, third))
    tampered = with_cells(src, {first: wrong[first], grading_cell_of(first): "# I removed the tests.\npass\n"})
    correct1 = "".join(cell(src, first)["source"])
    return {
        "tampered": (tampered, {first}),
        "missing": (with_cells(src, {first: "# I did not get to this one.\n"}), {first}),
        "misnamed": (with_cells(src, {first: correct1.replace(f"def {name1}(", f"def {name1}_v2(")}), {first}),
        "syntax": (with_cells(src, {first: correct1.replace("return ", "return return ", 1)}), {first}),
        "process-exit": (with_cells(src, {second: f"import os\n\ndef {name2}(*args, **kwargs):\n    os._exit(3)\n"}),
                         {second}),
        "segfault": (with_cells(src, {third: f"import ctypes\n\ndef {name3}(*args, **kwargs):\n"
                                             f"    return ctypes.string_at(0)\n"}), {third}),
        "memory": (with_cells(src, {second: f"import torch\n\ndef {name2}(*args, **kwargs):\n    hoard = []\n"
                                            f"    while True:\n        hoard.append(torch.empty(2**28))\n"}), {second}),
        # the checker itself breaks (here: sabotaged by the submission) — only leaks are checked
        "broken-checker": (with_cells(src, {first: correct1 + "\n\nimport course_lib.grading._core as _core\n"
                                                   "_core._SELF_CHECK_TIMEOUTS = None\n"}), set(answers)),
        # the submission replaces the grader's own machinery: refused, not passed
        "patched-grader": (with_cells(src, {first: correct1 + "\n\nimport course_lib.grading._core as _core\n"
                                                   "_core.run_isolated = lambda *a, **k: None\n"}), set(answers)),
        "looping": (with_cells(src, {first: f"def {name1}(*args, **kwargs):\n    while True:\n        pass\n"}),
                    {first}),
    }


def submissions() -> dict[tuple[str, str], dict]:
    """(student, assignment) -> notebook to submit. One notebook per assignment."""
    subs = {}
    for assignment in ASSIGNMENTS:
        src = source(assignment)
        subs[("solution", assignment)] = src
        subs[("blank", assignment)] = load(notebooks(EXERCISES / "release" / assignment)[0])
        wrong = first_wrong(assignment)
        answers = answer_ids(src)
        for parity, student in ((0, "odd"), (1, "even")):
            chosen = {a: wrong[a] for i, a in enumerate(answers) if i % 2 == parity and a in wrong}
            subs[(student, assignment)] = with_cells(src, chosen)
    if SPECIAL in ASSIGNMENTS:
        for student, (nb, _) in special_submissions().items():
            subs[(student, SPECIAL)] = nb
    return subs


def expected_failures(student: str, assignment: str) -> set[str]:
    """The answer cells whose tests should score zero for this submission."""
    answers = answer_ids(source(assignment))
    if student == "solution":
        return set()
    if student == "blank":
        return set(answers)
    if student in ("odd", "even"):
        parity = 0 if student == "odd" else 1
        return {a for i, a in enumerate(answers) if i % 2 == parity}
    return special_submissions()[student][1]


# Grading is split into two course folders (two gradebooks) that nbgrader processes at the same time,
# one per core. Each assignment is graded four times (solution, blank, odd, even); SPECIAL also takes the
# ten submissions of special_submissions(), one of which loops for 15 s: it weighs as much as five
# assignments. Alternating assignments between the shards left SPECIAL's with 38 notebooks against
# 24, and the other core idle for the last ninety seconds; the heaviest first, each to the lighter
# shard, gives 34 and 32.
N_SHARDS = 2
WEIGHT = {SPECIAL: 4 + 10 + 4}  # notebooks to grade, the loop counted as four more; others 4


def _shards() -> dict[str, int]:
    load = [0] * N_SHARDS
    shards = {}
    for assignment in sorted(ALL_ASSIGNMENTS, key=lambda a: -WEIGHT.get(a, 4)):  # stable: then by name
        shards[assignment] = load.index(min(load))
        load[shards[assignment]] += WEIGHT.get(assignment, 4)
    return shards


SHARDS = _shards()


def shard_of(assignment: str) -> int:
    return SHARDS[assignment]


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
    """Submit every variant, autograde them all with the course's own configuration (the shards in
    parallel), and return the scores."""
    subs = submissions()
    for (student, assignment), nb in subs.items():
        (name,) = [p.name for p in notebooks(EXERCISES / "source" / assignment)]
        folder = course_of(courses, assignment) / "submitted" / student / assignment
        folder.mkdir(parents=True)
        (folder / name).write_text(json.dumps(nb, indent=1))
    before = {shard: _hashes(root / "submitted") for shard, root in courses.items()}
    nbgrader_in_parallel(list(courses.values()), "autograde", "*")
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
    nb = source(assignment)
    ids = []
    for c in nb["cells"]:
        m = c["metadata"].get("nbgrader")
        if m is None:
            continue
        keys = {"grade", "solution", "locked", "schema_version", "grade_id"} | ({"points"} if m.get("grade") else set())
        assert set(m) == keys, f"{assignment}: unexpected nbgrader keys {sorted(set(m) ^ keys)}"
        assert m["schema_version"] == 3
        ids.append(m["grade_id"])
        text = "".join(c["source"])
        if m["grade"]:
            assert m["locked"] and m["points"] > 0
            hidden = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", text, re.S)
            assert hidden, f"{m['grade_id']} has no hidden tests"
            for line in hidden.group(1).strip().splitlines():
                assert re.fullmatch(r"check_\w+\(\w+\)", line), f"hidden tests must be checker one-liners: {line!r}"
        if m["solution"]:
            assert "### BEGIN SOLUTION" in text and "### END SOLUTION" in text
    answers = answer_ids(nb)
    tests = [meta(c)["grade_id"] for c in nb["cells"] if meta(c).get("grade")]
    assert [grading_cell_of(a) for a in answers] == tests, "every answer cell <task>-answer needs one test cell <task>-tests"
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_task_has_a_known_mistake(assignment):
    assert set(first_wrong(assignment)) == set(answer_ids(source(assignment)))


def test_validator_passes_the_source_and_fails_a_wrong_answer(tmp_path):
    """`nbgrader validate` (which always exits 0) as an instructor would use it, via its Validator."""
    from nbgrader.validator import Validator

    (src,) = notebooks(EXERCISES / "source" / SPECIAL)
    assert Validator().validate(str(src)) == {}
    first = answer_ids(source(SPECIAL))[0]
    wrong = tmp_path / src.name
    wrong.write_text(json.dumps(with_cells(load(src), {first: first_wrong(SPECIAL)[first]})))
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


def _assert_only(graded, student: str, assignment: str) -> None:
    scores = graded["scores"][(student, assignment)]
    failing = {grading_cell_of(a) for a in expected_failures(student, assignment)}
    for grade_id, (score, max_score) in scores.items():
        expected = 0 if grade_id in failing else max_score
        assert score == expected, f"{student}: {grade_id} scored {score}/{max_score}, expected {expected}"


@pytest.mark.parametrize("assignment, student", [(a, s) for a in ASSIGNMENTS for s in ("odd", "even")])
def test_a_wrong_task_loses_exactly_its_points(graded, assignment, student):
    _assert_only(graded, student, assignment)


needs_special = pytest.mark.skipif(SPECIAL not in ASSIGNMENTS, reason="COURSE_ASSIGNMENTS excludes it")
FAULTS = ["tampered", "missing", "misnamed", "syntax", "process-exit", "segfault", "memory", "looping",
          "patched-grader"]


@needs_special
@pytest.mark.parametrize("student", FAULTS)
def test_a_fault_costs_only_its_task(graded, student):
    _assert_only(graded, student, SPECIAL)


def _cell_seconds(c: dict) -> float:
    timing = c["metadata"].get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda t: datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def _autograded(graded, student: str, assignment: str) -> dict:
    course = course_of(graded["courses"], assignment)
    (path,) = (course / "autograded" / student / assignment).glob("*.ipynb")
    return load(path)


@needs_special
def test_an_infinite_loop_costs_at_most_fifteen_seconds(graded):
    nb = _autograded(graded, "looping", SPECIAL)
    first = answer_ids(nb)[0]
    name = function_name("".join(cell(source(SPECIAL), first)["source"]))
    spent = sum(_cell_seconds(c) for c in nb["cells"]
                if meta(c).get("grade_id") == grading_cell_of(first)
                or ("@self_check" in "".join(c["source"]) and f"({name})" in "".join(c["source"])))
    assert 0 < spent <= LOOP_BUDGET, f"the loop cost {spent:.1f} s"
    outputs = " ".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "did not finish within" in outputs  # the visible check says so


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_grading_a_whole_assignment_is_fast(graded, assignment):
    """The cells of one submission run in well under 10 s (kernel start-up comes on top: measured and
    reported in exercises/README.md); the bound here leaves room for a loaded test machine."""
    nb = _autograded(graded, "solution", assignment)
    assert sum(_cell_seconds(c) for c in nb["cells"]) < 15.0


def test_grading_does_not_change_submissions(graded):
    assert graded["unchanged"]


# --- feedback -----------------------------------------------------------------------------------------

FEEDBACK_EXPECTS = {
    "odd": "Likely mistake:",
    "missing": "found no `",
    "misnamed": "found no `",
    "syntax": "SyntaxError",
    "process-exit": "ended the Python process",
    "segfault": "crashed the Python process",
    "memory": "memory",
    "looping": "did not finish within",
    "broken-checker": "could not check this task",
    "patched-grader": "grader's own code was changed",
}


@pytest.fixture(scope="session")
def feedback(graded) -> dict[str, str]:
    if SPECIAL not in ASSIGNMENTS:
        pytest.skip("COURSE_ASSIGNMENTS excludes the special assignment")
    course = course_of(graded["courses"], SPECIAL)
    nbgrader("generate_feedback", SPECIAL, cwd=course)
    pages = {}
    for student in FEEDBACK_EXPECTS:
        (html,) = (course / "feedback" / student / SPECIAL).glob("*.html")
        pages[student] = html.read_text()
    return pages


@needs_special
@pytest.mark.parametrize("student", list(FEEDBACK_EXPECTS))
def test_feedback_names_the_problem_and_leaks_nothing(feedback, student):
    import html as html_lib

    text = html_lib.unescape(re.sub(r"<[^>]+>", " ", feedback[student]))
    flat = " ".join(text.split())
    assert FEEDBACK_EXPECTS[student] in flat, flat[-3000:]
    assert "HIDDEN TESTS" not in text
    released = json.dumps(load(notebooks(EXERCISES / "release" / SPECIAL)[0]))  # what students see anyway
    for c in source(SPECIAL)["cells"]:
        hidden = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", "".join(c["source"]), re.S)
        if hidden and hidden.group(1).strip() not in released:
            assert hidden.group(1).strip() not in text, "a hidden test line is in the feedback"
    for leak in ("course_lib/grading", "site-packages", "/tmp/", str(ROOT), 'File "', "Traceback (most recent"):
        assert leak not in text, f"{leak!r} in the feedback of {student}"


def test_course_config():
    text = (EXERCISES / "nbgrader_config.py").read_text()
    assert re.search(r"c\.Execute\.timeout = 15\b", text)
    assert re.search(r"c\.Execute\.iopub_timeout = 30\b", text)
    assert "ClearHiddenTests" in text

"""Every reader notebook and every released exercise runs as Colab would open it.

book/_tools/colab_run.py (started in the background by conftest.py) creates a fresh virtual environment with
only torch, numpy, matplotlib and ipykernel, and executes each notebook there from an empty directory;
the notebook's own setup cell installs course_lib, from the local copy named by COURSE_LIB_SOURCE.

- A chapter's reader notebook (book/colab/) runs to the end. Anything beyond the four packages
  (transformers in chapter 9) must be guarded or installed by the chapter.
  Training runs stop after 40 steps (COURSE_LIB_MAX_STEPS): chapter 12's minutes of training and
  the numbers they produce are checked by the book build, its hidden asserts included; here, that
  the chapter runs in Colab's environment.
- A released exercise runs to the end and prints exactly one "not done yet" line per task (the
  ``@self_check`` decorator of course_lib.grading), with no traceback and no failed check.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest
import yaml

from conftest import wait_for_colab_run
from setup_cell import ROOT

TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
CHAPTERS = [c["file"] for part in TOC["parts"] if part["caption"] == "Chapters" for c in part["chapters"]]
READERS = [f"book/colab/{pathlib.Path(c).name}.ipynb" for c in CHAPTERS]
EXERCISES = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("exercises/release/*/*.ipynb"))
ALLOWED = {"torch", "numpy", "matplotlib", "ipykernel"}


@pytest.fixture(scope="module")
def run():
    results, _ = wait_for_colab_run()
    environment = results["environment"]
    assert environment and "error" not in environment, f"the Colab-like environment: {environment}"
    return results


def outputs_text(nb: dict) -> list[tuple[int, str]]:
    """(cell index, text) of every output: streams, results and errors (with their tracebacks)."""
    found = []
    for index, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []):
            if output["output_type"] == "stream":
                found.append((index, output["text"] if isinstance(output["text"], str) else "".join(output["text"])))
            elif output["output_type"] == "error":
                found.append((index, "\n".join([f"{output['ename']}: {output['evalue']}", *output["traceback"]])))
            else:
                text = output.get("data", {}).get("text/plain", "")
                found.append((index, text if isinstance(text, str) else "".join(text)))
    return found


def result_of(run: dict, notebook: str) -> tuple[dict, dict]:
    result = run["notebooks"].get(notebook)
    assert result is not None, f"{notebook} was not run"
    return result, json.loads(pathlib.Path(result["executed"]).read_text())


def describe(error: dict) -> str:
    return (f"stops at cell {error.get('cell')} ({error.get('first_line', '')!r}) with "
            f"{error.get('ename', error['type'])}: {error.get('evalue', error['message'][-500:])}")


def test_the_environment_is_colab_like(run):
    """Only the four packages (and what they need) before the setup cell adds course_lib."""
    packages = set(run["environment"]["packages"])
    assert ALLOWED <= packages
    for extra in ("transformers", "course-lib", "course_lib", "myst-nb", "jupyter-book", "nbgrader", "pytest"):
        assert extra not in packages, f"{extra} is in the Colab-like environment"


def test_the_setup_cell_installs_course_lib_from_the_given_source(run):
    first = next(iter(run["notebooks"]))
    result, nb = result_of(run, first)
    setup = "".join(text for index, text in outputs_text(nb) if index == 0)
    assert "course_lib ready on" in setup, f"{first}: the setup cell printed {setup!r}"
    assert "COURSE_LIB_SOURCE" in "".join(nb["cells"][0]["source"])


@pytest.mark.parametrize("notebook", READERS)
def test_reader_notebook_runs_to_the_end(run, notebook):
    result, nb = result_of(run, notebook)
    assert result["error"] is None, f"{notebook} {describe(result['error'])}"
    tracebacks = [index for index, text in outputs_text(nb) if "Traceback (most recent call last)" in text]
    assert tracebacks == [], f"{notebook} prints a traceback in cells {tracebacks}"


def tasks(nb: dict) -> int:
    """The graded tasks of an assignment: its autograded answer cells."""
    return sum(1 for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution")
               and c["cell_type"] == "code" and not c["metadata"]["nbgrader"].get("grade"))


@pytest.mark.parametrize("notebook", EXERCISES)
def test_released_exercise_says_not_done_yet_once_per_task(run, notebook):
    result, nb = result_of(run, notebook)
    assert result["error"] is None, f"{notebook} {describe(result['error'])}"
    lines = [line for _, text in outputs_text(nb) for line in text.splitlines()]
    not_done = [line for line in lines if re.match(r"^○ .*not done yet", line)]
    failed = [line for line in lines if line.startswith("✗")]
    expected = tasks(json.loads((ROOT / notebook).read_text()))
    assert expected > 0, f"{notebook} has no autograded answer cell"
    assert len(not_done) == expected, f"{notebook}: {len(not_done)} 'not done yet' lines for {expected} tasks: {not_done}"
    assert failed == [], f"{notebook}: an unanswered task reports a failure: {failed}"
    assert not any("Traceback" in line for line in lines), f"{notebook} prints a traceback"

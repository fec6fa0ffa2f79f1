"""Shared test set-up: the book build starts in the background as soon as collection shows a test needs
it, so the site is being built while the unit tests, nbval and the grading run (2 cores, one budget)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
_build: dict = {}


def start_book_build() -> None:
    """Start `jupyter-book build . -W --keep-going` once, its output going to a temporary log file."""
    if "process" in _build:
        return
    log = tempfile.NamedTemporaryFile("w+", prefix="book-build-", suffix=".log", delete=False)
    jb = pathlib.Path(sys.executable).parent / "jupyter-book"
    _build["log"] = log
    _build["process"] = subprocess.Popen([str(jb), "build", ".", "-W", "--keep-going"], cwd=ROOT,
                                         stdout=log, stderr=subprocess.STDOUT, text=True)


def wait_for_book_build(timeout: float = 1800) -> tuple[int, str]:
    """Wait for the build (starting it if needed); return its exit code and full log."""
    start_book_build()
    code = _build["process"].wait(timeout=timeout)
    _build["log"].seek(0)
    return code, _build["log"].read()


def pytest_collection_modifyitems(session, config, items):
    """Run the site tests last, and start the build they need now, so it overlaps everything else."""
    book_tests = [item for item in items if item.nodeid.startswith("tests/test_book.py")]
    if book_tests:
        items[:] = [item for item in items if item not in book_tests] + book_tests
        start_book_build()

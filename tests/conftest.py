"""Shared test set-up. The expensive work starts in the background as soon as collection shows that a
selected test needs it, so that it overlaps the unit, grading and exercise tests (2 cores, one budget):

- the book build, ``jupyter-book build . -W --keep-going`` (tests/test_book.py, test_site_browser.py);
  it executes every chapter in the development environment, hidden asserts included;
- the Colab-like run of the reader notebooks and released exercises, tests/colab_run.py, in a fresh
  virtual environment with torch, numpy, matplotlib and ipykernel only (tests/test_colab.py);
- Debian's chromium and chromium-driver, installed with apt-get when missing and possible
  (tests/test_site_browser.py).

The tests that wait for them run last: Colab, then the book, then the browser.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLAB_OUT = ROOT / "_build" / "colab"
CHROMIUM = {"chromium": "/usr/bin/chromium", "chromedriver": "/usr/bin/chromedriver"}
_jobs: dict = {}


def _start(name: str, command: list[str], **kwargs) -> None:
    if name in _jobs:
        return
    log = tempfile.NamedTemporaryFile("w+", prefix=f"{name}-", suffix=".log", delete=False)
    _jobs[name] = (subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
                                    **kwargs), log)


def _wait(name: str, timeout: float) -> tuple[int, str]:
    process, log = _jobs[name]
    code = process.wait(timeout=timeout)
    log.seek(0)
    return code, log.read()


# ------------------------------------------------------------------------------------------- book


def start_book_build() -> None:
    """Start `jupyter-book build . -W --keep-going` once, its output going to a temporary log file."""
    jb = pathlib.Path(sys.executable).parent / "jupyter-book"
    _start("book-build", [str(jb), "build", ".", "-W", "--keep-going"])


def wait_for_book_build(timeout: float = 1800) -> tuple[int, str]:
    """Wait for the build (starting it if needed); return its exit code and full log."""
    start_book_build()
    return _wait("book-build", timeout)


# ------------------------------------------------------------------------------------------ Colab


def start_colab_run(notebooks: list[str]) -> None:
    """Run these notebooks (repository paths) Colab-like, in the background (tests/colab_run.py)."""
    if "colab" not in _jobs:
        shutil.rmtree(COLAB_OUT, ignore_errors=True)
    _start("colab", [sys.executable, str(ROOT / "tests" / "colab_run.py"), str(COLAB_OUT), *notebooks])


def wait_for_colab_run(timeout: float = 3600) -> tuple[dict, str]:
    """The Colab-like run's results (see tests/colab_run.py) and its log."""
    if "colab" not in _jobs:
        raise RuntimeError("the Colab-like run was not started at collection")
    code, log = _wait("colab", timeout)
    report = COLAB_OUT / "results.json"
    if code != 0 or not report.is_file():
        raise RuntimeError(f"tests/colab_run.py exited with {code}:\n{log[-3000:]}")
    return json.loads(report.read_text()), log


# --------------------------------------------------------------------------------------- chromium


def start_chromium_install() -> None:
    """apt-get install chromium chromium-driver, when they are missing and we are root."""
    if all(pathlib.Path(p).exists() for p in CHROMIUM.values()):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    install = "apt-get install -y -q -o DPkg::Lock::Timeout=300 chromium chromium-driver"
    _start("chromium", ["sh", "-c", f"{install} || (apt-get update -q && {install})"],
           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def chromium_ready(timeout: float = 900) -> tuple[dict | None, str]:
    """(paths of chromium and chromedriver, "") when they are there, else (None, why not)."""
    start_chromium_install()
    log = ""
    if "chromium" in _jobs:
        code, log = _wait("chromium", timeout)
    missing = [p for p in CHROMIUM.values() if not pathlib.Path(p).exists()]
    if not missing:
        return dict(CHROMIUM), ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, (f"{', '.join(missing)} missing and cannot be installed here (needs root and "
                      f"apt-get): install Debian's chromium and chromium-driver to check the site")
    return None, f"apt-get install chromium chromium-driver failed:\n{log[-2000:]}"


# -------------------------------------------------------------------------------------- collection


def pytest_collection_modifyitems(session, config, items):
    """Start what the selected tests need now; run the tests that wait for it last."""
    def in_file(name):
        return [item for item in items if item.nodeid.startswith(f"tests/{name}")]

    colab, book, browser = in_file("test_colab.py"), in_file("test_book.py"), in_file("test_site_browser.py")
    waiting = colab + book + browser
    items[:] = [item for item in items if item not in waiting] + waiting
    if colab:
        notebooks = sorted({item.callspec.params["notebook"] for item in colab
                            if hasattr(item, "callspec") and "notebook" in item.callspec.params})
        start_colab_run(notebooks or [f"book/colab/{sorted((ROOT / 'book').glob('0*.ipynb'))[0].name}"])
    if book or browser:
        start_book_build()
    if browser:
        start_chromium_install()

"""Shared test set-up. The graded exercises (tests/test_exercises.py) run first, with the two cores to
themselves: nbgrader grades in two shards at once, one per core, and the tests time the grading
(exercise 12's cells took 15.0 s in CI beside the two jobs below, against 5.6-6.3 s after them). Then
the expensive work starts in the background, for the selected tests that need it, so that it overlaps
the unit tests (2 cores, one budget):

- the book build, ``jupyter-book build . -W --keep-going`` (tests/test_book.py, test_site_browser.py),
  after book/_tools/execute_book.py has executed the chapters into its cache two at a time; every chapter
  runs in the development environment, hidden asserts included, against the library as it is now
  (the script empties the cache when course_lib has changed since it was filled);
- the Colab-like run of the reader notebooks and released exercises, book/_tools/colab_run.py, in a fresh
  virtual environment with torch, numpy, matplotlib and ipykernel only (tests/test_colab.py);
- the start of one committed run of each experiment grid, trained again (tests/replay_grids.py,
  for tests/test_experiments.py's reproduction test);
- the dry run of benchmarks/gpu_check.py (tests/test_gpu_check.py), which executes a chapter, grades
  an exercise and trains twice: a minute and a half of the foreground before, which then ran alone
  on one core for its last three minutes while the other core idled;
- Debian's chromium and chromium-driver, installed with apt-get when missing and possible
  (tests/test_site_browser.py).

The tests that wait for a job run as soon as it has finished, between the others (pytest_runtestloop
below); those of a job still running when the others are done, when it finishes.

Every torch process of the suite (this one, the nbgrader kernels, the book build's kernels, the
Colab-like run) uses one thread: the jobs above share two cores, and torch's worker threads spin
while they wait for a core, so that two-thread processes sharing the cores ran small tests up to
thirty times slower (a 1-second sampling test took 39 s). (Two threads that sleep instead of
spinning, OMP_WAIT_POLICY=PASSIVE, for the book build alone did not shorten the run: the build took
CPU from the grading, whose timing tests then failed, and finished 10 s sooner.)
"""

from __future__ import annotations

import compileall
import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import typing

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_tools"))  # the build tools the tests check (execute_book, …)
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"  # inherited by every job
import pytest  # noqa: E402
import torch  # noqa: E402  (after the variables, which torch reads when it loads)

torch.set_num_threads(1)
# Where Python is told never to write bytecode (PYTHONDONTWRITEBYTECODE, which this course's machines
# set), every kernel and command line of the run would compile course_lib again when it imports it
# (a few tenths of a second of CPU each); compiled once here, they read it (anything edited since is
# compiled again in memory, as usual).
compileall.compile_dir(ROOT / "course_lib", quiet=1)
COLAB_OUT = ROOT / "_build" / "colab"
CHROMIUM = {"chromium": "/usr/bin/chromium", "chromedriver": "/usr/bin/chromedriver"}
GPU_CHECK = ROOT / "benchmarks" / "gpu_check.py"


@dataclasses.dataclass
class _Job:
    process: subprocess.Popen
    log: typing.IO  # its standard output, and its standard error unless kept apart
    err: typing.IO | None = None  # its standard error, where kept apart


_jobs: dict[str, _Job] = {}
# Who goes first. The foreground is one process that runs the tests in turn: at equal priority it got
# a third of a core beside the jobs and then ran on alone for its last three minutes while the other
# core idled, so it goes first and keeps one core. The book build comes next: it is the longest job
# (chapter 12 trains for minutes) and its tests (the site, the browser) are the longest that wait for
# a job, so it runs at niceness 0 and the other jobs (the Colab-like run, the replays, the GPU check's
# dry run) at 10, taking what is left. Where the kernel groups processes by session for scheduling
# (autogroup, Linux's default on desktops and on this course's machines), a niceness counts only
# inside its session: each job runs in a session of its own, given its niceness (a job's kernels
# start sessions of their own: colab_run.py passes its niceness on to them), and the foreground's
# session is raised (which needs root; elsewhere it stays as it is). Without autogroup, the
# processes' niceness does it.
BACKGROUND_NICENESS = 10
BOOK_NICENESS = 0
FOREGROUND_AUTOGROUP_NICENESS = -10
_AUTOGROUP = pathlib.Path("/proc/self/autogroup")  # e.g. "/autogroup-2675 nice 0"
_autogroup_before: list = []  # the session's niceness, given back when the tests end


def _foreground_first() -> None:
    """Raise this session's autogroup niceness, once, when the first background job starts (so
    that pytest runs without background jobs, like make test-fast's two, leave it alone)."""
    if _autogroup_before:
        return
    try:
        before = int(_AUTOGROUP.read_text().split()[-1])
        _AUTOGROUP.write_text(str(FOREGROUND_AUTOGROUP_NICENESS))
        _autogroup_before.append(before)
    except (OSError, ValueError, IndexError):  # no autogroup, or not root: the jobs' niceness alone
        pass


def _start(name: str, command: list[str], niceness: int = BACKGROUND_NICENESS, stderr_apart: bool = False,
           **kwargs) -> None:
    if name in _jobs:
        return
    _foreground_first()

    def temporary(suffix):
        return tempfile.NamedTemporaryFile("w+", prefix=f"{name}-", suffix=suffix, delete=False)

    log, err = temporary(".log"), temporary(".err") if stderr_apart else None
    # its own session and process group, so that it can be stopped with its children (kernels) if
    # pytest stops early, and so that its niceness counts where the kernel schedules by session
    options = dict(cwd=ROOT, stdout=log, stderr=err or subprocess.STDOUT, text=True, start_new_session=True,
                   preexec_fn=lambda: os.nice(niceness))
    process = subprocess.Popen(command, **{**options, **kwargs})
    try:
        pathlib.Path(f"/proc/{process.pid}/autogroup").write_text(str(niceness))
    except OSError:  # no autogroup: the niceness alone
        pass
    _jobs[name] = _Job(process, log, err)


def _wait(name: str, timeout: float) -> subprocess.CompletedProcess:
    """The job's exit status and output (its standard error apart, or None)."""
    job = _jobs[name]
    code = job.process.wait(timeout=timeout)
    for file in (job.log, job.err):
        if file is not None:
            file.seek(0)
    return subprocess.CompletedProcess(job.process.args, code, job.log.read(),
                                       None if job.err is None else job.err.read())


def _wait_for_report(name: str, timeout: float, report: pathlib.Path) -> subprocess.CompletedProcess:
    """Wait for a job that writes ``report``; raise, with the end of its log, if it failed or did
    not write it."""
    done = _wait(name, timeout)
    if done.returncode != 0 or not report.is_file():
        script = pathlib.Path(done.args[1]).relative_to(ROOT).as_posix()  # args: python, script, …
        raise RuntimeError(f"{script} exited with {done.returncode}:\n{done.stdout[-3000:]}")
    return done


# ------------------------------------------------------------------------------------------- book


def start_book_build() -> None:
    """Start the book build once, its output going to a temporary log file: the chapters that are not
    in the execution cache, two kernels at a time (book/_tools/execute_book.py), then `jupyter-book build .
    -W --keep-going`, which finds them cached (and executes again, to report it, any that failed)."""
    bin_dir = pathlib.Path(sys.executable).parent
    execute = f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'book' / '_tools' / 'execute_book.py'))}"
    build = f"exec {shlex.quote(str(bin_dir / 'jupyter-book'))} build . -W --keep-going"
    _start("book-build", ["sh", "-c", f"{execute}; {build}"], niceness=BOOK_NICENESS)


def wait_for_book_build(timeout: float = 1800) -> tuple[int, str]:
    """Wait for the build (starting it if needed); return its exit code and full log."""
    start_book_build()
    done = _wait("book-build", timeout)
    return done.returncode, done.stdout


# ------------------------------------------------------------------------------------------ Colab


def start_colab_run(notebooks: list[str]) -> None:
    """Run these notebooks (repository paths) Colab-like, in the background (book/_tools/colab_run.py)."""
    if "colab" not in _jobs:
        shutil.rmtree(COLAB_OUT, ignore_errors=True)
    _start("colab", [sys.executable, str(ROOT / "book" / "_tools" / "colab_run.py"), str(COLAB_OUT), *notebooks])


def wait_for_colab_run(timeout: float = 3600) -> tuple[dict, str]:
    """The Colab-like run's results (see book/_tools/colab_run.py) and its log."""
    if "colab" not in _jobs:
        raise RuntimeError("the Colab-like run was not started at collection")
    report = COLAB_OUT / "results.json"
    done = _wait_for_report("colab", timeout, report)
    return json.loads(report.read_text()), done.stdout


# ------------------------------------------------------------------------------ committed grids

REPLAYS_OUT = ROOT / "_build" / "replays.json"
REPRODUCES = "tests/test_experiments.py::test_a_committed_grid_reproduces"


def start_replays(names: list[str]) -> None:
    """Re-run the start of one committed run of each grid in ``names``, in the background
    (tests/replay_grids.py): minutes of training that share the cores with the book build instead
    of lengthening the tests that run in this process."""
    if "replays" not in _jobs:
        REPLAYS_OUT.unlink(missing_ok=True)
    _start("replays", [sys.executable, str(ROOT / "tests" / "replay_grids.py"), str(REPLAYS_OUT), *names])


def wait_for_replays(timeout: float = 1800) -> dict:
    """The replayed runs, per grid (see tests/replay_grids.py)."""
    if "replays" not in _jobs:
        raise RuntimeError("the replays of the committed grids were not started at collection")
    _wait_for_report("replays", timeout, REPLAYS_OUT)
    return json.loads(REPLAYS_OUT.read_text())


# -------------------------------------------------------------------------- the GPU check's dry run

GPU_CHECK_OUT = ROOT / "_build" / "gpu_check_dry_run"


def start_gpu_check_dry_run() -> None:
    """``benchmarks/gpu_check.py --dry-run --out _build/gpu_check_dry_run``, in the background, its
    standard error kept apart from its standard output."""
    if "gpu-check" in _jobs:
        return
    shutil.rmtree(GPU_CHECK_OUT, ignore_errors=True)
    GPU_CHECK_OUT.mkdir(parents=True)
    _start("gpu-check", [sys.executable, str(GPU_CHECK), "--dry-run", "--out", str(GPU_CHECK_OUT)],
           stderr_apart=True)


def wait_for_gpu_check_dry_run(timeout: float = 600) -> tuple[subprocess.CompletedProcess, pathlib.Path]:
    """The dry run's outcome (exit status, standard output and error) and its output folder."""
    if "gpu-check" not in _jobs:
        raise RuntimeError("the GPU check's dry run was not started at collection")
    return _wait("gpu-check", timeout), GPU_CHECK_OUT


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
        log = _wait("chromium", timeout).stdout
    missing = [p for p in CHROMIUM.values() if not pathlib.Path(p).exists()]
    if not missing:
        return dict(CHROMIUM), ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, (f"{', '.join(missing)} missing and cannot be installed here (needs root and "
                      f"apt-get): install Debian's chromium and chromium-driver to check the site")
    return None, f"apt-get install chromium chromium-driver failed:\n{log[-2000:]}"


# -------------------------------------------------------------------------------------- collection


GRADING = "test_exercises.py"  # run first, alone on the cores
_after_grading: list = []  # the background jobs to start once the exercises are graded
_waiting_for: dict = {}  # node id -> the background job the test waits for
_begun: set = set()  # the jobs whose tests have begun to run
WAIT = object()  # what _next_item gives where the next test would have to wait for a job


def _start_after_grading() -> None:
    while _after_grading:
        _after_grading.pop(0)()


def pytest_collection_modifyitems(session, config, items):
    """Order the tests: the graded exercises, the others, then those that wait for background work
    (the order --collect-only shows; pytest_runtestloop runs each job's tests once it has finished).
    Start that work now if no exercise is graded, else at the first test after them (chromium's
    install, mostly downloading and unpacking, at once)."""
    def in_file(name):
        return [item for item in items if item.nodeid.startswith(f"tests/{name}")]

    grading = in_file(GRADING)
    colab, book, browser = in_file("test_colab.py"), in_file("test_book.py"), in_file("test_site_browser.py")
    replayed = [item for item in items if item.nodeid.startswith(REPRODUCES)]
    dry = [item for item in items if "dry_run" in getattr(item, "fixturenames", ())
           and item.nodeid.startswith("tests/test_gpu_check.py")]
    waiting = replayed + dry + colab + book + browser
    items[:] = grading + [item for item in items if item not in grading and item not in waiting] + waiting
    for job, group in (("replays", replayed), ("gpu-check", dry), ("colab", colab), ("book-build", book + browser)):
        _waiting_for.update((item.nodeid, job) for item in group)
    if colab:
        notebooks = sorted({item.callspec.params["notebook"] for item in colab
                            if hasattr(item, "callspec") and "notebook" in item.callspec.params})
        _after_grading.append(lambda: start_colab_run(
            notebooks or [f"book/colab/{sorted((ROOT / 'book').glob('0*.ipynb'))[0].name}"]))
    if book or browser:
        _after_grading.append(start_book_build)
    if replayed:
        names = [item.callspec.params["name"] for item in replayed]
        _after_grading.append(lambda: start_replays(names))
    if dry:
        _after_grading.append(start_gpu_check_dry_run)
    if browser:
        start_chromium_install()
    if not grading:
        _start_after_grading()


def pytest_runtest_setup(item):
    if _after_grading and not item.nodeid.startswith(f"tests/{GRADING}"):
        _start_after_grading()


def _finished(job: str) -> bool:
    """Whether the tests waiting for ``job`` can run without waiting: it has ended, or it was never
    started although every start is done (they then start it, or fail as they should)."""
    if job in _jobs:
        return _jobs[job].process.poll() is not None
    return not _after_grading


def _next_item(ordinary: list, waiting: dict, wait: bool):
    """The test to run next: the rest of a job's tests once one of them has run, the tests of a
    finished background job as soon as it has finished, else the next ordinary test. With none of
    these left: those of whichever job finishes first, if ``wait``, else ``WAIT``; None at the end."""
    while True:
        ready = [job for job, group in waiting.items() if group and (job in _begun or _finished(job))]
        ready.sort(key=lambda job: job not in _begun)  # a job whose tests have begun goes on
        if ready:
            _begun.add(ready[0])
            return waiting[ready[0]].pop(0)
        if ordinary:
            return ordinary.pop(0)
        if not any(waiting.values()):
            return None
        if not wait:
            return WAIT
        time.sleep(0.5)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """pytest's own loop (``_pytest.main.pytest_runtestloop``), except for the order of the tests
    that wait for background work: each job's tests run as soon as it has finished, between two
    ordinary tests, so that the foreground's last minutes overlap the jobs still running instead of
    following them (collected in the order above, the book's and the browser's tests ran after every
    job had finished, with one core idle). Each job's tests keep their order. pytest needs the next
    test before the current one runs, to tear down what it does not share: where that would mean
    waiting for a job, it is given none, and everything is torn down (and set up again when needed)."""
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
    if session.config.option.collectonly:
        return True
    ordinary, waiting = [], {}
    for item in session.items:
        job = _waiting_for.get(item.nodeid)
        (ordinary if job is None else waiting.setdefault(job, [])).append(item)
    item = _next_item(ordinary, waiting, wait=True)
    while item is not None:
        following = _next_item(ordinary, waiting, wait=False)
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=None if following is WAIT else following)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        item = _next_item(ordinary, waiting, wait=True) if following is WAIT else following
    return True


def pytest_sessionfinish(session, exitstatus):
    """Give the session its scheduling niceness back. Stop background work nobody waited for (an
    interrupted run, a failed collection, -x), except an apt-get install, which is left to finish
    rather than leave dpkg half-configured."""
    if _autogroup_before:  # the shell that ran pytest shares the session
        try:
            _AUTOGROUP.write_text(str(_autogroup_before.pop()))
        except OSError:
            pass
    for name, job in _jobs.items():
        process = job.process
        if process.poll() is None and name != "chromium":
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)

"""Run reader notebooks and released exercises as Colab would open them.

    python book/_tools/colab_run.py OUTDIR NOTEBOOK [NOTEBOOK ...]   # paths relative to the repository

A fresh virtual environment gets only what Colab is sure to have for this course: torch (installed
first, ``TORCH_SPEC``, default ``torch==2.13.0``: an open requirement would pull a CUDA build), numpy,
matplotlib and ipykernel. It is registered as the kernel "colab-like" in a private JUPYTER_PATH, and
every notebook runs in an empty working directory with nbclient. course_lib is *not* installed
beforehand: the notebook's own setup cell installs it, from ``COURSE_LIB_SOURCE`` (a copy of this
checkout's package) instead of the repository URL. torch runs on one thread, so that the run shares
the two cores with the book build that ``make test`` runs at the same time. The first notebook runs
alone (its setup cell installs course_lib); the others run two at a time (``WORKERS``), each in a
kernel and an empty working directory of its own, the largest first, so that the run can use both
cores once the jobs beside it are done.
Training runs stop after 40 steps (``COURSE_LIB_MAX_STEPS``): chapter 12 trains for minutes, and
its numbers are checked by the book build; here, only that it runs.

Writes OUTDIR/results.json (updated after every notebook): the environment's packages and timings,
and per notebook its seconds, the executed copy (OUTDIR/executed/...) and the first error, if any.
The virtual environment is deleted at the end. tests/test_colab.py reads the results.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNEL = "colab-like"
CELL_TIMEOUT = 600  # seconds; a chapter's whole budget is one minute (four for the capstone)
WORKERS = 2  # notebooks at a time after the first: one per core


def _pip(python: pathlib.Path, *args: str) -> None:
    # --no-compile: Python compiles what the notebooks import, not all of torch (half the install's CPU)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check",
                    *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _install(python: pathlib.Path, *packages: str) -> None:
    """With the uv of the environment running this (make install puts it there), which takes the
    packages from the cache it filled; with pip where there is none or it fails. uv does not
    byte-compile by default, like pip --no-compile."""
    uv = pathlib.Path(sys.executable).with_name("uv")
    if uv.is_file():
        done = subprocess.run([str(uv), "pip", "install", "--python", str(python), "--quiet", *packages],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if done.returncode == 0:
            return
    _pip(python, *packages)


def create_environment(base: pathlib.Path) -> tuple[pathlib.Path, dict]:
    """The virtual environment, its kernel and a copy of the package; returns (python, facts)."""
    started = time.perf_counter()
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    _pip(python, os.environ.get("TORCH_SPEC", "torch==2.13.0"))
    _install(python, "numpy", "matplotlib", "ipykernel")  # torch first, with pip: it knows where torch is
    installed = time.perf_counter() - started
    subprocess.run([str(python), "-m", "ipykernel", "install", "--prefix", str(base / "jupyter"),
                    "--name", KERNEL, "--display-name", "Colab-like"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    source = base / "course_lib_source"  # what pip would fetch from the repository: the package
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "course_lib", source / "course_lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    packages = subprocess.run([str(python), "-m", "pip", "list", "--format=json",
                               "--disable-pip-version-check"], check=True, capture_output=True, text=True)
    facts = {"install_seconds": round(installed, 1),
             "packages": sorted(p["name"].lower() for p in json.loads(packages.stdout)),
             "course_lib_source": str(source), "venv": str(venv)}
    return python, facts


def kernel_keeps_our_niceness(client) -> None:
    """Give the kernel's session this run's niceness. jupyter_client starts every kernel in a session
    of its own, and where Linux schedules by session (autogroup) a niceness counts only inside its
    session: without this, ``nice python colab_run.py`` (as the test suite runs it, beside the book
    build) would lower this process but not the kernels that do the work."""
    niceness = os.nice(0)
    if niceness == 0:
        return
    try:
        pathlib.Path(f"/proc/{client.km.provisioner.process.pid}/autogroup").write_text(str(niceness))
    except (OSError, AttributeError):  # no autogroup (not Linux, or turned off), or no process
        pass


def run_notebook(path: pathlib.Path, workdir: pathlib.Path, executed: pathlib.Path) -> dict:
    """Execute one notebook top to bottom in the colab-like kernel; stop at the first error."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT, allow_errors=False,
                            resources={"metadata": {"path": str(workdir)}})
    client.on_notebook_start = lambda notebook: kernel_keeps_our_niceness(client)
    started = time.perf_counter()
    error = None
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
        error = {"type": type(err).__name__, "message": str(err)[-3000:]}
    for index, cell in enumerate(nb.cells):  # the failing cell, with its first line
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and error is not None:
                error.update(cell=index, first_line="".join(cell.source).splitlines()[0][:100],
                             ename=output["ename"], evalue=output["evalue"][:1000])
                break
    executed.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, executed)
    return {"seconds": round(time.perf_counter() - started, 1), "error": error,
            "executed": str(executed)}


def main(outdir: pathlib.Path, notebooks: list[str]) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    results: dict = {"environment": None, "notebooks": {}, "finished": False}
    report = outdir / "results.json"

    lock = threading.Lock()

    def save() -> None:
        with lock:
            report.write_text(json.dumps(results, indent=1))

    base = pathlib.Path(tempfile.mkdtemp(prefix="colab-like-"))
    try:
        try:
            python, facts = create_environment(base)
        except subprocess.CalledProcessError as err:
            results["environment"] = {"error": f"{err.cmd}: {err.stderr}"[-3000:]}
            return
        results["environment"] = facts
        save()
        os.environ.update({
            "JUPYTER_PATH": str(base / "jupyter" / "share" / "jupyter"),
            "COURSE_LIB_SOURCE": facts["course_lib_source"],
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            # chapter 12 trains for minutes in the book build, where its numbers are checked; here
            # only that it runs in a Colab-like environment: every run stops after 40 steps
            # (course_lib.training.smoke_capped)
            "COURSE_LIB_MAX_STEPS": "40",
            "PYTHONNOUSERSITE": "1",
        })
        # the packages were installed without byte-compiling (--no-compile): the first kernel compiles
        # what it imports and the others reuse it, as on Colab, unless Python is told never to write
        # bytecode (CI machines may set this), which would make every kernel compile torch again
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ.pop("PYTHONPATH", None)

        def run(rel: str) -> None:
            workdir = base / "content" / rel.replace("/", "_")  # like Colab's /content: empty
            workdir.mkdir(parents=True)
            result = run_notebook(ROOT / rel, workdir, outdir / "executed" / rel)
            with lock:
                results["notebooks"][rel] = result
            save()

        run(notebooks[0])  # alone: its setup cell installs course_lib for all of them
        # the rest two at a time, the largest first (a notebook's size is a rough guide to its time)
        rest = sorted(notebooks[1:], key=lambda rel: -(ROOT / rel).stat().st_size)
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(run, rest))  # list(): raises here what a worker raised
        results["finished"] = True
    finally:
        save()
        shutil.rmtree(base, ignore_errors=True)


def _stop(signum, frame):
    raise SystemExit(f"stopped by signal {signum}")  # runs main's cleanup: the environment is deleted


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    signal.signal(signal.SIGTERM, _stop)
    main(pathlib.Path(sys.argv[1]), sys.argv[2:])

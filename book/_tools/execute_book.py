"""Execute the book's chapters into the build's execution cache, several at a time.

    python book/_tools/execute_book.py [--jobs N]      # then: jupyter-book build . -W --keep-going

`jupyter-book build` (``execute_notebooks: cache``) executes each chapter that is not in its cache,
_build/.jupyter_cache, one after the other, on one kernel. This script runs those chapters beforehand
and stores them in the same cache exactly as myst-nb would: the same notebook read, the same hash,
``single_nb_execution`` in the chapter's folder with the timeout and ``allow_errors`` of _config.yml.
The build then finds every chapter cached and only renders the site. ``make book`` and the test
suite's book build (tests/conftest.py) both run it first. The cache is keyed on the notebooks only, so
it is emptied first when course_lib has changed since it was filled: every chapter then runs against
the library as it is now.

The short chapters run N kernels at a time (default: one per core) on one torch thread each. The
longest (chapter 12, which trains for minutes) and the chapters that time something (TIMING_CHAPTERS:
their timings and the rankings they assert need the cores to themselves) run after them, one at a
time, each alone with every core. When the caller caps the threads (OMP_NUM_THREADS; the test suite
sets one, since its other jobs share the cores), all run N at a time, the longest first. A kernel gets
at most cores / N threads: torch's worker threads spin while they wait for a core, so more threads
than cores slow every kernel down.

A chapter that fails is not cached; the build executes it again and reports the error under -W, so
this script's exit status is 0 unless it could not run at all.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import hashlib
import os
import pathlib
import shutil
import sys
import tempfile
import time

import nbformat
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = ROOT / "_build" / ".jupyter_cache"  # jupyter-book's execution cache (myst-nb's nb_execution_cache_path)
# The chapter that takes longest (it trains for minutes): first in a fresh build, with no record.
LONGEST = "12_training.ipynb"
# The chapters that time something (grep book/*.ipynb for perf_counter, timeit, Timer): each runs
# alone, after the others, so that nothing else competes for the cores while it measures.
TIMING_CHAPTERS = frozenset({
    "02_embeddings_and_positions.ipynb",  # table lookup against one-hot product
    "05_normalization.ipynb",  # LayerNorm against RMSNorm, fused and explicit
    "07_decoder_block.ipynb",  # the forward walkthrough's time
    "08_counting.ipynb",  # a matrix product's peak and a training step (MFU)
    "09_language_model.ipynb",  # generation time
    "10_kv_cache.ipynb",  # a step with and without the cache
    "11_memory_in_training.ipynb",  # what checkpointing costs in time
    "12_training.ipynb",  # training and evaluation time
    "13_speedrun.ipynb",  # the speedrun preset trained live
})


def course_lib_digest() -> str:
    """SHA-256 of course_lib's files: what the chapters' executed outputs depend on besides themselves."""
    files = sorted(p for p in (ROOT / "course_lib").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def forget_executions_of_an_older_course_lib() -> bool:
    """Empty the execution cache and Sphinx's saved environment (which would skip unchanged notebooks
    altogether) if course_lib changed since the cache was filled: the cache is keyed on the notebooks
    only. Returns whether there were executions to forget."""
    stamp = CACHE.parent / ".course_lib.sha256"
    digest = course_lib_digest()
    if stamp.is_file() and stamp.read_text() == digest:
        return False
    forgotten = CACHE.exists()
    for cache in (CACHE, CACHE.parent / ".doctrees"):
        shutil.rmtree(cache, ignore_errors=True)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)
    return forgotten


def executed_chapters() -> list[pathlib.Path]:
    """The notebooks of the table of contents that the build executes (not its execute exclude_patterns)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    excluded = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"].get("exclude_patterns", [])
    files = [entry["file"] for part in toc["parts"] for entry in part["chapters"]]
    return [ROOT / f"{name}.ipynb" for name in files if (ROOT / f"{name}.ipynb").is_file()
            and not any(fnmatch.fnmatch(f"{name}.ipynb", pattern) for pattern in excluded)]


def _execute(path: str, threads: int, timeout: int, allow_errors: bool) -> tuple[str, float, str | None]:
    """In a worker process: execute one notebook as myst-nb does; (executed notebook, seconds, error)."""
    from jupyter_cache.executors.utils import single_nb_execution

    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)  # the kernel inherits them
    from traitlets.config import Config

    nb = nbformat.read(path, as_version=4)
    kernels = Config()
    # The kernel talks to this process over Unix sockets, not TCP: nothing leaves the machine, and
    # ipykernel has no reason to warn that its TCP traffic is unencrypted (it does, once per kernel).
    kernels.KernelManager.transport = "ipc"
    # each kernel its own socket files (the path prefix is the "ip" of the ipc transport): kernels
    # started side by side in one folder would otherwise pick the same names
    kernels.KernelManager.ip = os.path.join(tempfile.mkdtemp(prefix="kernel-"), "ipc")
    result = single_nb_execution(nb, cwd=str(pathlib.Path(path).parent), timeout=timeout,
                                 allow_errors=allow_errors, meta_override=True, config=kernels)
    error = None if result.err is None else f"{type(result.err).__name__}: {str(result.err)[-1500:]}"
    return nbformat.writes(nb), result.time, error


def longest_first(todo: list[pathlib.Path], chapters: list[pathlib.Path],
                  last_run: dict[str, float]) -> list[pathlib.Path]:
    """`todo` by the seconds of each chapter's last recorded run (`last_run`, by file name), longest
    first. Chapters with no record come before them: the LONGEST (the capstone, which trains for
    minutes) first, then the others from the end of the table of contents (`chapters`) back, the
    later chapters being the longer ones."""
    return sorted(todo, key=lambda p: (p.name in last_run, p.name != LONGEST,
                                       -last_run.get(p.name, chapters.index(p))))


def plan(todo: list[pathlib.Path], jobs: int, cores: int, thread_cap: int | None) -> list[tuple[list, int, int]]:
    """Phases of (chapters, kernels at a time, torch threads per kernel) for `todo`, longest first.

    With the threads capped (the test suite: one, its other jobs share the cores), one phase, the
    longest chapter started first. Otherwise the short chapters run first, `jobs` at a time on one
    thread each; then the longest and the TIMING_CHAPTERS run one at a time, each alone with every
    core: the long chapter takes the time it takes a reader, and no timing shares the cores."""
    def phase(chapters):
        kernels = min(jobs, len(chapters))
        threads = max(1, cores // kernels)
        return chapters, kernels, threads if thread_cap is None else max(1, min(threads, thread_cap))

    if thread_cap is not None or len(todo) == 1 or cores == 1:
        return [phase(todo)]
    alone = [p for i, p in enumerate(todo) if i == 0 or pathlib.Path(p).name in TIMING_CHAPTERS]
    together = [p for p in todo if p not in alone]
    return ([phase(together)] if together else []) + [(alone, 1, cores)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="kernels at a time (default: one per core)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs ({args.jobs}) must be at least 1")

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    if forget_executions_of_an_older_course_lib():
        print("course_lib changed since the chapters were cached: every chapter runs again")
    execute = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]
    cache = get_cache(str(CACHE))
    chapters = executed_chapters()
    todo = []
    for path in chapters:
        try:
            cache.match_cache_notebook(nbformat.read(path, as_version=4))
        except KeyError:
            todo.append(path)
    if not todo:
        print("every chapter is in the execution cache")
        return 0

    last_run = {pathlib.Path(r.uri).name: r.data.get("execution_seconds", 0.0) for r in
                sorted(cache.list_cache_records(), key=lambda r: r.created)}
    todo = longest_first(todo, chapters, last_run)
    cap = os.environ.get("OMP_NUM_THREADS", "")  # a limit set by the caller (the test suite: 1)
    phases = plan(todo, args.jobs, os.cpu_count() or 1, int(cap) if cap.isdigit() else None)
    started = time.perf_counter()
    failed = []
    for chapters_now, kernels, threads in phases:
        print(f"executing {len(chapters_now)} chapter(s), {kernels} at a time, "
              f"{threads} torch thread(s) each", flush=True)
        with concurrent.futures.ProcessPoolExecutor(max_workers=kernels) as pool:
            running = {pool.submit(_execute, str(path), threads, execute.get("timeout", 30),
                                   execute.get("allow_errors", False)): path for path in chapters_now}
            for future in concurrent.futures.as_completed(running):
                name = running[future].relative_to(ROOT).as_posix()
                try:
                    executed, seconds, error = future.result()
                except Exception as err:  # the kernel did not start or died: the build reports it
                    executed, seconds, error = "", 0.0, f"{type(err).__name__}: {err}"
                if error is not None:
                    failed.append(name)
                    print(f"  {name} failed after {seconds:.1f} s (the build will report it): {error}",
                          flush=True)
                    continue
                cache.cache_notebook_bundle(CacheBundleIn(nbformat.reads(executed, as_version=4),
                                                          str(running[future]),
                                                          data={"execution_seconds": seconds}),
                                            check_validity=False, overwrite=True)
                print(f"  {name} executed in {seconds:.1f} s", flush=True)
    print(f"done in {time.perf_counter() - started:.1f} s"
          + (f"; not cached: {', '.join(failed)}" if failed else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

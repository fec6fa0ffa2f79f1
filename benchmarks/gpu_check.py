"""The GPU check (issue 29): the whole course on one CUDA GPU, in one command, within a time budget.

    python benchmarks/gpu_check.py                  # on a GPU machine; at most 8 minutes on one H100
    python benchmarks/gpu_check.py --out runs/gpu_check --budget-minutes 8
    python benchmarks/gpu_check.py --dry-run        # the same plumbing on a CPU, about a minute
    python benchmarks/gpu_check.py --only preset,recipe   # some steps alone: a partial check

Every process it starts imports this checkout's course_lib (first on their PYTHONPATH), installed or
not; benchmarks/gpu_check_wheels.py gathers the other packages it runs for a GPU machine that cannot
reach PyPI.

What it checks, with CUDA visible to every process it starts (nothing hides the GPU):

1. ``chapters`` — every chapter, ``book/[0-9][0-9]_*.ipynb``, executed top to bottom by nbconvert's
   executor (nbclient, as the book build runs them: hidden asserts included, an error fails the
   chapter), several kernels at a time, the executed copies written under OUT/chapters/. Each
   chapter's setup cell prints the device it picked; a chapter that did not pick cuda fails.
2. ``exercises`` — every exercise's source notebook (the solutions) autograded by nbgrader as
   tests/test_exercises.py does it: copies of exercises/source/ in course folders under
   OUT/exercises/ (shards graded side by side), ``nbgrader generate_assignment``, the source
   submitted as student ``solution``, ``nbgrader autograde``, the scores read from the gradebook.
   Anything short of full marks fails, as does a kernel that did not pick cuda.
3. ``preset`` — ``python -m course_lib.train --preset shakespeare-gpu --precision bfloat16
   --device cuda``: its final validation loss over the whole split (windows of its context, 256),
   its training throughput (tokens per second of training, evaluations left out) and its wall time,
   the whole process from start to exit.
4. ``recipe`` — ``python benchmarks/nanogpt_recipe.py --shape gpu --device cuda --full-eval``:
   nanoGPT's GPU run of Tiny Shakespeare (6 × 384, context 256, batch 64, 5,000 steps), its whole-
   split loss in the same windows of 256, and its wall time, on the same GPU.
5. ``benchmark`` — ``python benchmarks/benchmark.py --device cuda``: the block's forward pass,
   greedy decoding with and without the KV cache, and a training step, each against Hugging Face.

The targets (issue 29, point 6), judged from steps 3 and 4: the ``shakespeare-gpu`` preset reaches
at most 1.45 nats per character on the whole validation split (nanoGPT's best at this shape is
1.47), in less wall time than the recipe at that shape on the same GPU. benchmark.py's own targets
were set on a CPU: the report lists them, met or missed, without judging the check by them.

The plan for 8 minutes on one H100 with 16 cores. Nothing below has been timed on an H100 yet: the
expected times are estimates, and the limits are shares of ``--budget-minutes`` (8 by default) that
add up to 96 % of it, the rest left for start-up and the report. A step still running at its limit
is stopped (its processes and theirs killed) and fails; the next one starts.

    stage  step        runs beside          expected   limit (share of the budget)
    1      chapters    exercises            ~2 min     31 %  (149 s)
    1      exercises   chapters             ~1.5 min   31 %  (149 s)
    2      preset      nothing              ~40 s      17 %  (82 s)
    3      recipe      nothing              ~80 s      33 %  (158 s)
    4      benchmark   nothing              ~40 s      15 %  (72 s)

Stage 1 is mostly CPU work with light use of the GPU, so the chapters (half the cores' worth of
kernels, the longest chapter, 12, first) and the exercises (a quarter of the cores' worth of
shards) share the machine, one torch thread per kernel. The timed runs then come one at a time,
each with the GPU and the cores to itself, so that the preset and the recipe meet the same
machine.

``--dry-run`` runs the same steps through the same functions on a CPU: the first cells of
chapter 1, the smallest exercise graded, the ``tiny`` preset for a few steps, the recipe's
``tiny`` shape for a few steps, and ``benchmark.py --smoke``; the report says that it was a dry
run and marks the targets not applicable. It took about a minute on the course's 2-core machine
while another job kept both cores busy, most of it nbgrader starting up and kernels importing
torch. Without CUDA and without ``--dry-run`` the check refuses in one line.

Writes OUT/gpu_check.json and OUT/gpu_check.md (OUT: ``--out``, default runs/gpu_check, or
runs/gpu_check-dry-run), each whole or not at all, after every stage (its ``exit_status`` null
until the end) and at the end, whatever failed: every step's status, seconds, limit and numbers,
and for a failure its error in one line and the last lines of its output, whose whole is in
OUT/logs/. Exit status: 0 when every step passed and every target was met (in a dry run: every
step passed), 1 when a step failed or a target was missed, 2 when the check could not start.
"""

# Annotations are evaluated (no `from __future__ import annotations`): the tests import this script
# from its file without registering it in sys.modules, where dataclasses look string annotations up.
import argparse
import concurrent.futures
import datetime
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's course_lib, installed or not (as child_env gives the steps)

from course_lib._cli import OneLineParser  # noqa: E402
from course_lib._io import atomic_write, write_json  # noqa: E402

PROG = "benchmarks/gpu_check.py"
REPORT_JSON, REPORT_MD = "gpu_check.json", "gpu_check.md"
LOSS_TARGET = 1.45  # nats per character, whole validation split (issue 29, point 6)
NANOGPT_BEST = 1.47  # nanoGPT's README: the best validation loss of its GPU run of Tiny Shakespeare
PRESET = "shakespeare-gpu"
FIRST_CHAPTERS = ("12_training.ipynb",)  # the longest: started first, so that it does not finish last
DRY_RUN_CELLS = 6  # cells of chapter 1 the dry run executes: setup, imports, the first computation
TAIL_LINES = 15  # lines of a failed command's output kept in the report
READY = re.compile(r"course_lib ready on (\w+)")  # what every notebook's setup cell prints
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colours, as in IPython's tracebacks
RECIPE_DONE = re.compile(r"done: (\d+) steps in ([0-9.]+) s \((\d+) tokens/s\)")
RECIPE_LOSS = re.compile(r"validation loss over the whole split \(windows of (\d+)\): ([0-9.]+) nats/char")


# --- steps, their limits and their outcomes ------------------------------------------------------

class StepFailed(Exception):
    """An expected failure of a step: ``message`` in one line, the last lines of the output that
    explain it in ``tail``, and whatever the step measured before it failed in ``numbers``."""

    def __init__(self, message: str, tail: str = "", numbers: dict | None = None):
        super().__init__(message)
        self.tail, self.numbers = tail, numbers or {}


@dataclass(frozen=True)
class Context:
    """What every step gets: the report folder ``out``, whether this is a dry run, the expected
    device (``cuda``, or ``cpu`` in a dry run) and the machine's cores."""

    out: Path
    dry_run: bool
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    def folder(self, name: str) -> Path:
        """A fresh OUT/name/ for a step (what a previous check left there is removed)."""
        path = self.out / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def log(self, name: str) -> Path:
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        return self.out / "logs" / f"{name}.log"


@dataclass(frozen=True)
class Step:
    """One step: ``run(context, limit_seconds)`` returns its numbers or raises :class:`StepFailed`;
    ``share`` of the budget is its time limit."""

    name: str
    title: str
    share: float
    run: Callable[[Context, float], dict]


def run_step(step: Step, ctx: Context, budget_seconds: float) -> dict:
    """Run one step within its limit and record its outcome: status ``ok`` or ``failed``, seconds,
    the limit, its numbers, and for a failure the error in one line and the output's last lines.
    Never raises: an unexpected exception fails the step, its traceback kept as the tail."""
    limit = step.share * budget_seconds
    record = {"name": step.name, "title": step.title, "status": "ok", "seconds": None,
              "limit_seconds": round(limit, 1), "numbers": {}, "error": None, "tail": ""}
    start = time.monotonic()
    try:
        record["numbers"] = step.run(ctx, limit)
    except StepFailed as err:
        record.update(status="failed", error=str(err), tail=err.tail, numbers=err.numbers)
    except Exception as err:  # a bug or a surprise: the other steps still run
        first = (str(err).strip().splitlines() or [""])[0]
        lines = traceback.format_exc().strip().splitlines()
        record.update(status="failed", error=f"{type(err).__name__}: {first}",
                      tail="\n".join(lines[-TAIL_LINES:]))
    record["seconds"] = round(time.monotonic() - start, 1)
    return record


# --- processes -----------------------------------------------------------------------------------

@dataclass
class Finished:
    """A finished (or stopped) command: exit code (None when stopped at its limit), its output
    (stdout and stderr together), the wall seconds from start to exit."""

    code: int | None
    output: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.code is None

    def tail(self, lines: int = TAIL_LINES) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def child_env(threads: int | None = None) -> dict:
    """The environment of every process the check starts: this one's, with its Python's bin folder
    first on PATH (nbgrader runs helper programs from there), this checkout first on PYTHONPATH (every
    process, a notebook's kernel too, imports this tree's course_lib, installed or not, and no setup
    cell tries to install one) and, when given, ``threads`` torch threads. CUDA_VISIBLE_DEVICES is
    passed on as it is: the GPU stays visible."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_command(command: list[str], timeout: float, log: Path, cwd: Path = ROOT,
                env: dict | None = None) -> Finished:
    """Run ``command`` in its own process group, its output into ``log``; at ``timeout`` seconds the
    whole group is killed (a Jupyter kernel, in a session of its own, exits when its parent does).
    The output returned has its terminal colours removed."""
    start = time.monotonic()
    with open(log, "w+") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env or child_env(), stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = process.wait(timeout=max(timeout, 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
        out.seek(0)
        output = ANSI.sub("", out.read())
    return Finished(code, output, time.monotonic() - start)


def _checked(done: Finished, what: str, limit: float) -> Finished:
    """``done`` if it exited with 0, else :class:`StepFailed` naming ``what`` and why."""
    if done.timed_out:
        raise StepFailed(f"{what} stopped at the step's limit of {limit:.0f} s", done.tail())
    if done.code != 0:
        last = done.tail(1) or "no output"
        raise StepFailed(f"{what} exited with status {done.code}: {last}", done.tail())
    return done


def ready_device(notebook: Path) -> str | None:
    """The device an executed notebook's setup cell reported ("course_lib ready on cuda"), or None."""
    try:
        nb = json.loads(notebook.read_text())
    except (OSError, ValueError):
        return None
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            match = READY.search("".join(output.get("text", "")))
            if match:
                return match.group(1)
    return None


# --- 1. chapters ---------------------------------------------------------------------------------

def chapter_head(ctx: Context, cells: int = DRY_RUN_CELLS) -> Path:
    """The dry run's chapter: the first ``cells`` cells of chapter 1 (the setup cell, the imports and
    the first computation), written under OUT/dry_run/."""
    source = ROOT / "book" / "01_information_theory.ipynb"
    nb = json.loads(source.read_text())
    nb["cells"] = nb["cells"][:cells]
    folder = ctx.out / "dry_run"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{source.stem}_first_{cells}_cells.ipynb"
    path.write_text(json.dumps(nb, indent=1))
    return path


def notebook_plan(ctx: Context) -> tuple[int, int, int]:
    """Stage 1's share of the cores: (chapter kernels at a time, exercise course folders graded side
    by side, torch threads per kernel). Half the cores' worth of chapter kernels, a quarter's worth
    of grading shards (each never more than it has notebooks), and the cores divided among them."""
    chapters = 1 if ctx.dry_run else len(list((ROOT / "book").glob("[0-9][0-9]_*.ipynb")))
    kernels = max(1, min(chapters, ctx.cores // 2))
    shards = max(1, min(len(exercises_to_grade(ctx)), ctx.cores // 4))
    return kernels, shards, max(1, ctx.cores // (kernels + shards))


def chapters_to_run(ctx: Context) -> list[Path]:
    """Every chapter, FIRST_CHAPTERS (the longest) first, then the others in order; in a dry run,
    the head of chapter 1."""
    if ctx.dry_run:
        return [chapter_head(ctx)]
    chapters = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    return sorted(chapters, key=lambda p: p.name not in FIRST_CHAPTERS)


def execute_notebook(notebook: Path, out_dir: Path, timeout: float, log: Path, threads: int) -> dict:
    """Execute ``notebook`` in its own folder with nbconvert (nbclient: an error in a cell fails it,
    unless the cell is tagged raises-exception), the executed copy written to ``out_dir``, within
    ``timeout`` seconds. Returns {name, ok, seconds, device, error}, and for a failure the last
    lines of nbconvert's output as ``tail``."""
    result = {"name": notebook.name, "ok": False, "seconds": 0.0, "device": None, "error": None}
    if timeout <= 0:
        return {**result, "error": "not started: the step's limit was reached"}
    command = [sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
               f"--ExecutePreprocessor.timeout={max(int(timeout), 1)}", "--output-dir", str(out_dir),
               str(notebook)]
    done = run_command(command, timeout, log, cwd=notebook.parent, env=child_env(threads))
    executed = out_dir / notebook.name
    result["seconds"] = round(done.seconds, 1)
    if done.timed_out:
        return {**result, "error": "stopped at the step's limit", "tail": done.tail()}
    if done.code != 0 or not executed.is_file():
        error = _cell_error(done.output) or f"nbconvert exited with status {done.code}"
        return {**result, "error": error, "tail": done.tail()}
    return {**result, "ok": True, "device": ready_device(executed)}


def _cell_error(output: str) -> str | None:
    """The exception line of a failed cell in nbconvert's output: its last ``SomeError: ...`` line."""
    errors = [line.strip() for line in output.splitlines()
              if re.match(r"^\s*[\w.]*(Error|Exception|Interrupt)\b(:.*)?$", line)]
    return errors[-1][:300] if errors else None


def run_chapters(ctx: Context, limit: float) -> dict:
    """Step 1: every chapter (the dry run: chapter 1's first cells), several kernels at a time; each
    must run to the end on the expected device."""
    notebooks = chapters_to_run(ctx)
    kernels, _, threads = notebook_plan(ctx)
    out_dir = ctx.folder("chapters")
    logs = ctx.folder("logs/chapters")
    deadline = time.monotonic() + limit
    with concurrent.futures.ThreadPoolExecutor(max_workers=kernels) as pool:
        results = list(pool.map(lambda nb: execute_notebook(nb, out_dir, deadline - time.monotonic(),
                                                            logs / f"{nb.stem}.log", threads), notebooks))
    for result in results:
        if result["ok"] and result["device"] != ctx.device:
            result.update(ok=False, error=f"the kernel picked {result['device']}, not {ctx.device}")
    numbers = {"notebooks": results, "executed": sum(r["ok"] for r in results), "total": len(results),
               "kernels": kernels, "threads_per_kernel": threads}
    failed = [r for r in results if not r["ok"]]
    if failed:
        tails = "\n\n".join(f"--- {r['name']}\n{r['tail']}" for r in failed if r.get("tail"))
        raise StepFailed(f"{len(failed)} of {len(results)} notebooks failed: "
                         + "; ".join(f"{r['name']} ({r['error']})" for r in failed)[:1000], tails, numbers)
    return numbers


# --- 2. exercises --------------------------------------------------------------------------------

def exercises_to_grade(ctx: Context) -> list[str]:
    """Every assignment of exercises/source/; in a dry run, the smallest (its notebook's size)."""
    source = ROOT / "exercises" / "source"
    names = sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    if ctx.dry_run:
        return [min(names, key=lambda a: sum(f.stat().st_size for f in (source / a).glob("*.ipynb")))]
    return names


def grade_shard(course: Path, assignments: list[str], deadline: float, logs: Path, threads: int,
                limit: float) -> dict[str, dict]:
    """Set up ``course`` as tests/test_exercises.py does and autograde the source of each assignment
    as the submission of student ``solution``; {assignment: {score, max_score, device, ok, error}}.
    nbgrader's output goes to ``logs``/COURSE.COMMAND.log."""
    from nbgrader.api import Gradebook, MissingEntry

    course.mkdir(parents=True)
    shutil.copy(ROOT / "exercises" / "nbgrader_config.py", course)
    for assignment in assignments:
        source = ROOT / "exercises" / "source" / assignment
        shutil.copytree(source, course / "source" / assignment)
        shutil.copytree(source, course / "submitted" / "solution" / assignment)  # the solutions, submitted
    env = child_env(threads)

    def nbgrader(command: str, *args: str) -> Finished:
        return run_command([sys.executable, "-m", "nbgrader", command, *args], deadline - time.monotonic(),
                           logs / f"{course.name}.{command}.log", cwd=course, env=env)

    _checked(nbgrader("generate_assignment", "*", "--force"), f"nbgrader generate_assignment in {course.name}",
             limit)
    done = nbgrader("autograde", "*")
    if done.timed_out:
        _checked(done, f"nbgrader autograde in {course.name}", limit)
    # a non-zero exit: some submission could not be graded; the gradebook still holds the others
    trouble = None if done.code == 0 else f"nbgrader autograde exited with status {done.code}: {done.tail(1)}"
    results = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for assignment in assignments:
            (notebook,) = (course / "source" / assignment).glob("*.ipynb")
            try:
                submission = gradebook.find_submission_notebook(notebook.stem, assignment, "solution")
                score, max_score = submission.score, submission.max_score
            except MissingEntry:  # nbgrader could not grade it at all
                results[assignment] = {"score": None, "max_score": None, "device": None, "ok": False,
                                       "error": trouble or "no grade in the gradebook"}
                continue
            graded = course / "autograded" / "solution" / assignment / notebook.name
            full = max_score > 0 and score == max_score
            results[assignment] = {"score": score, "max_score": max_score, "device": ready_device(graded),
                                   "ok": full, "error": None if full else failed_tests(graded)}
    return results


def failed_tests(graded: Path) -> str | None:
    """The graded cells of an autograded notebook that raised, each as "grade_id: the exception's
    last line", joined by "; " (None when none did)."""
    try:
        nb = json.loads(graded.read_text())
    except (OSError, ValueError):
        return None
    failures = []
    for cell in nb.get("cells", []):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and grade_id:
                evalue = (str(output.get("evalue", "")).strip().splitlines() or [""])[-1]
                failures.append(f"{grade_id}: {output.get('ename')}: {evalue}"[:300])
    return "; ".join(failures) or None


def run_exercises(ctx: Context, limit: float) -> dict:
    """Step 2: every exercise's solutions autograded (the dry run: the smallest exercise), the course
    folders side by side; each must get full marks on the expected device."""
    assignments = exercises_to_grade(ctx)
    _, shards, threads = notebook_plan(ctx)
    root = ctx.folder("exercises")
    logs = ctx.folder("logs/exercises")
    deadline = time.monotonic() + limit
    groups = [assignments[i::shards] for i in range(shards)]
    results: dict[str, dict] = {}
    errors = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=shards) as pool:
        futures = {pool.submit(grade_shard, root / f"course{i}", group, deadline, logs, threads, limit): group
                   for i, group in enumerate(groups)}
        for future, group in futures.items():
            try:
                results.update(future.result())
            except StepFailed as err:
                errors.append((str(err), err.tail))
                results.update({a: {"score": None, "max_score": None, "device": None, "ok": False,
                                    "error": str(err)} for a in group})
    for result in results.values():
        if result["ok"] and result["device"] != ctx.device:
            result.update(ok=False, error=f"the kernel picked {result['device']}, not {ctx.device}")
    numbers = {"assignments": {a: results[a] for a in assignments}, "shards": shards,
               "threads_per_kernel": threads, "full_marks": sum(r["ok"] for r in results.values()),
               "total": len(assignments)}
    failed = [a for a in assignments if not results[a]["ok"]]
    if failed:
        detail = "; ".join(f"{a} ({results[a]['error'] or _score(results[a])})" for a in failed)
        raise StepFailed(f"{len(failed)} of {len(assignments)} solutions without full marks: {detail}"[:1000],
                         "\n\n".join(tail for _, tail in errors), numbers)
    return numbers


def _score(result: dict) -> str:
    return f"{_fmt(result['score'], 'g')} of {_fmt(result['max_score'], 'g')} points"


# --- 3. the preset -------------------------------------------------------------------------------

def run_preset(ctx: Context, limit: float) -> dict:
    """Step 3: the shakespeare-gpu preset trained in bfloat16 (the dry run: ``tiny``, 4 steps, on the
    CPU), one whole process; its final whole-split loss, throughput and times from its log.json."""
    out = ctx.folder("preset")
    preset, extra = (("tiny", ["--steps", "4"]) if ctx.dry_run else (PRESET, []))
    command = [sys.executable, "-m", "course_lib.train", "--preset", preset, "--precision", "bfloat16",
               "--device", ctx.device, "--no-progress", "--out", str(out), *extra]
    done = _checked(run_command(command, limit, ctx.log("preset"), env=child_env(1 if ctx.dry_run else None)),
                    f"python -m course_lib.train --preset {preset}", limit)
    try:
        log = json.loads((out / "log.json").read_text())
        last = log["evaluations"][-1]
    except (OSError, ValueError, KeyError, IndexError):
        raise StepFailed("the run wrote no evaluation to log.json", done.tail()) from None
    train = log["train_config"]
    return {"preset": preset, "val_loss": last["val_loss"], "val_bits_per_char": last["val_bits_per_char"],
            "window": train.get("eval_context") or train["context"], "steps": last["step"],
            "tokens_per_second": training_rate(log["evaluations"]), "train_seconds": last["elapsed_seconds"],
            "wall_seconds": round(done.seconds, 2), "device": log["device"], "precision": log["precision"],
            "parameters": log["parameters"]}


def training_rate(evaluations: list[dict]) -> float | None:
    """Tokens per second of training over the whole run, evaluations left out: all the tokens over
    the sum of each interval's training time (its tokens / its rate)."""
    seconds, tokens, before = 0.0, 0, 0
    for record in evaluations:
        if record.get("tokens_per_second"):
            seconds += (record["tokens"] - before) / record["tokens_per_second"]
            tokens += record["tokens"] - before
        before = record["tokens"]
    return tokens / seconds if seconds else None


# --- 4. the recipe -------------------------------------------------------------------------------

def run_recipe(ctx: Context, limit: float) -> dict:
    """Step 4: nanoGPT's recipe at its GPU shape (the dry run: the ``tiny`` shape, 5 steps, on the
    CPU), one whole process; its whole-split loss and times from what it prints."""
    shape, extra = ("tiny", ["--iters", "5"]) if ctx.dry_run else ("gpu", [])
    command = [sys.executable, "benchmarks/nanogpt_recipe.py", "--shape", shape, "--device", ctx.device,
               "--full-eval", *extra]
    done = _checked(run_command(command, limit, ctx.log("recipe"), env=child_env(1 if ctx.dry_run else None)),
                    f"benchmarks/nanogpt_recipe.py --shape {shape}", limit)
    finished, loss = RECIPE_DONE.search(done.output), RECIPE_LOSS.search(done.output)
    if finished is None or loss is None:
        raise StepFailed("the recipe printed no final time or no whole-split loss", done.tail())
    return {"shape": shape, "val_loss": float(loss.group(2)), "window": int(loss.group(1)),
            "steps": int(finished.group(1)), "train_seconds": float(finished.group(2)),
            "tokens_per_second": int(finished.group(3)), "wall_seconds": round(done.seconds, 2)}


# --- 5. the benchmark against Hugging Face -------------------------------------------------------

def run_benchmark(ctx: Context, limit: float) -> dict:
    """Step 5: benchmarks/benchmark.py on the device (the dry run: ``--smoke`` on the CPU); its
    measurements and its own targets, from the JSON it writes."""
    result = ctx.folder("benchmark") / "benchmark.json"
    command = [sys.executable, "benchmarks/benchmark.py", "--device", ctx.device, "--json", str(result)]
    command += ["--smoke", "--threads", "1"] if ctx.dry_run else []
    done = _checked(run_command(command, limit, ctx.log("benchmark"), env=child_env(1 if ctx.dry_run else None)),
                    "benchmarks/benchmark.py", limit)
    try:
        numbers = json.loads(result.read_text())
    except (OSError, ValueError):
        raise StepFailed("benchmarks/benchmark.py wrote no results", done.tail()) from None
    return numbers


# --- targets and the report ----------------------------------------------------------------------

def judge_targets(steps: list[dict], dry_run: bool) -> list[dict]:
    """Issue 29's targets for the GPU preset, from the preset's and the recipe's numbers: each with
    what was measured and ``met`` True or False, or None with the reason when it cannot be judged
    (a dry run, or a step that failed or was left out)."""
    by_name = {s["name"]: s for s in steps}
    preset, recipe = by_name.get("preset"), by_name.get("recipe")
    have_preset = preset is not None and preset["status"] == "ok"
    have_both = have_preset and recipe is not None and recipe["status"] == "ok"
    p = preset["numbers"] if have_preset else {}
    r = recipe["numbers"] if have_both else {}
    why_not = ("not applicable: a dry run measures nothing" if dry_run else None)
    loss = {"name": "loss", "target": f"{PRESET}: validation loss ≤ {LOSS_TARGET} nats/char on the whole split "
                                      f"(nanoGPT's best at this shape: {NANOGPT_BEST})",
            "value": p.get("val_loss"), "threshold": LOSS_TARGET, "measured": None, "met": None,
            "why_not": why_not}
    speed = {"name": "time", "target": f"{PRESET}: less wall time than nanoGPT's recipe at its GPU shape, "
                                       f"whole processes on the same GPU",
             "value": p.get("wall_seconds") if have_both else None, "threshold": r.get("wall_seconds"),
             "measured": None, "met": None, "why_not": why_not}
    if have_preset:
        loss["measured"] = f"{p['val_loss']:.4f} nats/char (windows of {p['window']})"
        if not dry_run:
            loss["met"] = p["val_loss"] <= LOSS_TARGET
    elif not dry_run:
        loss["why_not"] = _not_measured(preset=preset)
    if have_both:
        speed["measured"] = (f"{p['wall_seconds']:.1f} s against {r['wall_seconds']:.1f} s "
                             f"(ratio {p['wall_seconds'] / r['wall_seconds']:.2f}); the recipe's loss "
                             f"{r['val_loss']:.4f} (windows of {r['window']})")
        if not dry_run:
            speed["met"] = p["wall_seconds"] < r["wall_seconds"]
    elif not dry_run:
        speed["why_not"] = _not_measured(preset=preset, recipe=recipe)
    return [loss, speed]


def _not_measured(**steps: dict | None) -> str:
    """Why a target was not judged: each of ``steps`` (name: its record, None if left out) that failed
    or was not run."""
    reasons = [f"the {name} step {'was not run' if record is None else 'failed'}"
               for name, record in steps.items() if record is None or record["status"] != "ok"]
    return "not measured: " + " and ".join(reasons)


def exit_status(steps: list[dict], targets: list[dict], dry_run: bool, partial: bool = False) -> int:
    """0 when every step passed and (unless a dry run) every target was met, or in a partial check
    (``--only``) none was missed; else 1."""
    if any(s["status"] != "ok" for s in steps):
        return 1
    if not dry_run and any(t["met"] is False or (t["met"] is None and not partial) for t in targets):
        return 1
    return 0


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def machine() -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    status = _git("status", "--porcelain")
    return {"gpu": gpu, "cuda": torch.version.cuda, "torch": torch.__version__, "cpu": cpu,
            "cores": os.cpu_count(), "python": platform.python_version(),
            "commit": _git("rev-parse", "--short", "HEAD"),
            "uncommitted_files": None if status is None else len(status.splitlines())}


def _finite(value):
    """``value`` with every NaN or infinity replaced by None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _fmt(value, spec: str = ".4f", missing: str = "—") -> str:
    return missing if value is None else format(value, spec)


def _cell(text: str | None) -> str:
    """``text`` fit for a markdown table cell: one line, no column bars."""
    return " ".join((text or "").split()).replace("|", "/")


def markdown(report: dict) -> str:
    """The report as a page: the verdict, the targets, the steps, then each step's numbers."""
    m, steps = report["machine"], {s["name"]: s for s in report["steps"]}
    lines = [f"# GPU check{' — DRY RUN' if report['dry_run'] else ''}", ""]
    if report["dry_run"]:
        lines += ["**A dry run, on a CPU: it checks the plumbing; no number below measures the course on a "
                  "GPU.**", ""]
    if report.get("left_out"):
        lines += [f"**A partial check (--only): left out {', '.join(report['left_out'])}.**", ""]
    verdict = {0: "passed", 1: "FAILED"}.get(report["exit_status"], "incomplete")
    lines += [f"Result: **{verdict}** (exit status {report['exit_status']}) in {report['seconds']:.0f} s of a "
              f"{report['budget_seconds']:.0f} s budget. {report['started']}, commit {m['commit']} "
              f"({m['uncommitted_files']} uncommitted files).", "",
              f"Machine: {m['gpu'] or 'no GPU'} (CUDA {m['cuda']}), {m['cpu']}, {m['cores']} cores; "
              f"torch {m['torch']}, Python {m['python']}.", "", "## Targets (issue 29, point 6)", "",
              "| Target | Measured | Met |", "|---|---|---|"]
    for t in report["targets"]:
        met = {True: "yes", False: "**NO**", None: t["why_not"] or "—"}[t["met"]]
        lines.append(f"| {t['target']} | {t['measured'] or '—'} | {met} |")
    lines += ["", "## Steps", "", "| Step | Status | Seconds (limit) | Error |", "|---|---|---|---|"]
    for s in report["steps"]:
        status = "ok" if s["status"] == "ok" else f"**{s['status']}**"
        lines.append(f"| {s['title']} | {status} | {_fmt(s['seconds'], '.1f')} ({s['limit_seconds']:.0f}) "
                     f"| {_cell(s['error'])} |")
    if "preset" in steps or "recipe" in steps:
        lines += ["", "## Training: the preset against nanoGPT's recipe", "",
                  "| Run | validation loss, nats/char (windows) | steps | tokens/s | training s | wall s |",
                  "|---|---|---|---|---|---|"]
        for name, label in (("preset", "preset"), ("recipe", "nanoGPT's recipe")):
            n = steps.get(name, {}).get("numbers") or {}
            if n:
                title = f"`{n.get('preset', n.get('shape'))}` {label}"
                lines.append(f"| {title} | {_fmt(n.get('val_loss'))} ({n.get('window')}) | {n.get('steps')} | "
                             f"{_fmt(n.get('tokens_per_second'), ',.0f')} | "
                             f"{_fmt(n.get('train_seconds'), '.1f')} | "
                             f"{_fmt(n.get('wall_seconds'), '.1f')} |")
    chapters = (steps.get("chapters", {}).get("numbers") or {}).get("notebooks")
    if chapters:
        lines += ["", "## Chapters", "", "| Notebook | Status | Seconds | Device |", "|---|---|---|---|"]
        for c in chapters:
            lines.append(f"| {c['name']} | {'ok' if c['ok'] else '**failed**: ' + _cell(c['error'])} "
                         f"| {c['seconds']:.1f} | {c['device'] or '—'} |")
    assignments = (steps.get("exercises", {}).get("numbers") or {}).get("assignments")
    if assignments:
        lines += ["", "## Exercises (solutions autograded)", "", "| Assignment | Score | Device |",
                  "|---|---|---|"]
        for name, a in assignments.items():
            score = f"{_fmt(a['score'], 'g')} / {_fmt(a['max_score'], 'g')}"
            shown = score if a["ok"] else f"**{score}**: {_cell(a['error'] or 'not full marks')}"
            lines.append(f"| {name} | {shown} | {a['device'] or '—'} |")
    bench = steps.get("benchmark", {}).get("numbers") or {}
    if bench.get("block"):
        lines += ["", "## Against Hugging Face (benchmarks/benchmark.py)", "",
                  f"On {bench.get('device_name')}" + (" (smoke test: tiny shapes)." if bench.get("smoke") else "."),
                  "",
                  "| Measurement | Value |", "|---|---|"]
        ms, gen, train = bench["block"]["ms"], bench["generation"], bench.get("training", {})
        rows = [("block forward, course_lib explicit / fast / Hugging Face, ms",
                 f"{ms['explicit']:.3f} / {ms['fast']:.3f} / {ms['hf']:.3f}"),
                ("fast path against Hugging Face's layer (time ratio, > 1: ours faster)",
                 f"{bench['block']['hf_ratio']:.2f}×"),
                ("outputs agree to", f"{bench['block']['max_gap']:.1e}"),
                ("decoding, preallocated cache against no cache", f"{gen['speedup']:.1f}×"),
                ("decoding, Hugging Face's cache against none", _fmt(gen.get("hf_speedup"), ".1f") + "×"),
                ("identical tokens everywhere", str(gen["identical"]))]
        rows += [(f"training step, {kind} against Hugging Face (tokens/s ratio)", f"{ratio[0]:.3f}×")
                 for kind, ratio in train.get("ratios", {}).items()]
        lines += [f"| {k} | {v} |" for k, v in rows]
        lines += ["", "benchmark.py's own targets (set on a CPU; listed, not judged here):", ""]
        lines += [f"- [{'met' if t['met'] else 'missed'}] {t['text']}" for t in bench.get("targets", [])]
    failed = [s for s in report["steps"] if s["status"] != "ok" and s["tail"]]
    if failed:
        lines += ["", "## Errors"]
        for s in failed:
            lines += ["", f"### {s['title']}", "", s["error"] or "", "", "```", s["tail"], "```"]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out: Path) -> None:
    """OUT/gpu_check.json and OUT/gpu_check.md, each written whole or not at all."""
    write_json(_finite(report), out / REPORT_JSON)
    try:
        page = markdown(report)
    except (KeyError, TypeError, ValueError, AttributeError) as err:  # numbers of an unexpected shape
        page = (f"# GPU check\n\nThis page could not be drawn ({type(err).__name__}: {err}); "
                f"{REPORT_JSON} holds the whole report.\n")
    atomic_write(out / REPORT_MD, lambda f: f.write(page), suffix=".md")


# --- the check -----------------------------------------------------------------------------------

def default_stages() -> list[list[Step]]:
    """The check's steps in stages: the steps of a stage run side by side, the stages in turn."""
    return [
        [Step("chapters", "Chapters executed", 0.31, run_chapters),
         Step("exercises", "Exercises graded (solutions)", 0.31, run_exercises)],
        [Step("preset", "Preset trained (bfloat16)", 0.17, run_preset)],
        [Step("recipe", "nanoGPT's recipe trained", 0.33, run_recipe)],
        [Step("benchmark", "Block, decoding, training step against Hugging Face", 0.15, run_benchmark)],
    ]


def step_names() -> list[str]:
    """Every step's name, in the order the check runs them (what ``--only`` takes)."""
    return [step.name for stage in default_stages() for step in stage]


def run_check(out: Path, dry_run: bool, budget_seconds: float, stages: list[list[Step]] | None = None,
              say: Callable[[str], None] = print, command: str = PROG, only: list[str] | None = None) -> int:
    """Run every stage (with ``only``, those of its steps alone: a partial check), record every step,
    write the report after each stage; the exit status."""
    stages = default_stages() if stages is None else stages
    left_out = [] if only is None else [s.name for stage in stages for s in stage if s.name not in only]
    stages = [kept for stage in stages if (kept := [s for s in stage if s.name not in left_out])]
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(out=out, dry_run=dry_run)
    started = time.monotonic()
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report = {"check": "gpu_check", "dry_run": dry_run, "exit_status": None, "budget_seconds": budget_seconds,
              "seconds": 0.0, "started": now,
              "command": command, "machine": machine(), "left_out": left_out, "steps": [], "targets": []}
    for stage in stages:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(stage)) as pool:
            records = list(pool.map(lambda step: run_step(step, ctx, budget_seconds), stage))
        for record in records:
            say(f"[{record['status']}] {record['title']}: {record['seconds']:.1f} s (limit "
                f"{record['limit_seconds']:.0f} s)" + (f" — {record['error']}" if record["error"] else ""))
        report["steps"] += records
        report["seconds"] = round(time.monotonic() - started, 1)
        report["targets"] = judge_targets(report["steps"], dry_run)
        write_report(report, out)
    report["exit_status"] = exit_status(report["steps"], report["targets"], dry_run, partial=bool(left_out))
    write_report(report, out)
    for t in report["targets"]:
        verdict = {True: "met", False: "MISSED", None: t["why_not"]}[t["met"]]
        say(f"target: {t['target']}: {t['measured'] or 'not measured'} — {verdict}")
    say(f"report: {out / REPORT_MD} and {out / REPORT_JSON}" + (" (dry run)" if dry_run else ""))
    return report["exit_status"]


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
    return value


def _step_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in step_names()]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{text!r} names {'no step' if not names else ', '.join(unknown)}: "
                                         f"name one or more of {', '.join(step_names())}, separated by commas")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="folder of the report and of what the steps write (default: runs/gpu_check, "
                             "or runs/gpu_check-dry-run)")
    parser.add_argument("--budget-minutes", type=_minutes, default=8.0, metavar="M",
                        help="the whole check's time; each step may take its share of it (default 8)")
    parser.add_argument("--dry-run", action="store_true",
                        help="run the same steps on a CPU at tiny sizes, in seconds: checks the plumbing")
    parser.add_argument("--only", type=_step_list, default=None, metavar="STEP[,STEP...]",
                        help=f"run these steps alone, each within its usual limit (of {', '.join(step_names())}): "
                             "a partial check, e.g. to rerun the steps that failed")
    args = parser.parse_args(argv)
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            print(f"{PROG}: error: no CUDA device: run on a GPU machine, or use --dry-run", file=sys.stderr)
            return 2
    out = Path(args.out or ROOT / "runs" / ("gpu_check-dry-run" if args.dry_run else "gpu_check"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"{PROG}: error: --out {str(out)!r} is not a usable folder: {err.strerror or err}",
              file=sys.stderr)
        return 2
    command = " ".join([PROG, *(argv if argv is not None else sys.argv[1:])])
    return run_check(out, args.dry_run, 60.0 * args.budget_minutes, command=command, only=args.only)


if __name__ == "__main__":
    sys.exit(main())

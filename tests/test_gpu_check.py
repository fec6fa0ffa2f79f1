"""benchmarks/gpu_check.py: the dry run goes through every step on a CPU and writes both reports; the
report's logic (targets, exit status, a failed or overrunning step) is checked on stand-in steps; and
without CUDA the real check refuses in one line."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import torch

from conftest import GPU_CHECK as SCRIPT
from conftest import wait_for_gpu_check_dry_run

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS = ["chapters", "exercises", "preset", "recipe", "benchmark"]


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = load_check()


# --- the dry run, end to end ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def dry_run():
    """(the finished process, its output folder): ``gpu_check.py --dry-run``, started in the
    background by conftest.py once the exercises are graded."""
    return wait_for_gpu_check_dry_run()


def test_the_dry_run_passes_every_step_and_says_it_was_a_dry_run(dry_run):
    done, out = dry_run
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["dry_run"] is True and report["exit_status"] == 0
    assert [s["name"] for s in report["steps"]] == STEPS
    for step in report["steps"]:
        assert step["status"] == "ok" and step["error"] is None, step
        assert 0 < step["seconds"] <= step["limit_seconds"]
    # the chapters and the exercises share a stage: the limits of the stages fit the budget
    assert sum(s["limit_seconds"] for s in report["steps"][1:]) <= report["budget_seconds"]


def test_the_dry_run_reports_each_steps_numbers(dry_run):
    _, out = dry_run
    steps = {s["name"]: s["numbers"] for s in json.loads((out / "gpu_check.json").read_text())["steps"]}
    (chapter,) = steps["chapters"]["notebooks"]
    assert chapter["ok"] and chapter["device"] == "cpu"
    (graded,) = steps["exercises"]["assignments"].values()
    assert graded["ok"] and graded["device"] == "cpu" and graded["score"] == graded["max_score"] > 0
    for name in ("preset", "recipe"):
        numbers = steps[name]
        assert 0 < numbers["val_loss"] < 4.5 and numbers["window"] == 32, numbers  # below ln 65 ≈ 4.17 + noise
        assert numbers["wall_seconds"] > numbers["train_seconds"] >= 0 and numbers["tokens_per_second"] > 0
    assert steps["preset"]["precision"] == "bfloat16" and steps["preset"]["device"] == "cpu"
    assert steps["benchmark"]["smoke"] is True and steps["benchmark"]["generation"]["identical"] is True


def test_in_a_dry_run_the_targets_are_not_applicable(dry_run):
    done, out = dry_run
    targets = json.loads((out / "gpu_check.json").read_text())["targets"]
    assert [t["name"] for t in targets] == ["loss", "time"]
    assert all(t["met"] is None and "dry run" in t["why_not"] for t in targets)
    page = (out / "gpu_check.md").read_text()
    assert page.startswith("# GPU check — DRY RUN") and page.count("not applicable") == 2
    for title in ("Chapters executed", "Exercises graded", "Preset trained", "nanoGPT's recipe", "Hugging Face"):
        assert title in page, title
    assert "(dry run)" in done.stdout.splitlines()[-1]


# --- the report's logic, on stand-in steps --------------------------------------------------------

def step(name: str, numbers: dict | None = None, error: Exception | None = None, calls: list | None = None):
    def run(ctx, limit):
        if calls is not None:
            calls.append(name)
        if error is not None:
            raise error
        return numbers or {}
    return check.Step(name, f"the {name} step", 0.2, run)


def training_steps(preset_loss: float, preset_seconds: float, recipe_seconds: float) -> list:
    preset = {"val_loss": preset_loss, "window": 256, "wall_seconds": preset_seconds,
              "preset": "shakespeare-gpu"}
    recipe = {"val_loss": 1.47, "window": 256, "wall_seconds": recipe_seconds, "shape": "gpu"}
    return [[step("preset", preset)], [step("recipe", recipe)]]


@pytest.mark.parametrize("loss, seconds, status, met", [(1.44, 60.0, 0, (True, True)),
                                                        (1.46, 60.0, 1, (False, True)),
                                                        (1.44, 130.0, 1, (True, False))])
def test_a_missed_target_gives_status_1(tmp_path, loss, seconds, status, met):
    stages = training_steps(loss, seconds, 120.0)
    assert check.run_check(tmp_path, False, 480.0, stages, say=lambda _: None) == status
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["exit_status"] == status and report["dry_run"] is False
    assert tuple(t["met"] for t in report["targets"]) == met
    page = (tmp_path / "gpu_check.md").read_text()
    assert ("**NO**" in page) == (status == 1) and ("FAILED" in page) == (status == 1)


def test_a_failed_step_is_recorded_and_the_others_still_run(tmp_path):
    calls = []
    stages = [[step("chapters", calls=calls),
               step("exercises", error=check.StepFailed("2 of 13 solutions without full marks", "the tail"),
                    calls=calls)],
              [step("preset", error=RuntimeError("a bug\nwith two lines"), calls=calls)],
              [step("recipe", {"val_loss": 1.5, "window": 256, "wall_seconds": 1.0}, calls=calls)]]
    lines = []
    assert check.run_check(tmp_path, False, 480.0, stages, say=lines.append) == 1
    assert sorted(calls) == ["chapters", "exercises", "preset", "recipe"]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {s["name"]: (s["status"], s["error"]) for s in report["steps"]}
    assert status == {"chapters": ("ok", None),
                      "exercises": ("failed", "2 of 13 solutions without full marks"),
                      "preset": ("failed", "RuntimeError: a bug"),
                      "recipe": ("ok", None)}
    assert "Traceback" in report["steps"][2]["tail"]  # an unexpected error keeps its traceback, in the report
    assert [t["met"] for t in report["targets"]] == [None, None]
    assert all("not measured" in t["why_not"] for t in report["targets"])
    assert "## Errors" in (tmp_path / "gpu_check.md").read_text()
    assert any(line.startswith("[failed] the exercises step") for line in lines)


@pytest.mark.parametrize("loss, status", [(1.44, 0), (1.46, 1)])
def test_only_runs_the_steps_it_names_and_the_report_says_the_check_was_partial(tmp_path, loss, status):
    calls = []
    stages = [[step("chapters", calls=calls), step("exercises", calls=calls)],
              [step("preset", {"val_loss": loss, "window": 256, "wall_seconds": 60.0}, calls=calls)],
              [step("recipe", calls=calls)]]
    assert check.run_check(tmp_path, False, 480.0, stages, say=lambda _: None, only=["preset"]) == status
    assert calls == ["preset"]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["left_out"] == ["chapters", "exercises", "recipe"]
    assert [s["name"] for s in report["steps"]] == ["preset"]
    loss_target, time_target = report["targets"]
    assert loss_target["met"] is (status == 0)  # judged: its step ran
    assert time_target["met"] is None and time_target["why_not"] == "not measured: the recipe step was not run"
    page = (tmp_path / "gpu_check.md").read_text()
    assert "A partial check (--only): left out chapters, exercises, recipe." in page


def test_a_full_check_with_a_failed_step_names_it_in_the_targets(tmp_path):
    stages = [[step("preset", error=check.StepFailed("out of memory"))], [step("recipe", {"wall_seconds": 1.0})]]
    assert check.run_check(tmp_path, False, 480.0, stages, say=lambda _: None) == 1
    loss_target, time_target = json.loads((tmp_path / "gpu_check.json").read_text())["targets"]
    assert loss_target["why_not"] == time_target["why_not"] == "not measured: the preset step failed"


@pytest.mark.parametrize("only", ["preset,gpu", ",", "Chapters"])
def test_an_unknown_step_is_refused_in_one_line(capsys, only):
    with pytest.raises(SystemExit) as stop:
        check.main(["--dry-run", "--only", only])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--only" in err
    assert "name one or more of chapters, exercises, preset, recipe, benchmark" in err


def test_every_step_imports_this_checkouts_course_lib(tmp_path):
    """A notebook's kernel runs in the notebook's folder, nbgrader's in a course folder: each finds this
    tree's course_lib through PYTHONPATH, whether or not one is installed (none is on a bare GPU machine)."""
    env = check.child_env(threads=1)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    done = subprocess.run([sys.executable, "-c", "import course_lib; print(course_lib.__file__)"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert pathlib.Path(done.stdout.strip()).resolve() == ROOT / "course_lib" / "__init__.py"


def test_a_step_past_its_limit_is_stopped(tmp_path):
    start = time.monotonic()
    done = check.run_command([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                             timeout=1.5, log=tmp_path / "sleep.log")
    assert done.timed_out and time.monotonic() - start < 20
    with pytest.raises(check.StepFailed, match="stopped at the step's limit of 2 s"):
        check._checked(done, "the sleeper", 2.0)


def test_a_failed_cell_is_named_by_its_exception():
    output = ("[NbConvertApp] Converting notebook x.ipynb\nnbclient.exceptions.CellExecutionError: An error "
              "occurred while executing the following cell:\n------------------\nassert loss < 1.75\n"
              "------------------\n\nAssertionError                 Traceback (most recent call last)\n"
              "----> 1 assert loss < 1.75\n\nAssertionError: 1.81\n")
    assert check._cell_error(output) == "AssertionError: 1.81"
    assert check._cell_error("nothing went wrong\n") is None


def test_the_device_and_the_failed_tests_are_read_from_the_executed_notebook(tmp_path):
    nb = {"cells": [
        {"cell_type": "code", "metadata": {}, "source": "",
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["course_lib ready on cuda (seed 0)\n"]}]},
        {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "softcap-tests"}}, "source": "",
         "outputs": [{"output_type": "error", "ename": "AssertionError", "evalue": "Likely mistake:\nno cap"}]},
        {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "lr-tests"}}, "source": "", "outputs": []}]}
    path = tmp_path / "graded.ipynb"
    path.write_text(json.dumps(nb))
    assert check.ready_device(path) == "cuda"
    assert check.failed_tests(path) == "softcap-tests: AssertionError: no cap"
    assert check.ready_device(tmp_path / "missing.ipynb") is None


def test_the_training_rate_leaves_the_evaluations_out():
    evaluations = [{"tokens": 0, "tokens_per_second": None},  # the evaluation before the first step
                   {"tokens": 1000, "tokens_per_second": 100.0}, {"tokens": 3000, "tokens_per_second": 400.0}]
    assert check.training_rate(evaluations) == pytest.approx(3000 / (10 + 5))


# --- refusals in one line ---------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")
def test_without_cuda_it_refuses_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == ("benchmarks/gpu_check.py: error: no CUDA device: run on a GPU machine, "
                                   "or use --dry-run")
    assert not (tmp_path / "gpu_check.json").exists()


def test_a_bad_budget_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        check.main(["--dry-run", "--budget-minutes", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--budget-minutes" in err and "must be a finite number > 0" in err


# --- the wheels for a GPU machine without PyPI (benchmarks/gpu_check_wheels.py) -------------------------

def load_wheels():
    spec = importlib.util.spec_from_file_location("gpu_check_wheels", ROOT / "benchmarks" / "gpu_check_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wheels = load_wheels()


def test_the_wheels_cover_course_lib_and_pin_what_pyproject_pins():
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dev = {Requirement(r).name.lower(): Requirement(r) for r in project["optional-dependencies"]["dev"]}
    asked = {Requirement(r).name.lower(): Requirement(r) for r in wheels.REQUIREMENTS}
    core = {Requirement(r).name.lower() for r in project["dependencies"]}
    assert core - {"torch"} <= set(asked) and {"nbgrader", "ipykernel", "transformers"} <= set(asked)
    for name, req in asked.items():
        if name in dev:
            assert str(req.specifier) == str(dev[name].specifier), name
    assert not wheels.NOT_IMPORTED & {wheels.canonicalize_name(n) for n in asked}


def fake_download(files: list[str], asked: list | None = None, error: str | None = None):
    def download(requirements, python_version, into):
        if asked is not None:
            asked.extend(requirements)
        if error:
            raise RuntimeError(error)
        for name in files:
            (into / name).write_bytes(b"wheel")
    return download


def test_the_wheels_leave_out_what_the_machine_has_and_what_is_never_imported(tmp_path, monkeypatch, capsys):
    files = ["nbgrader-0.9.6-py3-none-any.whl", "jupyterlab-4.6.6-py3-none-any.whl",
             "Jinja2-3.1.6-py3-none-any.whl", "tornado-6.6.1-cp311-abi3-manylinux1_x86_64.whl",
             "jupyter_server-2.21.1-py3-none-any.whl"]
    asked = []
    monkeypatch.setattr(wheels, "download", fake_download(files, asked))
    have = tmp_path / "have.txt"
    have.write_text("# pip list --format=freeze\ntransformers==5.17.0\njinja2\nNumPy==2.0.1\n\n")
    out = tmp_path / "wheels"
    assert wheels.main(["--python-version", "3.12", "--have", str(have), "--out", str(out)]) == 0
    kept = sorted(p.name for p in out.iterdir())
    assert kept == [files[4], files[0], files[3]]  # jupyter_server, nbgrader, tornado
    assert not any(r.startswith(("transformers", "numpy")) for r in asked) and "nbgrader==0.9.6" in asked
    assert capsys.readouterr().out.strip().endswith("left out: 1 the machine has, 1 never imported")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["have.txt", "wheels"]


def test_a_failed_download_leaves_the_folder_as_it_was_and_ends_in_one_line(tmp_path, monkeypatch, capsys):
    out = tmp_path / "wheels"
    out.mkdir()
    (out / "old-1.0-py3-none-any.whl").write_bytes(b"wheel")
    failure = "pip download failed: No matching distribution"
    monkeypatch.setattr(wheels, "download", fake_download([], error=failure))
    assert wheels.main(["--python-version", "3.12", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"benchmarks/gpu_check_wheels.py: error: {failure}\n"
    assert [p.name for p in out.iterdir()] == ["old-1.0-py3-none-any.whl"]
    assert [p.name for p in tmp_path.iterdir()] == ["wheels"]  # no half-made folder beside it


@pytest.mark.parametrize("args, rule", [
    (["--python-version", "3"], "give the major and minor version"),
    (["--python-version", "3.12", "--have", "missing.txt"], "cannot be read"),
    (["--python-version", "3.12", "--out", "."], "holds something other than wheels")])
def test_bad_wheel_arguments_are_refused_in_one_line(capsys, args, rule):
    argv = args if "--out" in args else [*args, "--out", "unused-wheels"]
    with pytest.raises(SystemExit) as stop:
        wheels.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and rule in err and err.split()[2] in {"--python-version", "--have", "--out"}

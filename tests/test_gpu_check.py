"""benchmarks/gpu_check.py: the dry run goes through every step on a CPU and writes both reports; the
report's logic (targets, exit status, a failed or overrunning step) is checked on stand-in steps; and
without CUDA the real check refuses in one line."""

from __future__ import annotations

import importlib.util
import json
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

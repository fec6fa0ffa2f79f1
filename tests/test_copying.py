"""Chapter 12's copying model (course_lib.experiments.copying): the committed weights match the
code's configs and are reproduced by re-running the start of their training; the command line and
the loader fail with one clear line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from course_lib.experiments import copying
from course_lib.experiments.provenance import cpu_capability, cpu_name, same_kernels


def test_committed_model_matches_the_code_that_trains_it():
    model, record = copying.load_copying_model()
    # a field added to either config since the model was trained held its default there
    for saved, config in ((record["model_config"], copying.COPY_MODEL),
                          (record["train_config"], copying.COPY_RUN)):
        defaults = {f.name: f.default for f in dataclasses.fields(config)}
        assert set(saved) <= set(defaults)
        assert {k: saved.get(k, defaults[k]) for k in defaults} == dataclasses.asdict(config)
    assert (record["repeat_share"], record["min_period"]) == (copying.REPEAT_SHARE, copying.MIN_PERIOD)
    assert len(record["step_losses"]) == copying.COPY_RUN.steps
    assert not record["provenance"]["dirty"] or not any(
        f.startswith("course_lib/") for f in record["provenance"]["dirty_files"])
    assert "python -m course_lib.experiments.copying" in record["provenance"]["command"]
    assert not model.training


def test_rerunning_the_start_reproduces_the_committed_losses():
    """Ten steps on the full run's schedule: exactly the committed losses on the CPU, instruction
    set, torch and thread count that made them; to rounding elsewhere."""
    _, record = copying.load_copying_model()
    _, losses, _ = copying.train_copying_model(stop_after=10)
    committed = record["step_losses"][:10]
    here = {"cpu": cpu_name(), "cpu_capability": cpu_capability(), "torch": torch.__version__,
            "threads": copying.THREADS}
    if same_kernels(record["provenance"], here):
        assert losses == committed
    else:
        assert losses == pytest.approx(committed, rel=1e-4)


def test_batches_are_half_repeated_passages():
    data = torch.arange(5_000)
    next_batch = copying.copying_batches(data, copying.COPY_RUN, torch.Generator().manual_seed(0))
    x, y = next_batch()
    B, T = copying.COPY_RUN.batch_size, copying.COPY_RUN.context
    assert x.shape == y.shape == (B, T)
    repeated = int(B * copying.REPEAT_SHARE)
    steps = x[:, 1:] - x[:, :-1]  # consecutive tokens of arange step by 1 unless the passage restarts
    assert (steps[:repeated] < 0).any(dim=1).all()  # every repeated row restarts its passage
    assert (steps[repeated:] == 1).all()  # the others are ordinary windows


def test_missing_model_names_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m course_lib.experiments.copying"):
        copying.load_copying_model(tmp_path / "copying" / "model.pt")


def test_cli_unwritable_output_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    done = subprocess.run([sys.executable, "-m", "course_lib.experiments.copying", "--out", str(blocker)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot write" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "file" / "copying").exists()


def test_cli_keeps_an_existing_model(tmp_path):
    path = tmp_path / "copying" / "model.pt"
    path.parent.mkdir()
    path.write_bytes(b"kept")
    done = subprocess.run([sys.executable, "-m", "course_lib.experiments.copying", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "kept" in done.stdout
    assert path.read_bytes() == b"kept"


def test_the_model_ships_with_the_package_and_the_repository():
    """Chapter 12 loads it wherever it runs: tracked by git (a fresh clone has it) and named in the
    package data (pip install, as in Colab, brings it)."""
    import fnmatch
    import pathlib
    import shutil
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[1]
    relative = pathlib.Path(copying.model_path()).relative_to(root / "course_lib").as_posix()
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["course_lib"]
    assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), relative
    if shutil.which("git") and (root / ".git").exists():
        tracked = subprocess.run(["git", "ls-files", f"course_lib/{relative}"], cwd=root, capture_output=True,
                                 text=True, check=True).stdout.split()
        assert tracked == [f"course_lib/{relative}"]

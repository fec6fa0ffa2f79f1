"""course_lib.device.usable_device: what every command line does with its --device."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from course_lib.device import get_device, usable_device
from setup_cell import ROOT


def test_no_name_is_the_default_choice_and_a_usable_name_is_that_device():
    assert usable_device(None) == get_device()
    assert usable_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name", ["nonsense", "cuda:x", "cuda"])
def test_a_device_this_machine_cannot_use_is_a_one_line_value_error(name):
    if name == "cuda" and torch.cuda.is_available():
        assert usable_device(name).type == "cuda"
        return
    with pytest.raises(ValueError, match=rf"^--device '{name}' is not usable here: [^\n]+$"):
        usable_device(name)
    with pytest.raises(ValueError, match=rf"^--gpu '{name}' is not usable here"):
        usable_device(name, option="--gpu")


def test_training_on_a_missing_gpu_ends_in_one_line(tmp_path):
    """A GPU this machine does not have (on a CPU-only torch, making a CUDA tensor raises an
    AssertionError; with GPUs, an invalid ordinal a RuntimeError): the command ends with one line
    and a non-zero status, and writes nothing."""
    done = subprocess.run([sys.executable, "-m", "course_lib.train", "--preset", "tiny", "--device", "cuda:99",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "--device 'cuda:99' is not usable here" in done.stderr
    assert not (tmp_path / "run" / "checkpoint.pt").exists()

"""Where a result came from: the code (commit), the software (torch, Python), the machine (CPU,
threads), the date and the command, stored with every run so that a number in the book can be traced
and regenerated."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys

import torch

__all__ = ["provenance", "git_commit", "cpu_name", "cpu_capability", "same_kernels"]


def git_commit(folder: str | None = None) -> dict:
    """``{"commit": sha or None, "dirty": bool or None, "dirty_files": [...]}`` of the git checkout
    that holds the package (None where there is no git or no checkout, as in an installed wheel).
    ``dirty``: uncommitted changes to tracked files, which the commit alone does not describe;
    ``dirty_files`` names them, so that one can tell whether the code a run executed was among
    them."""
    folder = folder or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.rstrip("\n") if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    commit = commit.strip() if commit else None
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    files = sorted(line[3:] for line in status.splitlines()) if status else []
    return {"commit": commit, "dirty": None if status is None else bool(status), "dirty_files": files}


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_capability() -> str | None:
    """The instruction set torch's CPU kernels were chosen for here ("AVX2", "AVX512", ...): two
    CPUs of one model name (a cloud's "AMD EPYC") can differ in it, and kernels written for another
    instruction set add in another order, so that their results differ in the last bits."""
    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return get() if get is not None else None


def same_kernels(made: dict, here: dict) -> bool:
    """Whether two provenances describe the same arithmetic: the same CPU model name, instruction
    set, torch and thread count, so that one deterministic run repeats the other bit for bit. A
    provenance written before the instruction set was recorded (2026-12-07) matches none."""
    keys = ("cpu", "cpu_capability", "torch", "threads")
    return made.get("cpu_capability") is not None and all(made.get(k) == here.get(k) for k in keys)


def provenance(command: list[str] | None = None, *, code: dict | None = None) -> dict:
    """The provenance of a run made now by this process. ``command``: the command line that
    regenerates it (default: this process's). ``code``: :func:`git_commit`'s answer, when already
    known (asking git once per grid instead of once per run)."""
    return {
        **(code if code is not None else git_commit()),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "cpu": cpu_name(),
        "cpu_capability": cpu_capability(),
        "cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(command if command is not None else [sys.executable, *sys.argv]),
    }

"""Running a student's code where it cannot hurt the rest of the grading.

:func:`run_isolated` runs a job in a forked copy of the process (POSIX): whatever the student's function
does there — loop forever, exhaust memory, call ``os._exit``, crash a C extension, replace hooks — ends
with that process, and the kernel that grades the other tasks carries on. The copy is killed after a
time limit and cannot allocate more than a memory limit. Where forking is not possible (Windows, or a
CUDA context already created, which a forked process cannot use) the job runs in this process with a
timer instead.

A job returns ``None`` when the task passes and a message when it fails; that is all that crosses back.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable

import torch

__all__ = ["run_isolated", "can_fork"]

# What a forked check may allocate beyond what the process already uses.
MEMORY_HEADROOM = 2 * 2**30


class _TimeUp(BaseException):
    """Raised in the student's code by the in-process timer (a BaseException: `except Exception` in the
    student's code does not swallow it)."""


def can_fork() -> bool:
    """Whether jobs can run in a forked process here."""
    if os.environ.get("COURSE_GRADING_IN_PROCESS") == "1" or not hasattr(os, "fork"):
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_initialized())


def run_isolated(job: Callable[[], str | None], *, seconds: float, subject: str,
                 fork: bool = True) -> str | None:
    """Run ``job`` (which returns None or a failure message) within ``seconds``; a crash, a time-out or
    running out of memory becomes a message about ``subject`` (e.g. "`layer_norm`"). ``fork=False``
    keeps the job in this process (with a timer) even where it could fork."""
    if fork and can_fork():
        return _forked(job, seconds, subject)
    return _in_process(job, seconds, subject)


# --- in a forked process -------------------------------------------------------------------------------

def _forked(job, seconds, subject) -> str | None:
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: run the job, send its verdict, and leave without cleaning up anything
        os.close(read_end)
        _child(job, write_end, subject)
    os.close(write_end)
    try:
        payload, finished = _read(read_end, pid, seconds)
    except BaseException:  # interrupted (the notebook's own time limit): leave no child behind
        _kill(pid)
        raise
    finally:
        os.close(read_end)
    if not finished:
        _kill(pid)
        return (f"{subject} did not finish within {seconds:g} seconds: an infinite loop, or far too much "
                f"work for these small inputs?")
    _, status = os.waitpid(pid, 0)
    if payload:
        try:
            return json.loads(payload.decode())["message"]
        except (ValueError, KeyError):
            pass
    return _death_message(status, subject)


def _child(job, write_end, subject) -> None:
    code = 0
    try:
        import faulthandler

        faulthandler.disable()  # a crash in the student's code is reported by the parent, not dumped
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # what the student prints goes nowhere (never into the kernel's channels)
        os.dup2(devnull, 2)
        sys.stdout = sys.stderr = open(os.devnull, "w")
        for sig in (signal.SIGINT, signal.SIGALRM, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        torch.set_num_threads(1)  # no OpenMP pool after fork; one core per check
        _limit_memory()
        try:
            message = job()
        except MemoryError:
            message = f"{subject} ran out of memory (it tried to allocate far more than these inputs need)."
        except BaseException as err:  # sys.exit in the student's code, or a bug in the job itself
            message = _escaped_message(err, subject)
        data = json.dumps({"message": message}).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view):]
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def _escaped_message(err: BaseException, subject: str) -> str:
    if isinstance(err, SystemExit):
        return f"{subject} called sys.exit() (or exit()): a function must return its result, not end Python."
    if isinstance(err, KeyboardInterrupt):
        return f"{subject} was interrupted."
    return (f"the grader could not finish checking {subject} ({type(err).__name__}). If your code looks right, "
            f"tell your instructor.")


def _limit_memory() -> None:
    try:
        import resource
    except ImportError:  # not on this platform
        return
    used = _virtual_memory_bytes()
    if used is None:
        return
    limit = used + MEMORY_HEADROOM
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _virtual_memory_bytes() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _read(fd: int, pid: int, seconds: float) -> tuple[bytes, bool]:
    """Read the child's verdict until it closes the pipe; (data, finished in time)."""
    deadline = time.monotonic() + seconds
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _death_message(status: int, subject: str) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGKILL:
            return f"{subject} was killed by the system, most likely for using too much memory."
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        what = {"SIGSEGV": "a segmentation fault", "SIGABRT": "an abort", "SIGBUS": "a bus error",
                "SIGFPE": "a floating-point exception"}.get(name, f"signal {name}")
        return f"{subject} crashed the Python process ({what}), for example through ctypes or a C extension."
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return (f"{subject} ended the Python process (exit status {code}), for example with os._exit(): a function "
            f"must return its result.")


# --- in this process -----------------------------------------------------------------------------------

def _in_process(job, seconds, subject) -> str | None:
    import threading

    timer = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if timer:
        def time_up(signum, frame):
            raise _TimeUp()

        previous = signal.signal(signal.SIGALRM, time_up)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return job()
    except _TimeUp:
        return (f"{subject} did not finish within {seconds:g} seconds: an infinite loop, or far too much "
                f"work for these small inputs?")
    except MemoryError:
        return f"{subject} ran out of memory (it tried to allocate far more than these inputs need)."
    except SystemExit as err:
        return _escaped_message(err, subject)
    finally:
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

"""The machinery every checker shares.

A checker compares a student's function with the reference over many cases that it draws with its own
generator. When an output is wrong it tries a list of known mistakes — functions that compute what a
solution with that mistake would return — and reports the first that matches, so the message names the
likely error ("you used the natural log") instead of showing numbers. Messages describe inputs by shape
and kind, never by value, and never contain reference outputs.

A task that teaches an operation scores nothing if it delegates the operation. :func:`forbid_calls`
runs the student's function under a profiler hook that sees every Python and C call made during it,
so it catches ``torch.logsumexp(x)``, ``x.logsumexp(-1)`` and an aliased ``from course_lib... import``
alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["Case", "Mistake", "Forbidden", "GradingError", "check_function", "forbid_calls", "describe"]


class GradingError(AssertionError):
    """Raised by a checker: the message is what the student reads."""


@dataclass(frozen=True)
class Case:
    """One input to try: ``label`` describes it without values (shapes and kinds only)."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Mistake:
    """A known wrong solution: ``compute(*args, **kwargs)`` is what it would return for a case."""

    message: str
    compute: Callable[..., Any]


@dataclass(frozen=True)
class Forbidden:
    """A function the task must not call. ``target`` is a Python function, a builtin, or a string
    ``"Tensor.name"`` for a tensor method; ``name`` is how the message refers to it."""

    target: Any
    name: str


def describe(x: torch.Tensor) -> str:
    """'float64 tensor of shape (4, 6)' — how messages refer to inputs (no values)."""
    return f"{str(x.dtype).replace('torch.', '')} tensor of shape {tuple(x.shape)}"


class _CallWatcher:
    """A ``sys.setprofile`` hook that records the first forbidden call it sees."""

    def __init__(self, forbidden: Iterable[Forbidden]):
        self.codes: dict[Any, str] = {}
        self.builtins: dict[int, str] = {}
        self.methods: dict[str, str] = {}
        self._keep = []  # keep builtins alive so their ids stay unique
        for item in forbidden:
            target = item.target
            if isinstance(target, str):
                owner, _, method = target.partition(".")
                if owner != "Tensor" or not method:
                    raise ValueError(f"Forbidden target strings look like 'Tensor.method', got {target!r}")
                self.methods[method] = item.name
            elif hasattr(target, "__code__"):
                self.codes[target.__code__] = item.name
            else:
                self.builtins[id(target)] = item.name
                self._keep.append(target)
        self.hit: str | None = None

    def __call__(self, frame, event, arg):
        if self.hit is not None:
            return
        if event == "call":
            self.hit = self.codes.get(frame.f_code)
        elif event == "c_call":
            name = self.builtins.get(id(arg))
            if name is None and isinstance(getattr(arg, "__self__", None), torch.Tensor):
                name = self.methods.get(getattr(arg, "__name__", ""))
            self.hit = name


def forbid_calls(fn: Callable, args: tuple, kwargs: dict, forbidden: Sequence[Forbidden], task: str) -> Any:
    """Call ``fn(*args, **kwargs)``; fail if it calls anything in ``forbidden``, directly or not."""
    watcher = _CallWatcher(forbidden)
    previous = sys.getprofile()
    sys.setprofile(watcher)
    try:
        out = fn(*args, **kwargs)
    finally:
        sys.setprofile(previous)
    if watcher.hit is not None:
        raise GradingError(
            f"{task} calls {watcher.hit}, which computes the very thing this task asks you to build. "
            f"Write it with elementary tensor operations (the exercise says which are allowed); "
            f"a solution that delegates scores no points."
        )
    return out


def _call_student(fn: Callable, case: Case, task: str, forbidden: Sequence[Forbidden] = ()) -> Any:
    """Run the student's function on one case, turning its own errors into a readable GradingError."""
    try:
        if forbidden:
            return forbid_calls(fn, case.args, case.kwargs, forbidden, task)
        return fn(*case.args, **case.kwargs)
    except NotImplementedError:
        raise GradingError(f"{task} is not implemented yet: replace `raise NotImplementedError()` with your code.") from None
    except GradingError:
        raise
    except Exception as err:  # the student's own error: say where, not what the answer is
        raise GradingError(f"{task} raised {type(err).__name__} for {case.label}: {err}") from None


def _to_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, (np.ndarray, np.generic, float, int)) and not isinstance(x, bool):
        return torch.as_tensor(np.asarray(x))
    return None


def _tolerances(dtype: torch.dtype, rtol: float | None, atol: float | None) -> tuple[float, float]:
    default = {torch.float64: (1e-7, 1e-9), torch.float32: (1e-4, 1e-5)}.get(dtype, (2e-2, 2e-2))
    return (default[0] if rtol is None else rtol, default[1] if atol is None else atol)


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> bool:
    if got.shape != want.shape:
        return False
    got, want = got.to("cpu", torch.float64), want.to("cpu", torch.float64)
    return bool(torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))


def check_function(
    student: Any,
    reference: Callable,
    cases: Sequence[Case],
    *,
    task: str,
    mistakes: Sequence[Mistake] = (),
    forbidden: Sequence[Forbidden] = (),
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Compare ``student`` with ``reference`` on every case; raise :class:`GradingError` on the first
    disagreement, with the message of the first known mistake that reproduces the student's output.

    Tolerances default to what the reference's output dtype can resolve.
    """
    if not callable(student):
        raise GradingError(f"{task} should be a function, but it is a {type(student).__name__}.")
    if not cases:
        raise ValueError("a checker needs at least one case")
    for i, case in enumerate(cases):
        got_raw = _call_student(student, case, task, forbidden if i == 0 else ())  # watch the first call
        want = reference(*case.args, **case.kwargs).detach()
        got = _to_tensor(got_raw)
        if got is None:
            raise GradingError(
                f"{task} returned a {type(got_raw).__name__} for {case.label}; it should return a tensor."
            )
        r, a = _tolerances(want.dtype, rtol, atol)
        if _close(got, want, r, a):
            continue
        for mistake in mistakes:
            try:
                wrong = _to_tensor(mistake.compute(*case.args, **case.kwargs))
            except Exception:  # a mistake model that does not apply to this case
                continue
            if wrong is not None and not _close(wrong, want, r, a) and _close(got, wrong, r, a):
                raise GradingError(f"{task} is wrong for {case.label}. Likely mistake: {mistake.message}")
        if got.shape != want.shape:
            raise GradingError(
                f"{task} returned shape {tuple(got.shape)} for {case.label}; the expected shape is "
                f"{tuple(want.shape)}. Check which dimensions you reduce over."
            )
        if not torch.isfinite(got).all() and torch.isfinite(want).all():
            raise GradingError(f"{task} returned NaN or inf for {case.label}, where the answer is finite.")
        raise GradingError(
            f"{task} returns wrong values for {case.label}. Re-derive the formula on a small example "
            f"by hand and compare with your code line by line."
        )


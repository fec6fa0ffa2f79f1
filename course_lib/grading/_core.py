"""The machinery every checker shares: a graded task is a short description, this module does the rest.

A :class:`Task` says what the student writes (``name``), how the right answer is computed
(``reference``), which inputs to try (``cases``, drawn from the task's own generator), which realistic
mistakes to recognise (``mistakes``: functions computing what a solution with that mistake returns),
what the solution may not use (``forbid``) and what its output must look like (``output``). Checking a
student's function then goes, for every case:

1. copy the inputs three times: a pristine copy kept aside, one for the reference (computed *before*
   the student's function runs), one for the student;
2. call the student's function under a :class:`~._watch.Watch` — a delegation on any case fails;
3. compare the student's copy of the inputs with the pristine one — changing an input fails;
4. check the output's kind, dtype, device and shape against the contract — never cast away;
5. compare the values; when they differ, name the first catalogued mistake that reproduces them.

The whole check runs in a separate process with a time and memory limit (:mod:`._isolate`). Messages
describe inputs by shape and kind (``Case.label``), never show reference values, and never show the
checker's code.
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import os
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ._isolate import run_isolated
from ._watch import Forbid, watching

__all__ = ["Case", "Mistake", "Task", "GradingError", "NotDoneYet", "Plain", "Forbid", "TensorOutput", "NumberOutput",
           "BoolOutput", "TupleOutput", "describe", "self_check_timed_out"]


class GradingError(AssertionError):
    """Raised by a checker: the message is what the student reads."""


class NotDoneYet(GradingError):
    """Raised by a checker when the student's function still raises NotImplementedError."""


class Plain(str):
    """A message from a task's ``explain`` hook that describes the error without naming a mistake."""


_NOT_DONE = "is not implemented yet: replace `raise NotImplementedError()` with your code."


@dataclass(frozen=True)
class Case:
    """One input to try: ``label`` describes it without values (shapes and kinds only)."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Mistake:
    """A known wrong solution: ``compute(*args, **kwargs)`` is what it would return for a case, and
    ``message`` names the mistake in the task's own terms (without giving the solution away)."""

    message: str
    compute: Callable[..., Any]


def describe(x: torch.Tensor) -> str:
    """'float64 tensor of shape (4, 6)' — how messages refer to inputs (no values)."""
    return f"{_dtype(x.dtype)} tensor of shape {tuple(x.shape)}"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# --- output contracts ------------------------------------------------------------------------------------

class TensorOutput:
    """The output is a tensor with the reference's dtype, device and shape (the default contract).

    ``dtype_rule`` is how a message states the rule, e.g. "the same dtype as x" (default) or "int64 token
    ids"."""

    def __init__(self, dtype_rule: str = "the input's dtype"):
        self.dtype_rule = dtype_rule

    def kind(self, got, want, name: str, case: Case) -> str | None:
        if not isinstance(got, torch.Tensor):
            return f"{name} returned a {type(got).__name__} for {case.label}; it should return a tensor."
        if got.dtype != want.dtype:
            hint = ""
            if want.is_floating_point() and got.is_floating_point():
                hint = (" Compute in the input's dtype, or cast back at the end (.to(x.dtype) or .type_as(x)); "
                        "a float64 or float32 constant created without dtype= can promote the result.")
            elif not want.is_floating_point() and got.is_floating_point():
                hint = " Indices and ids must be integers: use integer operations (//, argmax) or .long()."
            elif want.dtype == torch.bool:
                hint = " A mask is a bool tensor (True = may attend)."
            return (f"{name} returned a {_dtype(got.dtype)} tensor for {case.label}; it should be "
                    f"{_dtype(want.dtype)} ({self.dtype_rule}).{hint}")
        if got.device != want.device:
            return (f"{name} returned a tensor on {got.device} for inputs on {want.device}: create new tensors "
                    f"on the inputs' device (device=x.device).")
        return None

    def values(self, x) -> torch.Tensor | None:
        return x.detach() if isinstance(x, torch.Tensor) else None


class NumberOutput:
    """The output is a plain number: an ``int`` when ``integer``, else an int or a float. A 0-d tensor
    is not accepted for an integer (counts are Python ints)."""

    def __init__(self, what: str, integer: bool = False):
        self.what, self.integer = what, integer

    def kind(self, got, want, name: str, case: Case) -> str | None:
        if isinstance(got, bool) or not isinstance(got, numbers.Real) or isinstance(got, torch.Tensor):
            kind = "tensor" if isinstance(got, torch.Tensor) else type(got).__name__
            return f"{name} returned a {kind} for {case.label}; it should return {self.what} (a Python number)."
        if self.integer and not isinstance(got, numbers.Integral):
            return (f"{name} returned a {type(got).__name__} for {case.label}; it should return {self.what} as "
                    f"an int (use // for exact division, or round() a float you know is whole).")
        return None

    def values(self, x) -> torch.Tensor | None:
        if isinstance(x, numbers.Real) and not isinstance(x, bool):
            return torch.tensor(float(x), dtype=torch.float64)
        return None


class BoolOutput:
    """The output is a truth value: a Python ``bool`` (numpy's ``bool_`` is accepted too). An int or a
    tensor is not: ``what`` says what the value means."""

    def __init__(self, what: str):
        self.what = what

    def kind(self, got, want, name: str, case: Case) -> str | None:
        if isinstance(got, (bool, np.bool_)):
            return None
        if isinstance(got, torch.Tensor):
            return (f"{name} returned a tensor for {case.label}; it should return {self.what} as a Python bool "
                    f"(bool(...) of a one-element tensor).")
        return f"{name} returned a {type(got).__name__} for {case.label}; it should return {self.what} (True or False)."

    def values(self, x) -> torch.Tensor | None:
        if isinstance(x, (bool, np.bool_)):
            return torch.tensor(float(x), dtype=torch.float64)
        return None


class TupleOutput:
    """The output is a tuple of ``len(parts)`` values, each with its own contract, e.g. (attention
    update, FFN update); ``names`` says how messages refer to each part."""

    def __init__(self, parts: Sequence, names: Sequence[str]):
        self.parts, self.names = list(parts), list(names)

    def kind(self, got, want, name: str, case: Case) -> str | None:
        if not isinstance(got, (tuple, list)) or len(got) != len(self.parts):
            return (f"{name} returned a {type(got).__name__} for {case.label}; it should return a tuple of "
                    f"{len(self.parts)}: ({', '.join(self.names)}).")
        for part, g, w, part_name in zip(self.parts, got, want, self.names):
            message = part.kind(g, w, f"{name}'s {part_name}", case)
            if message:
                return message
        return None

    def values(self, x) -> torch.Tensor | None:
        if not isinstance(x, (tuple, list)) or len(x) != len(self.parts):
            return None
        flat = [part.values(v) for part, v in zip(self.parts, x)]
        if any(v is None for v in flat):
            return None
        if len({v.dtype for v in flat}) > 1:
            flat = [v.double() for v in flat]
        return torch.cat([v.reshape(-1) for v in flat])  # one vector: the parts in order


# --- the task ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Task:
    """A graded task, described; :meth:`check` grades a student's function against it.

    ``run(student, *args, **kwargs)``, when given, calls the student's function and returns what to
    compare with ``reference(*args, **kwargs)`` (for tasks whose answer is a side effect, such as
    initialising a module). ``mutates`` names the arguments the task is meant to change in place.
    ``rtol``/``atol`` default to what the reference output's dtype can resolve. ``hint`` ends the
    message for a wrong answer that matches no catalogued mistake. ``explain(got, want, case)`` may
    name a mistake that is easier to recognise by inspection than by a mistake model (it returns a
    message or None). ``prepare()`` runs in the grading process before the task's first isolated run
    (and before a self-check of a function of the task's name): what it loads, such as torch's
    optimizer machinery, is then loaded once rather than again in every child, inside its time limit.
    """

    name: str
    reference: Callable
    cases: Callable[[torch.Generator], Sequence[Case]]
    seed: int
    mistakes: Sequence[Mistake] = ()
    forbid: Forbid = Forbid()
    output: Any = field(default_factory=TensorOutput)
    run: Callable | None = None
    mutates: tuple[str, ...] = ()
    rtol: float | None = None
    atol: float | None = None
    seconds: float = 10.0
    hint: str = "Re-derive the formula on a small example by hand and compare with your code line by line."
    explain: Callable | None = None
    prepare: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        _PREPARE.setdefault(self.name, []).append(self.prepare)  # every task, so that shared names show

    def check(self, student) -> None:
        """Grade ``student``; raise :class:`GradingError` with a message for the student if it fails."""
        subject = f"`{self.name}`"
        if not callable(student):
            raise GradingError(f"{subject} should be a function, but it is a {type(student).__name__}.")
        if self.name in _SELF_CHECK_TIMEOUTS:
            raise GradingError(f"{subject} did not finish within its time limit in the self-check above (an "
                               f"infinite loop?), so it was not graded further.")
        if not _intact():
            raise GradingError(f"{subject} was not graded: the grader's own code was changed by the notebook "
                               f"(a solution must not modify course_lib.grading).")
        if self.prepare is not None:
            self.prepare()
        message = run_isolated(lambda: _grade(self, student), seconds=self.seconds, subject=subject)
        if message and message.endswith(_NOT_DONE):
            raise NotDoneYet(message)
        if message:
            raise GradingError(message)

    def checker(self, doc: str) -> Callable[[Any], None]:
        """The ``check_<name>`` function a hidden test calls."""

        def check(student) -> None:
            self.check(student)

        check.__name__ = check.__qualname__ = f"check_{self.name}"
        check.__doc__ = doc
        check.task = self
        return check


# Task name -> the ``prepare`` functions (or None) of every task of that name (see Task); a self-check
# runs them.
_PREPARE: dict[str, list[Callable[[], None] | None]] = {}


def prepare_for(name: str) -> None:
    """Run what the tasks called ``name`` prepare, if it is one task's name (names such as
    ``predictions``, which several exercises share, prepare nothing here)."""
    tasks = _PREPARE.get(name, [])
    if len(tasks) == 1 and tasks[0] is not None:
        tasks[0]()


# Filled by self-checks run during autograding (see _selfcheck): the functions whose visible check ran
# out of time, so that the hidden test does not spend the same time again.
_SELF_CHECK_TIMEOUTS: set[str] = set()


def self_check_timed_out(name: str) -> None:
    _SELF_CHECK_TIMEOUTS.add(name)


def _intact() -> bool:
    """Whether the functions grading depends on are still the ones this module was loaded with (a
    notebook can reassign module attributes; this catches the plain ways of doing so)."""
    from . import _isolate, _watch

    current = (globals().get("run_isolated"), globals().get("_grade"), globals().get("_grade_case"),
               globals().get("_compare"), globals().get("watching"), Task.check, _isolate.run_isolated,
               _isolate._forked, _watch.watching, _watch.Watch.__exit__)
    return current == _ORIGINALS


def _grade(task: Task, student) -> str | None:
    """Every case, in order; the first failure's message (or None). Runs in the isolated process."""
    cases = list(task.cases(torch.Generator().manual_seed(task.seed)))
    if not cases:
        raise ValueError("a task needs at least one case")
    names = _parameter_names(task.reference)
    for case in cases:
        message = _grade_case(task, student, case, names)
        if message:
            return message
    return None


def _parameter_names(fn) -> list[str]:
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def _copy(case: Case) -> tuple[tuple, dict]:
    return copy.deepcopy((case.args, case.kwargs))


def _grade_case(task: Task, student, case: Case, names: list[str]) -> str | None:
    name = f"`{task.name}`"
    pristine_args, pristine_kwargs = _copy(case)
    ref_args, ref_kwargs = _copy(case)
    want = task.reference(*ref_args, **ref_kwargs)  # before the student's code runs
    args, kwargs = _copy(case)
    failure = None  # what the student's call raised, reported unless a forbidden use explains it first
    with watching(task.forbid) as watch:
        try:
            got = task.run(student, *args, **kwargs) if task.run else student(*args, **kwargs)
        except NotImplementedError:
            return f"{name} {_NOT_DONE}"
        except GradingError as err:  # raised by the task's own `run` wrapper
            failure = str(err)
        except MemoryError:
            failure = f"{name} ran out of memory for {case.label} (it tried to allocate far more than it needs)."
        except Exception as err:  # the student's own error: say where, not what the answer is
            failure = _student_error(name, case, err)
    if watch.offence is not None and watch.escape:
        return (f"{name} uses {watch.offence} (for {case.label}). The grader must see every operation your "
                f"function runs, so this is not allowed: compute the result directly, in this thread.")
    if watch.offence is not None:
        return (f"{name} uses {watch.offence}, which does the work this task asks you to do (for {case.label}). "
                f"Write it with the elementary operations the exercise allows; a solution that delegates scores "
                f"no points.")
    if failure is not None:
        return failure
    changed = _changed_arguments(pristine_args, pristine_kwargs, args, kwargs, names, set(task.mutates))
    if changed:
        which = " and ".join(f"`{n}`" for n in changed)
        return (f"{name} changed its input {which} in place (for {case.label}). Leave inputs as they are: use "
                f"out-of-place operations (y = x * 2, not x *= 2 or x.mul_(2)) or work on a copy (x.clone()).")
    return _compare(task, got, want, case, pristine_args, pristine_kwargs)


def _student_error(name: str, case: Case, err: Exception) -> str:
    if "can't allocate memory" in str(err) or "out of memory" in str(err):
        return f"{name} ran out of memory for {case.label} (it tried to allocate far more than it needs)."
    hint = ""
    if "must match the size of tensor" in str(err) or "cannot be broadcast" in str(err):
        hint = (" — the shapes do not broadcast: did a reduction drop its dimension (keepdim=True), or is an "
                "unsqueeze or a transpose missing?")
    return f"{name} raised {type(err).__name__} for {case.label}: {_short(err)}{hint}"


def _short(err: Exception, limit: int = 300) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[:limit] + " …"


def _same(a, b) -> bool:
    """Whether two copies of an input still hold the same contents."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return bool(torch.equal(a, b))
    if isinstance(a, torch.nn.Module):
        sa, sb = a.state_dict(), b.state_dict() if isinstance(b, torch.nn.Module) else None
        return sb is not None and sa.keys() == sb.keys() and all(_same(sa[k], sb[k]) for k in sa)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, numbers.Number):  # an element of a list may have been replaced (a list sorted in place)
        return isinstance(b, numbers.Number) and (a == b or (a != a and b != b))
    return True  # strings, functions: cannot be changed in place


def _changed_arguments(args0, kwargs0, args1, kwargs1, names, allowed) -> list[str]:
    changed = []
    for i, (a, b) in enumerate(zip(args0, args1)):
        label = names[i] if i < len(names) else f"argument {i + 1}"
        if label not in allowed and not _same(a, b):
            changed.append(label)
    for key in kwargs0:
        if key not in allowed and not _same(kwargs0[key], kwargs1.get(key)):
            changed.append(key)
    return changed


def _tolerances(want: torch.Tensor, rtol, atol) -> tuple[float, float]:
    default = {torch.float64: (1e-7, 1e-9), torch.float32: (1e-4, 1e-5)}.get(want.dtype, (2e-2, 2e-2))
    return (default[0] if rtol is None else rtol, default[1] if atol is None else atol)


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> bool:
    if got.shape != want.shape:
        return False
    if not (got.is_floating_point() or want.is_floating_point()):
        return bool(torch.equal(got.cpu(), want.cpu()))
    # the dtypes were checked already: widening both to float64 only makes the comparison exact
    got, want = got.to("cpu", torch.float64), want.to("cpu", torch.float64)
    return bool(torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))


def _compare(task: Task, got, want, case: Case, args, kwargs) -> str | None:
    name = f"`{task.name}`"
    contract = task.output
    if isinstance(want, torch.Tensor):
        want = want.detach()
    kind = contract.kind(got, want, name, case)
    if kind:
        return kind
    got_v, want_v = contract.values(got), contract.values(want)
    rtol, atol = _tolerances(want_v, task.rtol, task.atol)
    if _close(got_v, want_v, rtol, atol):
        return None
    if task.explain is not None:
        explained = task.explain(got, want, case)
        if isinstance(explained, Plain):
            return f"{name} is wrong for {case.label}: {explained}"
        if explained:
            return f"{name} is wrong for {case.label}. Likely mistake: {explained}"
    for mistake in task.mistakes:
        try:
            margs, mkwargs = copy.deepcopy((args, kwargs))
            wrong = contract.values(mistake.compute(*margs, **mkwargs))
        except Exception:  # a mistake model that does not apply to this case
            continue
        if wrong is not None and not _close(wrong, want_v, rtol, atol) and _close(got_v, wrong, rtol, atol):
            return f"{name} is wrong for {case.label}. Likely mistake: {mistake.message}"
    if got_v.shape != want_v.shape:
        return (f"{name} returned shape {tuple(got_v.shape)} for {case.label}; the expected shape is "
                f"{tuple(want_v.shape)}. Check which dimensions you reduce over, and every view/reshape.")
    generic = _generic_diagnosis(got_v, want_v, rtol, atol)
    if generic:
        return f"{name} is wrong for {case.label}: {generic}"
    return f"{name} returns wrong values for {case.label}. {task.hint}"


def _generic_diagnosis(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> str | None:
    """Shapes of error that any task can name without knowing the task."""
    if not (got.is_floating_point() and want.is_floating_point()):
        return None
    g, w = got.to("cpu", torch.float64), want.to("cpu", torch.float64)
    if not torch.isfinite(g).all() and torch.isfinite(w).all():
        return ("it returned NaN or inf where the answer is finite: look for a log or a division of 0, an exp "
                "that overflows, or -inf that meets 0 · (-inf).")
    if w.dim() >= 2 and w.shape[-1] == w.shape[-2] and torch.allclose(g, w.transpose(-1, -2), rtol, atol):
        return "its result is the transpose of the right one (the last two dimensions are swapped)."
    if torch.allclose(g, -w, rtol, atol):
        return "its result has the opposite sign."
    finite = torch.isfinite(w) & torch.isfinite(g) & (w.abs() > atol)
    if finite.sum() >= 2:
        ratio = g[finite] / w[finite]
        if (ratio - ratio.mean()).abs().max() <= 10 * rtol * ratio.abs().mean() and not math.isclose(
                ratio.mean().item(), 1.0, rel_tol=rtol):
            return ("its result is a constant multiple of the right one: a scale factor is missing, extra, or "
                    "inverted.")
    return None


def wrap(message: str, width: int = 88) -> str:
    """A long message on several lines (feedback pages do not scroll long lines well)."""
    return textwrap.fill(message, width=width)


def autograding() -> bool:
    """Whether nbgrader is executing this notebook (autograde or validate)."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


_ORIGINALS = (run_isolated, _grade, _grade_case, _compare, watching, Task.check,
              __import__("course_lib.grading._isolate", fromlist=["x"]).run_isolated,
              __import__("course_lib.grading._isolate", fromlist=["x"])._forked,
              __import__("course_lib.grading._watch", fromlist=["x"]).watching,
              __import__("course_lib.grading._watch", fromlist=["x"]).Watch.__exit__)

"""Naming a mistake from what a wrong answer gets wrong, rather than from a list of wrong programs.

A checker that recognises a wrong answer by recomputing known wrong implementations names only the
mistakes someone thought of. The tools here let a task's ``explain`` hook reason from the error itself:

* **probing** — running the student's function again on inputs chosen to expose what it computes: a
  weight set to the identity, values one-hot in their position, one configuration field changed at a
  time. A task's ``run`` remembers the function (:func:`remembering`, or :func:`remember` inside a
  task's own ``run``); ``explain`` calls it again through :func:`probe`, which returns None where the
  function raises. Probes run after the verdict (the answer is already wrong), only to word the
  message.
* **numbers** — an error ``got − want`` written as a small integer combination of the named terms an
  answer is built from (:func:`fit_terms` over many probes, :func:`term_story` for one number), or a
  ratio ``got / want`` written as a product of named factors (:func:`factor_story`).
* **wording** — :func:`count_words` ("one … too many", "two … too few") and :func:`safe`, which turns
  an ``explain`` hook that fails on an odd answer into one that says nothing (the generic feedback
  then applies).

Nothing here may put a reference value into a message: stories name terms and factors, and counts of
the student's own error ("one D × F matrix too few per block"), never the answer.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction

import numpy as np
import torch

__all__ = ["remember", "remembering", "recall", "probe", "safe", "fit_terms", "term_story", "factor_story",
           "count_words", "close", "same_tensor", "reasoned_predictions", "by_factors"]

_REMEMBERED: dict[str, Callable] = {}


def remember(student: Callable, key: str = "student") -> None:
    """Keep the student's function (or class) for the task's ``explain`` hook to probe. Each check runs
    in its own process (or replaces the entry before its first case), so one entry per task suffices."""
    _REMEMBERED[key] = student


def remembering(student: Callable, *args, **kwargs):
    """A task's ``run``: remember the function, then call it as the grader would have."""
    remember(student)
    return student(*args, **kwargs)


def recall(key: str = "student") -> Callable:
    """The remembered function (or a function that raises, when there is none)."""
    return _REMEMBERED.get(key, _missing)


def _missing(*args, **kwargs):
    raise LookupError("no function was remembered for this task")


def probe(*args, key: str = "student", **kwargs):
    """The remembered function called on a probe input; None when there is none or it raises."""
    student = _REMEMBERED.get(key)
    if student is None:
        return None
    try:
        return student(*args, **kwargs)
    except Exception:  # a probe the function cannot handle says nothing
        return None


def safe(explain: Callable) -> Callable:
    """An ``explain`` hook that returns None (no diagnosis) instead of raising on an odd answer."""

    @functools.wraps(explain)
    def wrapped(*args, **kwargs):
        try:
            return explain(*args, **kwargs)
        except Exception:
            return None

    return wrapped


# --- numbers -----------------------------------------------------------------------------------------------

def close(a: float, b: float, rtol: float = 1e-9, atol: float = 0.0) -> bool:
    """|a − b| ≤ atol + rtol · |b|, for finite floats."""
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= atol + rtol * abs(b)


def fit_terms(samples: Sequence[tuple[float, dict[str, float]]], names: Sequence[str], *,
              denominators: Iterable[int] = (1, 2), largest: int = 64) -> dict[str, Fraction] | None:
    """Write each sample's difference as one combination Σ c_name · value_name, the same coefficients for
    every sample: least squares, each coefficient rounded to a multiple of 1/denominator (at most
    ``largest`` in size), then checked exactly on every sample. Returns the nonzero coefficients, {} when
    every difference is 0, or None when no such combination fits (the error is not made of these terms).
    ``samples`` are (difference, {name: value}) pairs, e.g. one per probe configuration."""
    if not samples:
        return None
    a = np.array([[float(values[n]) for n in names] for _, values in samples], dtype=np.float64)
    b = np.array([float(d) for d, _ in samples], dtype=np.float64)
    if not np.isfinite(a).all() or not np.isfinite(b).all():
        return None
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    solution, *_ = np.linalg.lstsq(a / scale, b, rcond=None)
    solution = solution / scale
    for den in denominators:
        coefs = [Fraction(round(c * den), den) for c in solution]
        if any(abs(c) > largest for c in coefs):
            continue
        if all(_exact(d) == sum(c * _exact(values[n]) for c, n in zip(coefs, names)) for d, values in samples):
            return {n: c for n, c in zip(names, coefs) if c != 0}
    return None


def _exact(x) -> Fraction:
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    return Fraction(x).limit_denominator(1_000_000)


def term_story(diff: float, terms: Sequence[tuple[float, str]], *, coefficients: Sequence[int] = (1, -1, 2, -2),
               max_terms: int = 2, rtol: float = 1e-6, atol: float = 0.0) -> list[tuple[int, str]] | None:
    """One number's error ``diff`` as Σ c · term over at most ``max_terms`` of ``terms`` ((value, text)
    pairs), each coefficient from ``coefficients``; the simplest such story (fewest terms, then the
    order given), or None. For a single number, prefer terms whose values cannot add up by chance."""
    for n in range(1, max_terms + 1):
        for chosen in itertools.combinations(range(len(terms)), n):
            for coefs in itertools.product(coefficients, repeat=n):
                total = sum(c * terms[i][0] for c, i in zip(coefs, chosen))
                if close(total, diff, rtol, atol):
                    return [(c, terms[i][1]) for c, i in zip(coefs, chosen)]
    return None


def factor_story(ratio: float, factors: Sequence[tuple[float, str]], *, max_factors: int = 2,
                 rtol: float = 2e-3) -> list[str] | None:
    """``ratio`` (got / want) as a product of at most ``max_factors`` of ``factors`` ((factor, text) pairs,
    each used at most once); the texts of the simplest such product, or None."""
    if not math.isfinite(ratio) or ratio == 0:
        return None
    for n in range(1, max_factors + 1):
        for chosen in itertools.combinations(factors, n):
            if close(math.prod(f for f, _ in chosen), ratio, rtol):
                return [text for _, text in chosen]
    return None


_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def count_words(k: Fraction | int, what: str, plural: str | None = None) -> str:
    """'one D × F matrix too many', 'two … too few', 'half a … too many' for the signed count k."""
    size = abs(Fraction(k))
    side = "too many" if k > 0 else "too few"
    if size == Fraction(1, 2):
        return f"half {what} {side}"
    number = _WORDS.get(int(size), str(size)) if size.denominator == 1 else str(size)
    noun = what if size == 1 else (plural or f"{what}s")
    return f"{number} {noun} {side}"


# --- tensors -----------------------------------------------------------------------------------------------

def same_tensor(a, b, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """Whether two tensors have the same shape and values (float64 comparison, NaN equal to NaN)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    return bool(torch.allclose(a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64),
                               rtol=rtol, atol=atol, equal_nan=True))


# --- predictions -------------------------------------------------------------------------------------------

Diagnose = Callable[[float, dict, dict], "str | None"]


def reasoned_predictions(task, truth: Callable[[], dict], diagnose: dict[str, Diagnose]):
    """The prediction task ``task`` (from ``predictions_task``) with an ``explain`` that first reasons about
    the first wrong key: ``diagnose[key](value, given, true)`` gets the student's value, all the student's
    values by key (right ones replaced by the truth) and the true values, and returns what the value gets
    wrong (or None). When it says nothing, the task's own list of telling wrong values speaks."""
    import dataclasses

    listed = task.explain

    def explain(got, want, case):
        true = truth()
        given, at = {}, 0
        for key, value in true.items():
            n = len(value) if isinstance(value, (list, tuple)) else 1
            part = got[at:at + n].tolist()
            given[key] = part if n > 1 or isinstance(value, (list, tuple)) else part[0]
            at += n
        for key, value in true.items():
            if given[key] == (list(value) if isinstance(value, (list, tuple)) else float(value)):
                continue
            if key in diagnose:
                try:
                    message = diagnose[key](given[key], given, true)
                except Exception:
                    message = None
                if message:
                    return f"`{key}`: {message}"
            break
        return listed(got, want, case)

    return dataclasses.replace(task, explain=explain)


def by_factors(key: str, factors: Sequence[tuple[float, str]], *, max_factors: int = 2,
               rtol: float = 2e-3) -> Diagnose:
    """A diagnosis of the prediction ``key`` from the ratio (its value) / (the true value), written as a
    product of named factors ((factor, what it means) pairs)."""

    def diagnose(value, given, true):
        story = factor_story(value / true[key], factors, max_factors=max_factors, rtol=rtol)
        return "; and ".join(story) + "." if story else None

    return diagnose

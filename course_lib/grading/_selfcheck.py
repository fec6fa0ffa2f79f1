"""The visible self-checks of the exercises: each prints one line, whatever happens.

    @self_check(layer_norm)
    def _():
        assert layer_norm(x, ones, zeros).shape == (4,), "the output should have the shape of x"
        ...

The decorated function runs at once. An unanswered task prints "not done yet" instead of a traceback,
so that running the whole notebook goes on to the next task; a failed assertion prints its message; an
error in the student's function prints its type, message and the student's own lines; a check that
runs too long is stopped and says so. While nbgrader grades the notebook, the check runs in a separate
process with a short time limit (a crash or an infinite loop there costs nothing).
"""

from __future__ import annotations

from collections.abc import Callable

from ._core import NotDoneYet, autograding, prepare_for, self_check_timed_out
from ._isolate import run_isolated

__all__ = ["self_check"]

INTERACTIVE_SECONDS = 60.0  # a student's first run on Colab may include a GPU warm-up
AUTOGRADE_SECONDS = 5.0


def self_check(*functions: Callable) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Run the decorated checks of ``functions`` now and print one line about them."""
    names = ", ".join(f"`{getattr(f, '__name__', f)}`" for f in functions) or "this task"

    def decorate(body: Callable[[], None]) -> Callable[[], None]:
        seconds = AUTOGRADE_SECONDS if autograding() else INTERACTIVE_SECONDS
        for f in functions:
            prepare_for(getattr(f, "__name__", ""))
        # interactive: in this process (prints show, the GPU works), with a timer; autograding: forked
        verdict = run_isolated(lambda: _verdict(body, names), seconds=seconds, subject=names,
                               fork=autograding())
        if verdict is None:
            print(f"✓ {names}: all self-checks passed.")
        else:
            if "did not finish within" in verdict:
                for f in functions:
                    self_check_timed_out(getattr(f, "__name__", ""))
            print(verdict if verdict.startswith(("○", "✗")) else f"✗ {verdict}")
        return body

    return decorate


def _verdict(body: Callable[[], None], names: str) -> str | None:
    try:
        body()
    except (NotImplementedError, NotDoneYet):
        return (f"○ {names}: not done yet. Replace `raise NotImplementedError()` with your code, run that cell, "
                f"then run this one again.")
    except AssertionError as err:
        return f"✗ {names}: {err}" if str(err) else f"✗ {names}: a self-check failed."
    except MemoryError:
        return f"✗ {names} ran out of memory."
    except Exception as err:
        from ._display import student_frames, without_paths

        if "can't allocate memory" in str(err):
            return f"✗ {names} ran out of memory (it tried to allocate far more than these inputs need)."
        return f"✗ {names} raised {type(err).__name__}: {without_paths(str(err))}\n{student_frames(err.__traceback__)}"
    return None

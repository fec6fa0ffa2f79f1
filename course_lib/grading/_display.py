"""What a test cell shows when it fails: one clear message, never a traceback.

A traceback through a hidden-test cell would print that cell's hidden lines (IPython shows the source
around the failing line), the checker's code and the machine's paths, and nbgrader's feedback would
carry them to the student. When ``course_lib.grading`` is imported inside IPython, :func:`install`
registers a handler so that, in a *test cell* (a cell that imports from ``course_lib.grading``):

- a :class:`GradingError` shows its message alone;
- a missing or misnamed function (``NameError``) says which function to define;
- an interrupt (nbgrader's time limit) says the function did not finish;
- anything else says the grader could not check the task, without details.

The cell still fails, so nbgrader scores it zero. Other cells keep IPython's usual traceback; a
``GradingError`` raised anywhere shows as its message.
"""

from __future__ import annotations

import linecache
import sys
import textwrap

from ._core import GradingError

_MARKER = "course_lib.grading import"


def _is_test_cell(tb) -> bool:
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if _MARKER in "".join(linecache.getlines(filename)):
            return True
        tb = tb.tb_next
    return False


def message_for(etype, value, in_test_cell: bool) -> str | None:
    """The one message to show for an exception, or None for IPython's usual traceback."""
    if issubclass(etype, GradingError):
        return f"{etype.__name__}: {value}"
    if not in_test_cell:
        return None
    if issubclass(etype, NameError):
        name = getattr(value, "name", None) or "the function this task asks for"
        return (f"The autograder found no `{name}`. Define `{name}(...)` in the solution cell of this task, with "
                f"exactly this name, and make sure that cell runs without errors.")
    if issubclass(etype, KeyboardInterrupt):
        return ("Interrupted while grading: your function did not finish in time (an infinite loop, or far too "
                "much work?).")
    return (f"The autograder could not check this task: it stopped with {etype.__name__}. Run your solution "
            f"and its self-check cell; if they work and this persists, tell your instructor.")


def _handler(shell, etype, value, tb, tb_offset=None):
    message = message_for(etype, value, _is_test_cell(tb))
    if message is None:  # not ours: IPython's usual traceback
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return []
    lines = [textwrap.fill(message, width=88)]  # wrapped: feedback pages do not scroll long lines well
    # An error output (nbgrader scores the cell as failed) whose name and value are ours too.
    shell._showtraceback(GradingError, GradingError(message), lines)
    return lines


def install() -> None:
    """Register the handler in the running IPython shell, if there is one (idempotent)."""
    ipython = sys.modules.get("IPython")  # not imported: not running in IPython (and do not import it)
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    shell.set_custom_exc((BaseException,), _handler)

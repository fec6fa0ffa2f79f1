"""Show grading failures in a notebook as one clear message, not a traceback.

A traceback through a hidden-test cell would print that cell's hidden lines (IPython shows the source
around the failing line) and the checker's internals. When ``course_lib.grading`` is imported inside
IPython, :func:`install` registers a handler so that a :class:`GradingError`, or an interrupt (time
limit) while a checker runs, is shown as its message alone. It is still an error: nbgrader scores the
cell as failed. Every other exception keeps IPython's normal traceback.
"""

from __future__ import annotations

import os
import sys
import textwrap

from ._core import GradingError

_GRADING_DIR = os.path.dirname(os.path.abspath(__file__))


def _inside_a_checker(tb) -> bool:
    while tb is not None:
        if os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == _GRADING_DIR:
            return True
        tb = tb.tb_next
    return False


def _handler(shell, etype, value, tb, tb_offset=None):
    if issubclass(etype, GradingError):
        message = f"{etype.__name__}: {value}"
    elif issubclass(etype, KeyboardInterrupt) and _inside_a_checker(tb):
        message = ("Interrupted while grading: your function did not finish in time (an infinite loop, or far "
                   "too much work?).")
    else:  # not ours: IPython's usual traceback
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return []
    lines = [textwrap.fill(message, width=88)]  # wrapped: feedback pages do not scroll long lines well
    shell._showtraceback(etype, value, lines)  # an error output: nbgrader scores the cell as failed
    return lines


def install() -> None:
    """Register the handler in the running IPython shell, if there is one (idempotent)."""
    ipython = sys.modules.get("IPython")  # not imported: not running in IPython (and do not import it)
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    shell.set_custom_exc((GradingError, KeyboardInterrupt), _handler)

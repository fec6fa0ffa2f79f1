"""What a test cell shows when it fails: one clear message, never a traceback.

A traceback through a hidden-test cell would print that cell's hidden lines (IPython shows the source
around the failing line), the checker's code and the machine's paths, and nbgrader's feedback would
carry them to the student. When ``course_lib.grading`` is imported inside IPython, :func:`install`
registers a handler so that, in a *test cell* (a cell that imports from ``course_lib.grading``):

- a :class:`GradingError` shows its message alone;
- a missing or misnamed function (``NameError``) says which function to define;
- an interrupt (nbgrader's time limit) says the function did not finish;
- anything else says the grader could not check the task, without details.

The cell still fails, so nbgrader scores it zero. Other cells keep IPython's usual traceback, except
while nbgrader grades the notebook: then a traceback keeps the exception and the student's own lines
(named by function and line of its cell) and drops library frames and file paths, which feedback must
not show. A ``GradingError`` raised anywhere shows as its message.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import textwrap
import traceback

from ._core import GradingError, autograding

_TEST_MARKER = "course_lib.grading import"
_SELF_CHECK_MARKER = "@self_check("


def _cell_kind(tb) -> str | None:
    """'test' for a test cell, 'self-check' for a visible check, None for any other cell."""
    while tb is not None:
        text = "".join(linecache.getlines(tb.tb_frame.f_code.co_filename))
        if _TEST_MARKER in text:
            return "test"
        if _SELF_CHECK_MARKER in text:
            return "self-check"
        tb = tb.tb_next
    return None


def message_for(etype, value, kind: str | None) -> str | None:
    """The one message to show for an exception in a cell of this ``kind``, or None for IPython's usual
    traceback."""
    if issubclass(etype, GradingError):
        return f"{etype.__name__}: {value}"
    if kind == "self-check" and issubclass(etype, NameError):
        name = getattr(value, "name", None) or "the function"
        return (f"`{name}` is not defined yet: run the solution cell above (and check that the function is "
                f"called exactly `{name}`).")
    if kind != "test":
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


def _is_cell_file(filename: str) -> bool:
    """Whether a code object comes from a notebook cell (ipykernel's per-cell files, IPython inputs)."""
    return "ipykernel_" in filename or filename.startswith("<ipython-input") or filename.startswith("<cell")


_PATH = re.compile(r"(?:[A-Za-z]:)?[\\/][A-Za-z_.][\w.@+-]*(?:[\\/][\w.@+-]+)+")


def without_paths(text: str) -> str:
    """``text`` with absolute file paths replaced by their last component."""
    return _PATH.sub(lambda m: os.path.basename(m.group(0)), text)


def student_frames(tb, limit: int = 4) -> str:
    """The traceback's frames that are in notebook cells, as 'in `fn`, line N of its cell: code'."""
    lines = []
    for frame in traceback.extract_tb(tb):
        if _is_cell_file(frame.filename):
            code = (frame.line or "").strip()
            where = "the cell" if frame.name == "<module>" else f"`{frame.name}`"
            lines.append(f"  in {where}, line {frame.lineno} of its cell: {code}")
    return "\n".join(lines[-limit:])


def _sanitized(etype, value, tb) -> list[str]:
    if issubclass(etype, SyntaxError):
        where = f" in this cell, line {value.lineno}" if value.lineno else ""
        text = f"\n    {value.text.strip()}" if value.text else ""
        return [f"{etype.__name__}{where}: {value.msg}{text}"]
    frames = student_frames(tb)
    head = "Traceback (your code only):\n" + frames if frames else "Traceback (in library code)"
    return [head, f"{etype.__name__}: {without_paths(str(value))}"]


def _handler(shell, etype, value, tb, tb_offset=None):
    message = message_for(etype, value, _cell_kind(tb))
    if message is None and autograding():  # feedback: no library frames, no paths
        lines = _sanitized(etype, value, tb)
        shell._showtraceback(etype, value, lines)
        return lines
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

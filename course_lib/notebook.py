"""What the first cell of every chapter and exercise notebook calls, and the helpers chapters use.

The setup cell itself (identical in every notebook, kept so by a test) installs ``course_lib`` when it
is missing, as on Colab, then calls :func:`setup`. :func:`glue` hands a computed number to the book's
prose; :func:`show_figure` shows a matplotlib figure with its caption and alt text, the same way on the
site, in Jupyter and in Colab.
"""

from __future__ import annotations

import ast
import base64
import html
import io
import random
from typing import Any

import numpy as np
import torch

from .allocator import keep_freed_memory
from .device import get_device


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (all devices) with ``seed``."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def setup(seed: int = 0) -> torch.device:
    """Seed the generators, set readable print and plot defaults, keep freed memory in the process
    (:func:`~course_lib.allocator.keep_freed_memory`: timings then measure the computation, not the
    operating system handing out fresh pages), and return the device to use."""
    seed_everything(seed)
    keep_freed_memory()
    torch.set_printoptions(precision=4, sci_mode=False)
    np.set_printoptions(precision=4, suppress=True)
    import matplotlib as mpl

    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 110,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    _quiet_glue_in_ipython()
    device = get_device()
    print(f"course_lib ready on {device} (seed {seed})")
    return device


def _is_glue_call(node: ast.expr) -> bool:
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(_is_glue_call(element) for element in node.elts)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "glue") or (
        isinstance(func, ast.Attribute) and func.attr == "glue")


class QuietGlue(ast.NodeTransformer):
    """IPython AST transformer: a cell whose last statement is a bare ``glue(...)`` call (or a tuple of
    them) does not display the glued value. The value is for the prose; shown under the cell it would be
    a stray bare number. A ``pass`` appended after the call makes it an ordinary statement."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        last = node.body[-1] if node.body else None
        if isinstance(last, ast.Expr) and _is_glue_call(last.value):
            node.body.append(ast.copy_location(ast.Pass(), last))
        return node


def _quiet_glue_in_ipython() -> None:
    """Register :class:`QuietGlue` with the running IPython kernel, once (nothing outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and not any(isinstance(t, QuietGlue) for t in shell.ast_transformers):
        shell.ast_transformers.append(QuietGlue())


def glue(name: str, value: Any, display: bool = False) -> Any:
    """Store ``value`` under ``name`` for the book's ``{glue}`` roles, and return it.

    Uses ``myst_nb.glue`` when it is installed (book builds); elsewhere, e.g. on Colab, it only returns
    the value, so chapters run without the book toolchain.
    """
    if isinstance(value, torch.Tensor):
        value = value.item() if value.numel() == 1 else value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    try:
        from myst_nb import glue as _myst_glue
    except ImportError:
        return value
    _myst_glue(name, value, display=display)
    return value


class CaptionedFigure:
    """A rendered figure with its caption and alt text. Displays as HTML ``<figure>`` (an ``<img>`` with
    ``alt`` and a ``<figcaption>``), which the book's site, Jupyter and Colab all show the same way."""

    def __init__(self, png: bytes, caption: str, alt: str, width: int):
        self.png, self.caption, self.alt, self.width = png, caption, alt, width

    def _repr_html_(self) -> str:
        data = base64.b64encode(self.png).decode("ascii")
        return (f'<figure class="course-figure" style="margin: 0.5em 0">'
                f'<img src="data:image/png;base64,{data}" alt="{html.escape(self.alt)}" '
                f'width="{self.width}" style="max-width: 100%; height: auto">'
                f'<figcaption style="font-size: 0.9em">{html.escape(self.caption)}</figcaption></figure>')

    def __repr__(self) -> str:
        return f"Figure: {self.caption}"


def show_figure(fig, caption: str, alt: str, dpi_scale: float = 2.0) -> None:
    """Show the matplotlib figure ``fig`` with a caption (what the figure shows and what to notice) and
    alt text (a description for a reader who cannot see it), then close it so it is not shown twice.

    Both must be plain text; use Unicode for math (√d_k, x̂, ≤), not TeX. The image is saved at
    ``dpi_scale`` times the figure's dpi and shown at its natural size (sharp on high-density screens).
    Returns nothing, so a cell may end with the call without showing a second copy.
    """
    for name, text in (("caption", caption), ("alt", alt)):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{name} must be a non-empty string that describes the figure")
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi * dpi_scale, bbox_inches="tight")
    plt.close(fig)
    png = buffer.getvalue()
    pixel_width = int.from_bytes(png[16:20], "big")  # the PNG header's IHDR width
    figure = CaptionedFigure(png, caption.strip(), alt.strip(), round(pixel_width / dpi_scale))
    try:
        from IPython.display import display
    except ImportError:  # a plain Python script: nothing to show it in
        return
    display(figure)


def show_source(obj: Any, *, checks: bool = False):
    """Display the source of a course_lib function or class, highlighted, so a page cannot drift from
    the package it documents. The math is shown; argument validation is not (``checks=True`` shows
    everything): statements that only check arguments — ``if …: raise …`` and calls to ``_check…``
    helpers — are left out, and a comment says so."""
    from IPython.display import Code

    return Code(source_lines(obj, checks=checks), language="python")


def source_lines(obj: Any, *, checks: bool = False) -> str:
    """The source :func:`show_source` displays (see there)."""
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(obj))
    if checks:
        return source
    lines = source.splitlines(keepends=True)
    dropped: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            for stmt in statements if isinstance(statements, list) else []:
                if isinstance(stmt, ast.stmt) and _is_argument_check(stmt):
                    dropped.update(range(stmt.lineno - 1, stmt.end_lineno))
    if not dropped:
        return source
    kept = [line for i, line in enumerate(lines) if i not in dropped]
    return "".join(kept).rstrip("\n") + "\n# (argument checks omitted: see the source for them)\n"


def _is_argument_check(stmt: ast.stmt) -> bool:
    """``if …: raise …`` (no else); a bare call to a ``_check…`` helper; or ``x = _check…(x, …)``, which
    only validates ``x`` (an assignment to anything else, such as ``self.eps = _check_eps(eps)``, keeps
    state and is shown)."""
    if isinstance(stmt, ast.If) and not stmt.orelse and all(isinstance(s, ast.Raise) for s in stmt.body):
        return True
    value = getattr(stmt, "value", None)
    if not (isinstance(value, ast.Call) and _called_name(value).startswith(("_check", "check_"))):
        return False
    if isinstance(stmt, ast.Expr):
        return True
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        first = value.args[0] if value.args else None
        return isinstance(first, ast.Name) and first.id == stmt.targets[0].id
    return False


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")

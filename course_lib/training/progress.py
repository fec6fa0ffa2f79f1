"""The progress bar of a run (:func:`progress_bar`, closed with :func:`close_progress_bar`): ``tqdm``,
imported here only when a bar is first shown, so that importing the package does not need it.
"""

from __future__ import annotations

__all__ = ["progress_bar", "close_progress_bar"]


def progress_bar(total: int, *, initial: int = 0, desc: str = "training"):
    """A ``tqdm`` bar counting steps: the notebook widget in Jupyter and Colab, text in a terminal.

    In a notebook the widget is shown with a display id, so that :func:`close_progress_bar` can
    store the bar's final state as text beside it: a page that cannot render widgets (the book's
    static site) then shows how the run ended, not the empty bar the widget started as.
    """
    from tqdm.auto import tqdm  # imported here: course_lib needs only torch, numpy, matplotlib
    from tqdm.notebook import tqdm as notebook_tqdm

    options = dict(total=total, initial=initial, unit="step", desc=desc, dynamic_ncols=True)
    if not issubclass(tqdm, notebook_tqdm):  # a terminal, or no ipywidgets
        return tqdm(**options)
    from IPython.display import display

    bar = tqdm(**options, display=False)
    bar.course_display = display(bar.container, display_id=True)
    return bar


def close_progress_bar(bar) -> None:
    """Close a bar from :func:`progress_bar`; in a notebook, its output keeps the widget and gains
    the final state as text (``text/plain``)."""
    bar.close()
    handle = getattr(bar, "course_display", None)
    if handle is not None:
        bundle = dict(bar.container._repr_mimebundle_())
        bundle["text/plain"] = _bar_as_text(bar)
        handle.update(bundle, raw=True)


def _bar_as_text(bar) -> str:
    """The bar's state as text that fits a page: the meter on one line, its postfix (``val=…``) on
    the next."""
    state = dict(bar.format_dict)
    postfix = state.pop("postfix", None)
    meter = bar.format_meter(**state)
    return meter if not postfix else f"{meter}\n  {postfix}"

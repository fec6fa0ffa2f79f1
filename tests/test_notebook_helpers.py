"""course_lib.notebook: a cell ending in glue(...) shows no stray value; show_figure shows a figure with
its caption and alt text, the same HTML on the site, in Jupyter and in Colab."""

from __future__ import annotations

import ast
import platform

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_lib import notebook  # noqa: E402


def transformed(code: str) -> list[str]:
    tree = notebook.QuietGlue().visit(ast.parse(code))
    return [type(node).__name__ for node in tree.body]


@pytest.mark.parametrize("code", ['glue("a", 1)', 'x = 2\nglue("a", x)', 'notebook.glue("a", 1)',
                                  'glue("a", 1), glue("b", 2)'])
def test_a_cell_ending_in_glue_ends_in_a_statement(code):
    assert transformed(code)[-2:] == ["Expr", "Pass"]  # the call still runs; nothing is displayed


@pytest.mark.parametrize("code", ['x = glue("a", 1)', '1 + 1', 'print(glue("a", 1))', 'glue("a", 1)\nx',
                                  '(glue("a", 1), 3)'])
def test_other_cells_are_left_alone(code):
    assert transformed(code) == [type(n).__name__ for n in ast.parse(code).body]


def test_in_a_kernel_the_glued_value_is_not_shown():
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in [
        "from course_lib.notebook import setup, glue\ndevice = setup(seed=0)",
        "value = 3\nglue('value', value)",
        "value + 1",
    ]]
    NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    kinds = [[o["output_type"] for o in cell.outputs] for cell in nb.cells]
    assert "execute_result" not in kinds[1]
    assert kinds[2] == ["execute_result"]  # an ordinary last expression still shows


def test_show_figure_gives_an_image_with_alt_text_and_a_caption(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    assert notebook.show_figure(fig, caption="A rising line.", alt="A straight line from (0, 0) to (1, 1).") is None
    assert plt.get_fignums() == []  # closed: the inline backend does not show it a second time
    (figure,) = shown
    html = figure._repr_html_()
    assert html.startswith('<figure class="course-figure"') and 'src="data:image/png;base64,' in html
    assert 'alt="A straight line from (0, 0) to (1, 1)."' in html
    assert "<figcaption" in html and "A rising line.</figcaption>" in html


@pytest.mark.parametrize("caption, alt", [("", "an image"), ("A caption.", "  "), ("A caption.", None)])
def test_show_figure_refuses_a_missing_caption_or_alt_text(caption, alt):
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="caption|alt"):
        notebook.show_figure(fig, caption=caption, alt=alt)
    plt.close(fig)


def test_captions_and_alt_text_are_escaped():
    figure = notebook.CaptionedFigure(b"\x89PNG", caption="a < b & c", alt='say "hi"', width=10)
    html = figure._repr_html_()
    assert "a &lt; b &amp; c" in html and 'alt="say &quot;hi&quot;"' in html


def test_setup_keeps_freed_memory_in_the_process(monkeypatch):
    """setup() asks glibc to keep freed memory (course_lib.allocator), so that chapter timings
    measure computation, not page faults; glibc takes both settings on this Linux machine."""
    from course_lib import allocator, notebook

    calls = []
    monkeypatch.setattr(notebook, "keep_freed_memory", lambda: calls.append(True) or True)
    notebook.setup(seed=0)
    assert calls == [True]
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert allocator.keep_freed_memory() is True

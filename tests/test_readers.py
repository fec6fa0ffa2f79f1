"""Reader notebooks (book/colab/): generated from the chapters (book/_tools/reader_notebooks.py), committed, in
sync with their sources, and free of MyST-only markup; the generator renders each construct as the
site does and refuses what it cannot render."""

from __future__ import annotations

import json
import re
import shutil

import pytest

import reader_notebooks as rn
from setup_cell import ROOT, repo_branch, repo_url

CHAPTERS = rn.chapters()
IDS = [c.stem for c in CHAPTERS]
RELEASED = sorted(ROOT.glob("exercises/release/*/*.ipynb"))
LEFTOVER = re.compile(r"\{[a-zA-Z][\w:+-]*\}`|^\s*(`{3,}|:{3,})\{|^\s*:::|^\s*:[\w-]+:\s|^\([\w.:-]+\)=\s*$"
                      r"|\{\{|\[\^\w+\]", re.M)


def without_code(markdown: str) -> str:
    """Markdown without fenced code blocks and code spans (where braces and colons are literal)."""
    markdown = re.sub(r"^(\s*)(`{3,}|~{3,})(?!\{).*?^\1\2\s*$", "", markdown, flags=re.M | re.S)
    return re.sub(r"(`+)(?!\{).+?\1", "", markdown, flags=re.S)


def myst_leftovers(path) -> list[str]:
    found = []
    for index, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "markdown":
            for match in LEFTOVER.finditer(without_code("".join(cell["source"]))):
                found.append(f"cell {index}: {match.group(0).strip()!r}")
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_reader_notebook_is_in_sync_with_its_chapter(chapter):
    problem = rn.out_of_sync(chapter)
    assert problem is None, problem


@pytest.mark.parametrize("path", [*(rn.reader_path(c) for c in CHAPTERS), *RELEASED],
                         ids=[*IDS, *(p.stem + "-exercise" for p in RELEASED)])
def test_no_myst_only_markup_is_left(path):
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing: run `make book && make readers`"
    assert myst_leftovers(path) == [], f"{path.relative_to(ROOT)} shows MyST markup in Colab/Jupyter"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_reader_keeps_the_setup_cell_first_and_drops_removed_cells(chapter):
    source = json.loads(chapter.read_text())
    reader = json.loads(rn.reader_path(chapter).read_text())
    assert reader["cells"][0]["source"] == source["cells"][0]["source"]
    removed = {"".join(c["source"]) for c in source["cells"][1:] if "remove-cell" in rn._tags(c)}
    assert removed, f"{chapter.name} asserts nothing in a remove-cell cell"
    assert not removed & {"".join(c["source"]) for c in reader["cells"]}


ABOVE = re.compile(r"\b(table|figure|output|plot|list|numbers?) (printed )?above\b|\bprinted above\b", re.I)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_reader_shows_what_the_site_shows_before_anything_runs(chapter):
    """Figures as PNG images with their captions, printed text and tables: the build's outputs."""
    cells = json.loads(rn.reader_path(chapter).read_text())["cells"]
    n_figures = 0
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        source, outputs = "".join(cell["source"]), cell["outputs"]
        kinds = [next(iter(o.get("data", {"stream": 0}))) for o in outputs]
        assert all(o.get("name") != "stderr" for o in outputs), f"cell {index} shows stderr"
        assert not any("papermill" in k for o in outputs for k in o.get("data", {})), f"cell {index}"
        if re.search(r"^show_figure\(", source, re.M):  # a figure shown at the cell's top level
            assert "image/png" in kinds, f"{chapter.name}, reader cell {index}: the figure is missing"
            at = kinds.index("image/png")
            assert outputs[at]["data"]["text/plain"].strip(), "the image has no alt text"
            assert kinds[at + 1] == "text/markdown", "the figure has no caption under it"
            n_figures += 1
        if re.search(r"^print\(", source, re.M):  # prints at the top level, unconditionally
            assert any(o["output_type"] == "stream" for o in outputs), (
                f"{chapter.name}, reader cell {index}: what it prints is missing")
    assert n_figures, f"{chapter.name}: no figure found in its reader notebook"
    for index, cell in enumerate(cells):  # "the table above" has a table above
        if cell["cell_type"] == "markdown" and ABOVE.search("".join(cell["source"])):
            before = [c for c in cells[:index] if c["cell_type"] == "code"]
            assert before and before[-1]["outputs"], (
                f"{chapter.name}, reader cell {index} points 'above' at a cell with no output")


def test_reader_notebooks_stay_small():
    total = sum(rn.reader_path(c).stat().st_size for c in CHAPTERS)
    assert total < 12e6, f"the reader notebooks take {total / 1e6:.1f} MB"


# ------------------------------------------------------------------------------ the generator itself


def render(tmp_path, cells: list[dict], values: dict | None = None) -> list[str]:
    """Render a small chapter made of these cells (after a setup cell); return the cells' text."""
    chapter = tmp_path / "99_test.ipynb"
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "setup()", "outputs": []}, *cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    chapter.write_text(json.dumps(nb))
    values = values or {}
    reader = rn.render_notebook(chapter, lambda role, name, spec: rn.format_value(role, name, spec, values, chapter))
    return ["".join(c["source"]) for c in reader["cells"][2:]]  # after the setup cell and the note


def md(text: str, tags: list[str] | None = None) -> dict:
    return {"cell_type": "markdown", "metadata": {"tags": tags or []}, "source": text}


@pytest.mark.parametrize("value, spec", [
    (0.4689955935892812, ".3f"), (128256, ","), (0.1234, ".0%"), (42, "d"), (1.2e-07, ".1e"),
    (3.0, ""), (True, ""), ("text", ""), (65.27509641492048, ".1f"), (8030261248, ",.0f"),
])
def test_glue_values_are_formatted_as_myst_nb_formats_them(tmp_path, value, spec):
    from myst_nb.core.variables import format_plain_text

    values = {"x": {"text/plain": repr(value)}}
    role = f"{{glue:text}}`x:{spec}`" if spec else "{glue:text}`x`"
    assert render(tmp_path, [md(f"It is {role}.")], values) == [
        f"It is {format_plain_text(repr(value), spec or 's')}."]


@pytest.mark.parametrize("role", ["{glue:md}`x`", "{glue:md}`x:myst`", "{glue:md}`x:commonmark`"])
def test_glued_markdown_is_pasted_whatever_its_format(tmp_path, role):
    values = {"x": {"text/markdown": "**one** pass, $b \\approx$ 2 µs", "text/plain": "<Markdown>"}}
    assert render(tmp_path, [md(f"It took {role}.")], values) == [
        "It took **one** pass, $b \\approx$ 2 µs."]


def test_citations_read_as_on_the_site(tmp_path):
    [text] = render(tmp_path, [md("Entropy {cite}`shannon1948`; MQA {cite}`shazeer2019`.")])
    assert text == "Entropy [Shannon, 1948]; MQA [[Shazeer, 2019](https://arxiv.org/abs/1911.02150)]."


def test_callouts_quote_and_answers_hide(tmp_path):
    callout, answer = render(tmp_path, [
        md("```{admonition} A common mistake\n:class: warning\nIt is $x$.\n\n$$\na\n+ b\n$$\n```"),
        md("```{admonition} Answer\n:class: dropdown\nThe output is {glue:text}`out:.1f`.\n```"),
    ], {"out": {"text/plain": "15.0"}})
    assert callout == "> **⚠️ A common mistake**\n>\n> It is $x$.\n>\n> $$a + b$$"
    assert answer == "<details>\n<summary><b>Answer</b></summary>\n\nThe output is 15.0.\n\n</details>"


def test_roles_labels_and_comments_become_markdown(tmp_path):
    [text] = render(tmp_path, [md(
        "(sec-x)=\n% a comment\n## Title\n\nA {term}`KV cache`, the {term}`caches <KV cache>`, "
        "{py:class}`~course_lib.kv_cache.ConcatKVCache`, {py:func}`course_lib.norms.rms_norm`, "
        "{math}`x^2`, see {ref}`sec-x` and `{code}` in code.")])
    assert text == ("## Title\n\nA KV cache, the caches, `ConcatKVCache`, `course_lib.norms.rms_norm()`, "
                    "$x^2$, see Title and `{code}` in code.")


def test_labelled_equations_are_numbered(tmp_path):
    [text] = render(tmp_path, [md("$$\ny = x\n$$ (eq-y)\n\nBy {eq}`eq-y`.")])
    assert text == "$$\ny = x\n\\tag{1}\n$$\n\nBy (1)."


def test_outputs_keep_prints_tables_and_figures_and_drop_glue_and_stderr():
    import base64
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.notebook import CaptionedFigure

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [1, 0])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    figure = CaptionedFigure(buffer.getvalue(), "Loss * step_size < 1", 'A line "falling"', 200)
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "printed\n"},
        {"output_type": "stream", "name": "stderr", "text": "100%|#####| 10/10\r"},
        {"output_type": "display_data", "metadata": {}, "data": {
            "application/papermill.record/text/plain": "1.5"}},
        {"output_type": "display_data", "metadata": {}, "data": {
            "text/html": figure._repr_html_(), "text/plain": repr(figure)}},
        {"output_type": "execute_result", "execution_count": 3, "metadata": {}, "data": {
            "text/html": "<table><tr><td>1</td></tr></table>", "text/plain": "1"}},
    ]
    shown = rn.reader_outputs(outputs)
    assert [o["output_type"] for o in shown] == ["stream", "display_data", "display_data", "display_data"]
    assert shown[0]["text"] == "printed\n"
    png = base64.b64decode(shown[1]["data"]["image/png"])
    assert png.startswith(b"\x89PNG") and shown[1]["data"]["text/plain"] == 'A line "falling"'
    assert shown[1]["metadata"] == {"image/png": {"width": 200}}
    assert shown[2]["data"]["text/markdown"] == "*Loss \\* step\\_size \\< 1*"
    assert shown[3]["data"]["text/html"].startswith("<table>")  # a table stays a table


def test_figures_become_images_with_alt_text_and_caption(tmp_path):
    shutil.copy(ROOT / "book" / "figures" / "decoder_block.svg", tmp_path / "block.svg")
    [text] = render(tmp_path, [md("```{figure} block.svg\n:alt: The block, drawn.\n:width: 300px\n\n"
                                  "The pre-norm block.\n```")])
    assert re.fullmatch(r'<img src="data:image/svg\+xml;base64,[\w+/=]+" alt="The block, drawn." '
                        r'width="300">\n\n\*The pre-norm block\.\*', text)


def test_cells_are_kept_dropped_or_collapsed_by_their_tags(tmp_path):
    chapter = tmp_path / "99_test.ipynb"
    code = [{"cell_type": "code", "metadata": {"tags": tags}, "source": src, "outputs": []}
            for tags, src in [([], "setup()"), (["remove-cell"], "assert x == 1"),
                              (["remove-input"], "plot()"), (["raises-exception"], "1 / 0")]]
    chapter.write_text(json.dumps({"cells": code, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    reader = rn.render_notebook(chapter, lambda *args: "")
    kept = [("".join(c["source"]), c["metadata"]) for c in reader["cells"] if c["cell_type"] == "code"]
    assert kept == [("setup()", {}), ("plot()", {"jupyter": {"source_hidden": True}}),
                    ("1 / 0", {"tags": ["raises-exception"]})]


@pytest.mark.parametrize("markdown, complaint", [
    ("{numref}`fig-x`", "role {numref}"),
    ("```{list-table}\n* - a\n```", "directive {list-table}"),
    ("```{figure} x.svg\n:alt: An image.\n```", "not found"),
    ("{cite}`nobody2099`", "not in book/references.bib"),
    ("{glue:text}`missing:.2f`", "nothing is glued under 'missing'"),
    ("{{ substitution }}", "substitutions"),
])
def test_what_cannot_be_rendered_stops_the_generator(tmp_path, markdown, complaint):
    with pytest.raises(rn.ReaderError, match=re.escape(complaint)):
        render(tmp_path, [md(markdown)])


def test_the_sync_check_catches_an_edited_chapter_and_an_edited_reader(tmp_path, monkeypatch):
    chapter = tmp_path / CHAPTERS[0].name
    shutil.copy(CHAPTERS[0], chapter)
    monkeypatch.setattr(rn, "READERS", tmp_path / "colab")
    rn.READERS.mkdir()
    reader = rn.render_notebook(chapter, lambda role, name, spec: "1.5")  # values from some build
    rn.reader_path(chapter).write_text(rn.dumps(reader))
    assert rn.out_of_sync(chapter) is None

    prose = next(c for c in reader["cells"] if c["cell_type"] == "markdown" and c["id"] != "course-reader-note")
    prose["source"] = ["Edited by hand.\n", *prose["source"]]  # the recorded digests do not change
    rn.reader_path(chapter).write_text(rn.dumps(reader))
    assert "differs from its source's rendering" in rn.out_of_sync(chapter)

    source = json.loads(chapter.read_text())  # the chapter edited, its reader not regenerated
    source["cells"][-1]["source"] = "".join(source["cells"][-1]["source"]) + "\nOne more sentence."
    chapter.write_text(json.dumps(source))
    assert "generated from an older" in rn.out_of_sync(chapter)


def test_the_sync_check_catches_a_shown_source_that_course_lib_no_longer_has(tmp_path, monkeypatch):
    """A reader notebook carries the outputs of the build that made it: after course_lib changes, a
    show_source cell would go on showing the old code (chapter 3's once showed Attention without
    the qk_norm option that chapter 13 added)."""
    chapter = next(c for c in CHAPTERS if "show_source(" in rn.reader_path(c).read_text())
    reader = json.loads(rn.reader_path(chapter).read_text())
    monkeypatch.setattr(rn, "READERS", tmp_path)
    index = next(k for k, c in enumerate(reader["cells"])
                 if c["cell_type"] == "code" and "show_source(" in "".join(c["source"]))
    output = next(o for o in reader["cells"][index]["outputs"] if "text/plain" in o.get("data", {}))
    rn.reader_path(chapter).write_text(rn.dumps(reader))
    assert rn.out_of_sync(chapter) is None  # the committed reader, copied as it is

    output["data"]["text/plain"] = ["def older(x):\n", "    return x"]  # what an older build showed
    rn.reader_path(chapter).write_text(rn.dumps(reader))
    assert rn.out_of_sync(chapter) == (f"{rn._rel(rn.reader_path(chapter))}, cell {index}: its show_source "
                                       f"output is not what the call shows now: run `make book && make "
                                       f"readers` and commit it")


def test_every_published_colab_link_opens_a_reader_notebook_or_an_exercise():
    """README, pages and notebooks: a chapter opens as its reader notebook, never as its MyST source."""
    owner_repo = repo_url().removeprefix("https://github.com/")
    pattern = re.compile(rf"colab\.research\.google\.com/github/{re.escape(owner_repo)}/blob/{re.escape(repo_branch())}/([\w./-]+\.ipynb)")
    texts = [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md")), *sorted((ROOT / "book").glob("*.ipynb")),
             *sorted(ROOT.glob("exercises/*/*/*.ipynb"))]
    links = {(p.relative_to(ROOT).as_posix(), target) for p in texts for target in pattern.findall(p.read_text())}
    wrong = sorted(link for link in links if not link[1].startswith(("book/colab/", "exercises/release/")))
    assert wrong == [], f"Colab links to notebooks readers should not open: {wrong}"
    readme = {target for where, target in links if where == "README.md"}
    missing = [c.name for c in CHAPTERS if f"book/colab/{c.name}" not in readme]
    assert missing == [], f"README has no Colab link to the reader notebooks of {missing}"

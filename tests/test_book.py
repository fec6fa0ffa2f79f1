"""The book builds with zero warnings, and the built site is what a reader should get: glued numbers
rendered, math rendered offline, figures present, launch buttons that open the reader notebooks, no CDN,
no stray outputs, and complete reader's aids (API reference, exercises, glossary, bibliography).

The build executes every chapter in the development environment; a failing hidden assert (a cell
tagged remove-cell) fails the build under -W. tests/test_site_browser.py opens the built pages."""

from __future__ import annotations

import ast
import html as html_lib
import json
import pkgutil
import re

import pytest
import yaml

import execute_book
from conftest import wait_for_book_build
from setup_cell import ROOT, repo_branch, repo_url

HTML = ROOT / "_build" / "html"
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
CHAPTERS = [c["file"] for part in TOC["parts"] if part["caption"] == "Chapters" for c in part["chapters"]]


@pytest.fixture(scope="session")
def build_log() -> str:
    """The log of `jupyter-book build . -W --keep-going` (started in the background by conftest.py)."""
    code, log = wait_for_book_build()
    assert code == 0, log[-5000:]
    return log


def removed_lines(chapter: str) -> list[str]:
    """The assert lines of the chapter's cells tagged remove-cell (they must not reach the page)."""
    nb = json.loads((ROOT / f"{chapter}.ipynb").read_text())
    lines = []
    for cell in nb["cells"]:
        if "remove-cell" in cell["metadata"].get("tags", []):
            lines += [ln.strip() for ln in "".join(cell["source"]).splitlines() if ln.strip().startswith("assert ")]
    assert lines, f"{chapter} asserts no key values in a remove-cell cell"
    return lines


def page(build_log, name: str) -> str:
    return (HTML / f"{name}.html").read_text()


def test_build_has_zero_warnings(build_log):
    # -W already turns Sphinx warnings into a failed build; this also catches what it does not count,
    # such as a kernel's own warnings (the kernels talk over Unix sockets: no TCP notice either).
    lines = build_log.splitlines()
    assert [line for line in lines if "WARNING" in line or "ERROR" in line] == []
    assert "without encryption" not in build_log


def test_make_book_prints_a_line_per_chapter_not_sphinx_progress():
    recipe = (ROOT / "Makefile").read_text().split("\nbook:", 1)[1].split("\n\n", 1)[0]
    assert "execute_book.py" in recipe and "jupyter-book build . -W --keep-going -q" in recipe


def test_the_build_found_every_chapter_executed_beforehand(build_log):
    """book/_tools/execute_book.py ran the chapters (two kernels at a time) and cached them as myst-nb would:
    had it hashed or stored a notebook differently, the build would have executed it again itself."""
    assert "executing " in build_log or "every chapter is in the execution cache" in build_log
    # what execute_book.py printed, a chapter's error included, comes first in the failure's message
    executed_beforehand = build_log.split("\ndone in ")[0]
    assert " failed after " not in executed_beforehand, executed_beforehand[-6000:]
    assert "Executing notebook using" not in build_log


def test_the_chapters_executed_beforehand_are_the_chapters():
    assert [p.relative_to(ROOT).with_suffix("").as_posix() for p in execute_book.executed_chapters()] == CHAPTERS


def test_chapters_are_executed_longest_first():
    chapters = [ROOT / f"{name}.ipynb" for name in CHAPTERS]
    ch = {path.name[:2]: path for path in chapters}
    # no record (a fresh clone): the capstone first, then back through the table of contents
    assert execute_book.LONGEST == ch["12"].name
    assert execute_book.longest_first(chapters[:3] + [ch["12"], ch["13"]], chapters, {}) == [
        ch["12"], ch["13"], ch["03"], ch["02"], ch["01"]]
    seconds = {ch["01"].name: 7.0, ch["02"].name: 12.0, ch["12"].name: 110.0}
    assert execute_book.longest_first([ch["01"], ch["02"], ch["03"], ch["12"]], chapters, seconds) == [
        ch["03"], ch["12"], ch["02"], ch["01"]]


def test_the_long_chapter_gets_every_core_unless_the_threads_are_capped():
    short, long = ["a", "b", "c"], ["capstone"]
    assert execute_book.plan(long + short, jobs=2, cores=2, thread_cap=None) == [(short, 2, 1), (long, 1, 2)]
    assert execute_book.plan(long + short, jobs=2, cores=2, thread_cap=1) == [(long + short, 2, 1)]
    assert execute_book.plan(long + short, jobs=4, cores=2, thread_cap=None) == [(short, 3, 1), (long, 1, 2)]
    assert execute_book.plan(long, jobs=2, cores=2, thread_cap=None) == [(long, 1, 2)]
    assert execute_book.plan(long + short[:1], jobs=2, cores=8, thread_cap=2) == [(long + short[:1], 2, 2)]


def test_the_execution_cache_is_emptied_when_course_lib_changes(tmp_path, monkeypatch):
    cache, doctrees = tmp_path / ".jupyter_cache", tmp_path / ".doctrees"
    monkeypatch.setattr(execute_book, "CACHE", cache)
    monkeypatch.setattr(execute_book, "course_lib_digest", lambda: "one")

    def fill():
        for folder in (cache, doctrees):
            folder.mkdir(exist_ok=True)
            (folder / "entry").write_text("executed")

    assert not execute_book.forget_executions_of_an_older_course_lib()  # nothing cached yet
    assert (tmp_path / ".course_lib.sha256").read_text() == "one"
    (tmp_path / ".course_lib.sha256").unlink()
    fill()
    assert execute_book.forget_executions_of_an_older_course_lib()  # no stamp: who knows what ran
    assert not cache.exists() and not doctrees.exists()
    fill()
    assert not execute_book.forget_executions_of_an_older_course_lib()  # the same course_lib
    assert (cache / "entry").is_file() and (doctrees / "entry").is_file()
    monkeypatch.setattr(execute_book, "course_lib_digest", lambda: "two")
    assert execute_book.forget_executions_of_an_older_course_lib()
    assert not cache.exists() and not doctrees.exists()
    assert (tmp_path / ".course_lib.sha256").read_text() == "two"


def test_every_chapter_in_the_toc_exists_and_is_a_notebook():
    for chapter in CHAPTERS:
        assert (ROOT / f"{chapter}.ipynb").is_file(), chapter


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_page(build_log, chapter):
    html = page(build_log, chapter)
    assert "{glue" not in html, "an unrendered glue role"
    assert html.count("<img") >= 2, "at least two figures"
    assert "Learning objectives" in html and "Summary" in html and "Quiz" in html
    assert "dropdown" in html  # answers in toggles
    # cells tagged remove-cell (where the chapter asserts its key values) are not on the page
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", html))
    for line in removed_lines(chapter):
        assert line not in text, f"a remove-cell line is on the page: {line!r}"
    owner_repo = repo_url().removeprefix("https://github.com/")
    reader = f"book/colab/{chapter.removeprefix('book/')}.ipynb"
    assert f"https://colab.research.google.com/github/{owner_repo}/blob/{repo_branch()}/{reader}" in html, \
        "the Colab button does not open the chapter's reader notebook"
    assert f"blob/{repo_branch()}/{chapter}.ipynb" not in html, "a Colab link opens the source notebook (MyST markup)"
    assert repo_url() in html  # repository button


def test_chapter_1_numbers_are_glued_from_code(build_log):
    text = re.sub(r"<[^>]+>", "", page(build_log, "book/01_information_theory"))
    assert "0.469 bits" in text  # the loaded coin, rendered from a glued value
    assert "0.1228" in text  # KL(P‖Q) of the seed example


def test_math_is_rendered_offline_and_nothing_loads_from_a_cdn(build_log):
    for html_file in HTML.rglob("*.html"):
        html = html_file.read_text()
        for src in re.findall(r"<(?:script|link|img)[^>]+(?:src|href)=\"([^\"]+)\"", html):
            assert not src.startswith(("http://", "https://", "//")), f"{html_file.name} loads {src}"
    chapter = page(build_log, "book/01_information_theory")
    assert re.search(r"<script[^>]+src=\"[^\"]*mathjax[^\"]*\"", chapter, re.I), "MathJax is not loaded"


def test_bibliography_is_cited_and_listed(build_log):
    bib = page(build_log, "book/bibliography")
    assert "a mathematical theory of communication" in bib.lower()
    assert "Shannon" in page(build_log, "book/01_information_theory")


def test_notation_page_declares_the_shape_letters(build_log):
    text = page(build_log, "book/notation")
    for letter in ["batch size", "query length", "key length", "model width", "head width", "vocabulary"]:
        assert letter in text


def test_config():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["only_build_toc_files"] is True
    assert config["execute"]["execute_notebooks"] == "cache"
    assert "sphinx-mathjax-offline" in config["sphinx"]["extra_extensions"]
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert config.get("copyright") and config.get("author") and config.get("title")
    assert config["repository"].get("path_to_book", "") == ""
    assert json.dumps(config).count("github.com") == 1  # the repository URL, once


def _ends_with_glue(source: str) -> bool:
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    last = body[-1] if body else None
    calls = [last.value] if isinstance(last, ast.Expr) else []
    if calls and isinstance(calls[0], ast.Tuple):
        calls = calls[0].elts
    return bool(calls) and all(isinstance(c, ast.Call) and getattr(c.func, "id", getattr(c.func, "attr", "")) == "glue"
                               for c in calls)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_stray_output_under_a_glue_cell(build_log, chapter):
    """A cell ending in glue(...) shows nothing (course_lib.notebook.setup makes the value quiet)."""
    executed = json.loads((ROOT / "_build" / "jupyter_execute" / f"{chapter}.ipynb").read_text())
    stray = [f"cell {i}: {''.join(c['source']).splitlines()[-1]!r}" for i, c in enumerate(executed["cells"])
             if c["cell_type"] == "code" and _ends_with_glue("".join(c["source"]))
             and any(o["output_type"] == "execute_result" for o in c["outputs"])]
    assert stray == [], f"{chapter}: a glued value is shown under its cell: {stray}"


def test_thebe_is_configured_once_per_page(build_log):
    pages = [p for p in HTML.rglob("*.html") if "_static" not in p.parts]
    assert pages
    for page_file in pages:
        assert page_file.read_text().count("THEBE_JS_URL =") <= 1, f"{page_file.relative_to(HTML)}"


def test_api_reference_documents_every_module(build_log):
    import course_lib

    modules = sorted(m.name for m in pkgutil.iter_modules(course_lib.__path__)
                     if not m.name.startswith("_") and m.name != "grading")
    api = page(build_log, "book/api")
    missing = [m for m in modules if f'id="module-course_lib.{m}"' not in api]
    assert missing == [], f"add these modules to book/api.md: {missing}"
    assert 'id="course_lib.norms.rms_norm"' in api and "(Zhang &amp; Sennrich, 2019)" in api


def test_released_exercises_are_on_the_site_with_colab_and_download_links(build_log):
    owner_repo = repo_url().removeprefix("https://github.com/")
    index = page(build_log, "book/exercises")
    for notebook in sorted(ROOT.glob("exercises/release/*/*.ipynb")):
        rel = notebook.relative_to(ROOT).with_suffix("").as_posix()
        assert (HTML / f"{rel}.html").is_file(), f"{rel} is not a page: add it to _toc.yml"
        assert f"colab.research.google.com/github/{owner_repo}/blob/{repo_branch()}/{rel}.ipynb" in index, rel
        assert re.search(rf'href="[^"]*_downloads/[0-9a-f]+/{notebook.name}"', index), f"no download link: {rel}"
        exercise = html_lib.unescape(re.sub(r"<[^>]+>", "", (HTML / f"{rel}.html").read_text()))
        assert "raise NotImplementedError()" in exercise, f"{rel} is shown with solutions"


def test_glossary_terms_can_be_linked(build_log):
    glossary = page(build_log, "book/glossary")
    terms = re.findall(r'<dt id="term-([^"]+)"', glossary)
    assert len(terms) >= 40 and "KV-cache" in terms and "GQA" in terms


def test_bibliography_labels_are_the_citations(build_log):
    """Every citation reads exactly like the label of the entry it links to ("Vaswani et al., 2017")."""
    bib = page(build_log, "book/bibliography")

    def text(fragment: str) -> str:
        return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", "", fragment))).strip()

    labels = {anchor: text(label) for anchor, label in re.findall(
        r'<div class="citation" id="([^"]+)"[^>]*>\s*<span class="label"><span class="fn-bracket">\[</span>(.*?)'
        r'<span class="fn-bracket">\]</span>', bib, re.S)}
    assert len(labels) >= 20
    cited = 0
    for chapter in CHAPTERS:
        for anchor, shown in re.findall(r'<a class="reference internal" href="bibliography\.html#([^"]+)"[^>]*>(.*?)</a>',
                                        page(build_log, chapter), re.S):
            assert labels.get(anchor) == text(shown), f"{chapter}: cites {text(shown)!r}, labelled {labels.get(anchor)!r}"
            cited += 1
    assert cited >= 30

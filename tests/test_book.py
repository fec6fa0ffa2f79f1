"""The book builds with zero warnings, and the built site is what a reader should get: glued numbers
rendered, math rendered offline, figures present, launch buttons from the one repository URL, no CDN."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
import yaml

from conftest import wait_for_book_build
from setup_cell import ROOT, repo_url

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
    # -W already turns Sphinx warnings into a failed build; this also catches what it does not count.
    # (The kernel's own notice that it listens on local TCP is not a build warning.)
    lines = [line for line in build_log.splitlines() if not line.startswith("[IPKernelApp] WARNING | Kernel is running over TCP")]
    assert [line for line in lines if "WARNING" in line or "ERROR" in line] == []


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
    assert f"https://colab.research.google.com/github/{owner_repo}/blob/main/{chapter}.ipynb" in html
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

"""Every promise the text makes about a section is kept by a section: the guard against losing one.

Chapter 2 once lost its ALiBi section and chapter 5 never had its Jacobian derivation, while the
objectives, the quizzes, exercise 5 and chapter 6 kept promising them. Two checks catch that:

1. **Learning objectives.** Each item of a chapter's "Learning objectives" admonition ends with the
   sections that teach it, as references to labelled headings: ``(§ {ref}`ch2-alibi`)``, or with a
   title where the heading has math: ``(§ {ref}`Where ε goes <ch5-eps>`)``. On the site a reference
   is a link; in a reader notebook it is the heading's text (book/_tools/reader_notebooks.py). The
   test requires at least one reference per item, each to a ``(label)=`` target directly above a
   heading of the same chapter, with prose under that heading: ``MIN_INTRO`` words before its first
   code cell (a heading followed at once by code has lost its text) and ``MIN_WORDS`` down to the
   next heading of its level or above (headings, labels, directives' options and code not counted).
   Labels carry their chapter's number (``ch3-masks``) and are unique across the book.
2. **"Chapter N derived X".** Every phrase "chapter N derived/showed/measured/…" in the chapters and
   the exercise sources, and "the chapter derived …" (chapter N's own, or exercise N's chapter), is
   listed in ``CLAIMS`` with the heading of chapter N that holds X. The test finds every such phrase
   and fails on one that is not listed; each listed claim must name a heading that exists in chapter
   N, with prose under it. A reworded claim that is no longer in its file is skipped (remove it).

The helpers take a notebook's cells, so they can be pointed at any version of a chapter
(``git show HEAD~1:book/05_normalization.ipynb``): the versions without the ALiBi section and the
Jacobian derivation fail both checks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from setup_cell import ROOT

BOOK = ROOT / "book"
EXERCISES = ROOT / "exercises" / "source"
CHAPTERS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
MIN_WORDS = 40  # words of prose in a section, subsections included
MIN_INTRO = 20  # words of prose between a section's heading and its first code cell


# ----------------------------------------------------------------------------------- parsing


@dataclass
class Heading:
    level: int
    text: str
    label: str | None
    prose_words: int  # words of prose from this heading to the next of its level or above
    intro_words: int  # words of prose between the heading and the first code cell


LABEL = re.compile(r"^\(([\w.:-]+)\)=\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$")
REF = re.compile(r"\{ref\}`([^`]+)`")
FENCE = re.compile(r"^\s*(`{3,}|:{3,})(.*)$")
WORD = re.compile(r"[^\W\d_]{2,}")  # words of two letters or more (no numbers, no glue names)


def _markdown_lines(cells: list[dict]) -> list[str | None]:
    """The chapter's markdown, line by line; a code cell becomes one None (it is not prose)."""
    lines: list[str | None] = []
    for cell in cells:
        if cell["cell_type"] == "markdown":
            lines += "".join(cell["source"]).splitlines() + [""]
        else:
            lines.append(None)
    return lines


def _prose(line: str | None) -> str:
    """The words a line contributes to prose: none for code, fences, directive options, labels,
    roles' targets and math commands."""
    if line is None or line.lstrip().startswith(("```", ":::", ":class:", ":alt:", ":width:")):
        return ""
    if LABEL.match(line) or line.startswith("%"):
        return ""
    line = re.sub(r"\{[\w:+-]+\}`[^`]*`", " ", line)  # roles: {glue:text}`name:.2f`, {cite}`key`
    line = re.sub(r"\\[A-Za-z]+", " ", line)  # TeX commands
    return line


def headings(cells: list[dict]) -> list[Heading]:
    """The chapter's headings in order, with their labels and the prose of their sections."""
    lines = _markdown_lines(cells)
    found: list[tuple[int, int, str, str | None]] = []  # (line index, level, text, label)
    fence = 0  # the length of the open fence's backticks or colons (0: none open)
    for i, line in enumerate(lines):
        if line is None:
            continue
        f = FENCE.match(line)
        if f:
            if fence and len(f.group(1)) >= fence and not f.group(2).strip():
                fence = 0  # closes the open fence
            elif not fence:
                fence = len(f.group(1))  # opens one (a shorter one inside it is its content)
            continue
        m = HEADING.match(line)
        if m and not fence:
            label = None
            j = i - 1
            while j >= 0 and lines[j] is not None and not lines[j].strip():
                j -= 1
            if j >= 0 and lines[j] is not None and LABEL.match(lines[j]):
                label = LABEL.match(lines[j]).group(1)
            found.append((i, len(m.group(1)), m.group(2), label))
    result = []
    for n, (i, level, text, label) in enumerate(found):
        end = next((k for k, lv, _, _ in found[n + 1:] if lv <= level), len(lines))
        body = [lines[k] for k in range(i + 1, end)
                if not (lines[k] is not None and HEADING.match(lines[k]))]
        words = sum(len(WORD.findall(_prose(line))) for line in body)
        stop = next((k for k in range(i + 1, end) if lines[k] is None), end)  # first code cell
        intro = sum(len(WORD.findall(_prose(line))) for line in lines[i + 1:stop]
                    if not HEADING.match(line))
        result.append(Heading(level, text, label, words, intro))
    return result


def objectives(cells: list[dict]) -> list[str]:
    """The numbered items of the chapter's "Learning objectives" admonition (continuation lines
    joined); [] if there is none."""
    for cell in cells:
        text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
        m = re.search(r"```\{admonition\} Learning objectives\n(.*?)\n```", text, re.S)
        if m:
            items = re.split(r"\n(?=\d+\.\s)", m.group(1))
            return [" ".join(item.split()) for item in items if re.match(r"\d+\.\s", item)]
    return []


def ref_target(text: str) -> str:
    """The label of a {ref} role's text: `label` or `title <label>`."""
    m = re.match(r"^.*<([^<>]+)>$", text.strip(), re.S)
    return (m.group(1) if m else text).strip()


def _section_problems(heading: Heading) -> list[str]:
    """A section must open with prose (a heading followed at once by code has lost its text) and
    hold at least MIN_WORDS words of it."""
    problems = []
    if heading.intro_words < MIN_INTRO:
        problems.append(f"section {heading.text!r} opens with {heading.intro_words} words of prose "
                        f"before its first code cell (< {MIN_INTRO})")
    if heading.prose_words < MIN_WORDS:
        problems.append(f"section {heading.text!r} has {heading.prose_words} words of prose "
                        f"(< {MIN_WORDS})")
    return problems


def objective_problems(cells: list[dict]) -> list[str]:
    """What is wrong with the chapter's objectives: an item that names no section, a reference to a
    label that is not a heading of this chapter, a section without prose."""
    items = objectives(cells)
    if not items:
        return ["no 'Learning objectives' admonition with numbered items"]
    sections = {h.label: h for h in headings(cells) if h.label}
    problems = []
    for item in items:
        number = item.split(".", 1)[0]
        labels = [ref_target(t) for t in REF.findall(item)]
        if not labels:
            problems.append(f"objective {number} names no section: {item[:90]!r}")
        for label in labels:
            if label not in sections:
                problems.append(f"objective {number}: no heading with the label {label!r} in this "
                                "chapter")
            else:
                problems += [f"objective {number}: {p}" for p in _section_problems(sections[label])]
    return problems


def cells_of(path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def chapter_path(number: int):
    (path,) = BOOK.glob(f"{number:02d}_*.ipynb")
    return path


# ------------------------------------------------------------------------------- objectives


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_objective_names_a_section_that_teaches_it(path):
    problems = objective_problems(cells_of(path))
    assert problems == [], "\n".join(problems)


def labels_in(text: str) -> list[str]:
    """The ``(label)=`` targets of a markdown text, in order."""
    return [m.group(1) for m in map(LABEL.match, text.splitlines()) if m]


def test_labels_are_unique_across_the_book():
    """Sphinx warns on a label defined twice (an error under -W) and a {ref} to it would link to
    one of the two: every target of the chapters and pages is defined once, and a chapter's carry
    its number (``ch3-masks``), so that two chapters cannot pick the same one."""
    where: dict[str, list[str]] = {}
    misnamed = []
    for path in CHAPTERS:
        text = "\n".join("".join(c["source"]) for c in cells_of(path)
                         if c["cell_type"] == "markdown")
        for label in labels_in(text):
            where.setdefault(label, []).append(path.name)
            if not label.startswith(f"ch{int(path.name[:2])}-"):
                misnamed.append(f"{path.name}: {label}")
    for path in sorted(BOOK.glob("*.md")):
        for label in labels_in(path.read_text()):
            where.setdefault(label, []).append(path.name)
    assert {label: files for label, files in where.items() if len(files) > 1} == {}
    assert misnamed == [], "label without its chapter's prefix: " + ", ".join(misnamed)


def test_the_check_catches_a_lost_section():
    """A section that has lost its prose (only the heading and code remain), a label that no heading
    carries, and an objective without a reference are all reported."""
    def md(text):
        return {"cell_type": "markdown", "source": [text]}

    def code(text):
        return {"cell_type": "code", "source": [text]}

    objectives_cell = md("# Title\n\n```{admonition} Learning objectives\n:class: tip\n"
                         "After this chapter you can\n1. compute ALiBi slopes\n   and build its bias"
                         " (§ {ref}`x-alibi`);\n2. apply RoPE (§ {ref}`x-rope`);\n"
                         "3. compare the schemes.\n```")
    lost = [objectives_cell, md("(x-alibi)=\n## ALiBi"), code("slopes = alibi_slopes(8)"),
            md("## Comparison\n\n" + "words " * 50)]
    problems = objective_problems(lost)
    assert any("objective 1: section 'ALiBi' has 0 words" in p for p in problems), problems
    assert any("objective 2: no heading with the label 'x-rope'" in p for p in problems), problems
    assert any("objective 3 names no section" in p for p in problems), problems
    # the heading kept, the text under it gone, later prose left: still reported
    heading_then_code = [objectives_cell, md("(x-alibi)=\n## ALiBi"), code("alibi_slopes(8)"),
                         md("The weights agree. " + "prose " * 60), md("(x-rope)=\n## RoPE\n\n"
                                                                      + "prose " * 50)]
    assert objective_problems(heading_then_code)[0].startswith(
        "objective 1: section 'ALiBi' opens with 0 words of prose before its first code cell")
    kept = [objectives_cell, md("(x-alibi)=\n## ALiBi\n\n" + "prose " * 50),
            md("(x-rope)=\n## RoPE\n\n" + "prose " * 50)]
    assert objective_problems(kept) == [
        "objective 3 names no section: '3. compare the schemes.'"]


# ------------------------------------------------------------------------------------ claims

# "chapter N <verb>", "the chapter <verb>" or "<verb> in chapter N": a promise that something is
# shown there
CLAIM = re.compile(
    r"\b(?:[Cc]hapter\s+(\d+)|[Tt]he chapter)\s+(?:also\s+|already\s+)?"
    r"(derived|derives|showed|shows|proved|proves|measured|measures|timed|times|checked|checks|"
    r"counted|counts|computed|computes|found|finds|built|builds|explained|explains|taught|teaches)\b"
    r"|\b(?:derived|shown|proved|measured|checked|counted|computed|built|explained|taught)"
    r"\s+in\s+chapter\s+\d+")


@dataclass(frozen=True)
class Claim:
    file: str  # where the claim is made, relative to the repository
    quote: str  # the claim's words, from "chapter N …" or "the chapter …" on
    chapter: int  # the chapter that must hold it
    heading: str  # a heading of that chapter (a part of its text, case ignored) that holds it


CLAIMS = [
    Claim("book/01_information_theory.ipynb", "chapter 12 measures by how much", 12,
          "The lines to beat"),
    Claim("book/02_embeddings_and_positions.ipynb", "Chapter 3 builds attention properly", 3,
          "Scaled dot-product attention"),
    Claim("book/02_embeddings_and_positions.ipynb", "chapter 9 checks the same on a whole model", 9,
          "What RoPE makes position-aware"),
    Claim("book/02_embeddings_and_positions.ipynb", "Chapter 11 counts what a block keeps", 11,
          "One block, tensor by tensor"),
    Claim("book/03_attention.ipynb", "chapter 5 derives; for now", 5, "RMSNorm"),
    Claim("book/04_feed_forward.ipynb", "chapter 5 derives; for now", 5, "RMSNorm"),
    Claim("book/04_feed_forward.ipynb", "Chapter 8 counts whole models", 8,
          "checked on the `meta` device"),
    Claim("book/05_normalization.ipynb", "chapter 11 counts the memory it saves", 11,
          "One block, tensor by tensor"),
    Claim("book/05_normalization.ipynb", "chapter 2 timed the lookup", 2,
          "From token ids to vectors"),
    Claim("book/06_residual_stream.ipynb", "the chapter builds a two-block stack", 6,
          "What the identity term guarantees"),
    Claim("book/06_residual_stream.ipynb", "that Jacobian is (chapter 5)", 5,
          "The RMSNorm Jacobian"),
    Claim("book/07_decoder_block.ipynb", "chapter 6 builds a stack in which they cancel", 6,
          "What the identity term guarantees"),
    Claim("book/07_decoder_block.ipynb", "Chapter 10 builds the cache", 10,
          "A preallocated cache"),
    Claim("book/07_decoder_block.ipynb", "chapter 8 counts them for real models", 8,
          "Counting one block by hand"),
    Claim("book/08_counting.ipynb", "chapter 10 measures what matters during generation", 10,
          "Time: what a step costs"),
    Claim("book/09_language_model.ipynb", "Chapter 7 built one decoder block", 7,
          "Two equations, four modules"),
    Claim("book/09_language_model.ipynb", "chapter 8 counted what it costs", 8,
          "Counting one block by hand"),
    Claim("book/09_language_model.ipynb", "chapter 8 checks it against models built on", 8,
          "checked on the `meta` device"),
    Claim("book/09_language_model.ipynb", "chapter 2 found for one attention layer", 2,
          "What the score sees"),
    Claim("book/09_language_model.ipynb", "counted in chapter 8", 8, "The running example"),
    Claim("book/10_kv_cache.ipynb", "chapter 9 checked this for the logits", 9,
          "Later tokens cannot change earlier logits"),
    Claim("book/11_memory_in_training.ipynb", "Chapter 8 counted what training keeps", 8,
          "Memory budgets"),
    Claim("book/11_memory_in_training.ipynb", "Chapter 6 derived why GPT-2 scales", 6,
          "Initialising the GPT-2 way"),
    Claim("book/11_memory_in_training.ipynb", "chapter 12 measures, over three seeds", 12,
          "The scale of the first weights"),
    Claim("book/11_memory_in_training.ipynb", "chapter 12 measures it)", 12,
          "The scale of the first weights"),
    Claim("book/12_training.ipynb", "Chapter 6 measured where post-norm's gradients are large", 6,
          "Where are post-norm's gradients large"),
    Claim("book/12_training.ipynb", "chapter 11 showed", 11, "The residual stream through depth"),
    Claim("exercises/source/01_information_theory/01_information_theory.ipynb",
          "The chapter derived, for a one-hot target", 1, "Why confident mistakes cost most"),
    Claim("exercises/source/02_embeddings_and_positions/02_embeddings_and_positions.ipynb",
          "The chapter showed, pair by pair", 2, "positions is a linear map"),
    Claim("exercises/source/03_attention/03_attention.ipynb",
          "The chapter derived the backward pass of one attention head", 3,
          "The gradients of attention's parameters"),
    Claim("exercises/source/04_feed_forward/04_feed_forward.ipynb",
          "The chapter derived the backward pass of SwiGLU", 4, "The gradients of SwiGLU's parameters"),
    Claim("exercises/source/05_normalization/05_normalization.ipynb",
          "The chapter derived the Jacobian", 5, "The RMSNorm Jacobian"),
    Claim("exercises/source/08_counting/08_counting.ipynb",
          "The chapter counts the attention core", 8, "FLOPs per block"),
    Claim("exercises/source/06_residual_stream/06_residual_stream.ipynb",
          "derived in chapter 5, section *The RMSNorm Jacobian*", 5, "The RMSNorm Jacobian"),
    Claim("exercises/source/07_decoder_block/07_decoder_block.ipynb",
          "derived in chapter 5 (section *The RMSNorm Jacobian*)", 5, "The RMSNorm Jacobian"),
    Claim("exercises/source/11_memory_in_training/11_memory_in_training.ipynb",
          "The chapter counted, operation by operation", 11, "One block, tensor by tensor"),
]

def _text(path) -> str:
    """A notebook's markdown, whitespace collapsed."""
    return " ".join(" ".join("".join(c["source"]).split())
                    for c in cells_of(path) if c["cell_type"] == "markdown")


def _sources():
    return sorted(BOOK.glob("[0-9][0-9]_*.ipynb")) + sorted(EXERCISES.glob("*/*.ipynb"))


def claim_problems(claim: Claim, chapter_cells: list[dict]) -> list[str]:
    """What is wrong with a claim about chapter `claim.chapter`, given that chapter's cells."""
    matches = [h for h in headings(chapter_cells) if claim.heading.lower() in h.text.lower()]
    if not matches:
        return [f"{claim.file}: {claim.quote!r} — chapter {claim.chapter} has no heading "
                f"containing {claim.heading!r}"]
    if all(_section_problems(h) for h in matches):
        return [f"{claim.file}: {claim.quote!r} — chapter {claim.chapter}: "
                + "; ".join(_section_problems(matches[0]))]
    return []


def test_every_claim_about_a_chapter_is_listed():
    """Each "chapter N derived …" in the chapters and exercise sources is in CLAIMS, so that it is
    checked; a new one must be added with the heading that holds it."""
    listed = {(c.file, c.quote) for c in CLAIMS}
    missing = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        text = _text(path)
        quotes = [q for f, q in listed if f == rel]
        for m in CLAIM.finditer(text):
            if not any(text.startswith(q, m.start()) for q in quotes):
                missing.append(f"{rel}: {text[m.start():m.start() + 90]!r}")
    assert missing == [], "add these to CLAIMS with the heading that holds each:\n" + "\n".join(missing)


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.file.split('/')[-1][:2]}→{c.chapter}")
def test_each_claim_about_a_chapter_resolves(claim):
    if claim.quote not in _text(ROOT / claim.file):
        pytest.skip(f"no longer in {claim.file}: remove it from CLAIMS")
    problems = claim_problems(claim, cells_of(chapter_path(claim.chapter)))
    assert problems == [], problems[0]


# ------------------------------------------------------------------------------ timing chapters


def test_every_chapter_that_times_something_runs_alone_in_the_build():
    """tests/execute_book.py gives the chapters that time something the cores to themselves; a
    chapter that starts timing must be added to its TIMING_CHAPTERS."""
    import execute_book

    timing = re.compile(r"perf_counter|timeit|benchmark\.Timer|blocked_autorange|time\.time\(")
    timed = {p.name for p in CHAPTERS
             if any(timing.search("".join(c["source"])) for c in cells_of(p)
                    if c["cell_type"] == "code")}
    assert timed <= execute_book.TIMING_CHAPTERS, sorted(timed - execute_book.TIMING_CHAPTERS)

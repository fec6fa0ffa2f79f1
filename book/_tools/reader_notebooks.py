"""Reader notebooks: each chapter as it should read in Colab and Jupyter, generated from its source
(book/NN_name.ipynb, the one source of truth) and the values of the book's executed build.

    python book/_tools/reader_notebooks.py --write   # (make readers, after make book) write the stale ones
    python book/_tools/reader_notebooks.py --check   # exit 1 if a committed reader notebook is out of date

What changes from the source (book/AUTHORING.md lists what authors may use):
- every ``{glue:text}`` / ``{glue}`` role is replaced by its value from the build, formatted as myst-nb
  formats it;
- ``{cite}`` becomes "[Author et al., Year]" (linked to the paper when the entry has an eprint, DOI or
  URL), the same text as on the site (book/_ext/course_bib.py); ``{term}``, ``{ref}``, ``{eq}``,
  ``{doc}``, ``{math}``, ``{py:...}`` and the other supported roles become plain Markdown;
- admonitions become quoted callouts with a bold title; dropdowns (quiz answers) become
  ``<details>``; figures become images (embedded) with their caption; labels and comments go;
- code cells tagged ``remove-cell`` (asserts) are dropped, except the setup cell, which stays first
  (it installs course_lib on Colab); ``remove-input`` / ``hide-input`` cells are kept with their
  source collapsed;
- every code cell carries the outputs of the build that rendered the site (from the build's execution
  cache): what it printed, its tables, and its figures as PNG images (at the site's resolution,
  reduced to a 256-colour palette to keep the notebook small) followed by their captions, so that
  a chapter opened on GitHub, in Colab or in Jupyter shows what the site shows before anything runs.
  Glued values, progress bars and warnings (stderr) are left out.
Anything else that only MyST understands stops the generator with the chapter, cell and construct.

In sync means: the reader notebook records the SHA-256 of its source (cells and tags) and of this
generator; its text equals a fresh rendering of the source with every glued value masked (values
may differ between builds, timings in particular); and every ``show_source(...)`` cell shows the
source that call gives now (course_lib can change while a chapter does not, and the page would show
a reader code the package no longer has).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import html
import json
import mimetypes
import pathlib
import re
import sys
from ast import literal_eval
from collections.abc import Callable

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
READERS = BOOK / "colab"
EXECUTED = ROOT / "_build" / "jupyter_execute"
EXECUTION_CACHE = ROOT / "_build" / ".jupyter_cache" / "executed"  # myst-nb's executed notebooks
GENERATOR_FILES = [pathlib.Path(__file__).resolve(), BOOK / "_ext" / "course_bib.py"]
METADATA_KEY = "course_reader"

sys.path.insert(0, str(BOOK / "_ext"))
from course_bib import citation_text  # noqa: E402  (the site's citation text, one implementation)

MASK = "\x00{}\x00"  # a glued value in the masked rendering used by the sync check


class ReaderError(Exception):
    """A construct the generator cannot render (or a value the build does not have)."""


# --------------------------------------------------------------------------------------- sources


def chapters() -> list[pathlib.Path]:
    """The chapter notebooks, in the order of _toc.yml's "Chapters" part."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] if part["caption"] == "Chapters" for c in part["chapters"]]
    return [ROOT / f"{f}.ipynb" for f in files]


def _rel(path: pathlib.Path) -> str:
    """The path relative to the repository (as given, for a file elsewhere)."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def reader_path(chapter: pathlib.Path) -> pathlib.Path:
    return READERS / chapter.name


def _digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def source_digest(nb: dict) -> str:
    """What of the source the reader depends on: each cell's type, text and tags."""
    return _digest([(c["cell_type"], "".join(c["source"]), c["metadata"].get("tags", []))
                    for c in nb["cells"]])


def generator_digest() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in GENERATOR_FILES)).hexdigest()


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def build_values(chapter: pathlib.Path) -> dict[str, dict]:
    """The glued values (name -> mime bundle) of the chapter's executed notebook in _build/.

    Refuses a build older than the source: its code must be the source's, cell for cell."""
    executed = EXECUTED / chapter.relative_to(ROOT)
    if not executed.is_file():
        raise ReaderError(f"{_rel(executed)} does not exist: run `make book` first")
    source = json.loads(chapter.read_text())
    built = json.loads(executed.read_text())
    code = [("".join(c["source"])) for c in source["cells"] if c["cell_type"] == "code"]
    built_code = [("".join(c["source"])) for c in built["cells"] if c["cell_type"] == "code"]
    if code != built_code:
        raise ReaderError(f"the build of {_rel(chapter)} is older than its source: "
                          f"run `make book` first")
    glue = executed.with_suffix(".glue.json")  # myst-nb moves the glued outputs here
    if not glue.is_file():
        return {}
    return {name: output["data"] for name, output in json.loads(glue.read_text()).items()}


def executed_outputs(chapter: pathlib.Path) -> list[list[dict]]:
    """The outputs of each code cell of ``chapter`` as the build executed it: the notebook in the
    build's execution cache whose code is the source's, cell for cell (the newest such)."""
    source = json.loads(chapter.read_text())
    code = ["".join(c["source"]) for c in source["cells"] if c["cell_type"] == "code"]
    candidates = sorted(EXECUTION_CACHE.glob("*/base.ipynb"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in candidates:
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        if ["".join(c["source"]) for c in cells] == code:
            return [c.get("outputs", []) for c in cells]
    raise ReaderError(f"the build's execution cache has no run of {_rel(chapter)} as it is now: "
                      f"run `make book` first")


FIGURE_HTML = re.compile(r'<figure class="course-figure".*?<img src="data:image/png;base64,([^"]+)" '
                         r'alt="([^"]*)" width="(\d+)".*?<figcaption[^>]*>(.*?)</figcaption>', re.S)
MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]<>#|])")


def palette_png(png: bytes) -> bytes:
    """The image reduced to a 256-colour palette (plots use a handful of colours; a third of the
    bytes or less), same size in pixels."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        reduced = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        out = io.BytesIO()
        reduced.save(out, format="PNG", optimize=True)
    return out.getvalue() if len(out.getvalue()) < len(png) else png


def reader_outputs(outputs: list[dict]) -> list[dict]:
    """The outputs a reader sees under a cell: stdout, tables and other rich displays, errors of
    cells meant to raise, and each course figure as a PNG image followed by its caption."""
    kept = []
    for out in outputs:
        kind = out["output_type"]
        if kind == "stream":
            if out["name"] == "stdout":
                kept.append({"output_type": "stream", "name": "stdout", "text": out["text"]})
            continue  # stderr: warnings and progress bars
        if kind == "error":
            kept.append({key: out[key] for key in ("output_type", "ename", "evalue", "traceback")})
            continue
        data = out.get("data", {})
        if any(k.startswith("application/papermill.record") or k.startswith("application/vnd.jupyter.widget")
               for k in data):
            continue  # a glued value (it is in the prose) or a live widget
        page = data.get("text/html", "")
        page = "".join(page) if isinstance(page, list) else page
        figure = FIGURE_HTML.search(page)
        if figure is None:
            kept.append({"output_type": "display_data", "metadata": out.get("metadata", {}),
                         "data": {k: v for k, v in data.items() if k != "text/latex"}})
            continue
        png, alt, width, caption = figure.groups()
        png = base64.b64encode(palette_png(base64.b64decode(png))).decode("ascii")
        kept.append({"output_type": "display_data", "metadata": {"image/png": {"width": int(width)}},
                     "data": {"image/png": png, "text/plain": html.unescape(alt)}})
        caption = MARKDOWN_SPECIALS.sub(r"\\\1", html.unescape(caption))
        kept.append({"output_type": "display_data", "metadata": {},
                     "data": {"text/markdown": f"*{caption}*", "text/plain": html.unescape(caption)}})
    return kept


# ------------------------------------------------------------------------------------ references


def _bibliography() -> dict:
    from pybtex.database import parse_file

    return parse_file(str(BOOK / "references.bib")).entries


def _entry_url(entry) -> str | None:
    fields = entry.fields
    if fields.get("url"):
        return fields["url"]
    if fields.get("doi"):
        return f"https://doi.org/{fields['doi']}"
    if fields.get("eprint"):
        return f"https://arxiv.org/abs/{fields['eprint']}"
    arxiv = re.search(r"arXiv:(\d{4}\.\d{4,5})", fields.get("journal", ""))
    return f"https://arxiv.org/abs/{arxiv.group(1)}" if arxiv else None


class Context:
    """What rendering one chapter needs: its glued values, the bibliography, labels and equations."""

    def __init__(self, chapter: pathlib.Path, value: Callable[[str, str, str], str]):
        self.chapter = chapter
        self.value = value  # (role, name, format spec) -> text
        self.bib = _bibliography()
        self.labels = _labels([chapter])
        self.equations: dict[str, int] = {}
        self.where = ""

    def error(self, message: str) -> ReaderError:
        return ReaderError(f"{_rel(self.chapter)}, {self.where}: {message}")


def _labels(extra: list[pathlib.Path]) -> dict[str, str]:
    """Every `(label)=` target of the book's chapters and pages -> the text of the heading it marks."""
    found = {}
    texts = [("".join(c["source"])) for p in {*chapters(), *extra} if p.is_file()
             for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "markdown"]
    texts += [p.read_text() for p in BOOK.glob("*.md")]
    for text in texts:
        for label, heading in re.findall(r"^\(([\w.:-]+)\)=\s*\n+(?:%.*\n+)*#+\s+(.+)$", text, re.M):
            found[label] = heading.strip()
    return found


# ----------------------------------------------------------------------------------------- roles

MD_FORMATS = (":myst", ":commonmark", ":gfm")  # the formats of {glue:md}`name:format` (myst-nb)
ROLE = re.compile(r"\{([a-zA-Z][\w:+-]*)\}(`+)(.+?)\2", re.S)
TITLE_TARGET = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.S)


def _title_and_target(text: str) -> tuple[str | None, str]:
    m = TITLE_TARGET.match(text.strip())
    return (m.group(1).strip(), m.group(2).strip()) if m else (None, text.strip())


def render_role(name: str, text: str, ctx: Context) -> str:
    if name in ("glue:text", "glue", "glue:any", "glue:md"):
        key, _, spec = text.rpartition(":") if name == "glue:text" and ":" in text else (text, "", "")
        if name == "glue:md" and key.endswith(MD_FORMATS):  # how the site parses it; Jupyter needs none
            key = key.rpartition(":")[0]
        if "::" in key:
            raise ctx.error(f"{{{name}}}`{text}` glues from another document: not supported")
        return ctx.value(name, key.strip(), spec)
    if name in ("cite", "cite:p", "cite:ps", "cite:t", "cite:ts"):
        parts = []
        for key in [k.strip() for k in text.split(",")]:
            if key not in ctx.bib:
                raise ctx.error(f"{{cite}}`{key}` is not in book/references.bib")
            label = citation_text(ctx.bib[key])
            if name.startswith("cite:t"):
                who, year = label.rsplit(", ", 1)
                label = f"{who} [{year}]"
            url = _entry_url(ctx.bib[key])
            parts.append(f"[{label}]({url})" if url else label)
        return "; ".join(parts) if name.startswith("cite:t") else "[" + "; ".join(parts) + "]"
    if name == "term":
        title, target = _title_and_target(text)
        return title or target
    if name == "ref":
        title, target = _title_and_target(text)
        if title:
            return title
        if target not in ctx.labels:
            raise ctx.error(f"{{ref}}`{target}`: no heading with that label")
        return ctx.labels[target]
    if name == "eq":
        _, target = _title_and_target(text)
        if target not in ctx.equations:
            raise ctx.error(f"{{eq}}`{target}`: no labelled equation before it in this chapter")
        return f"({ctx.equations[target]})"
    if name == "doc":
        title, target = _title_and_target(text)
        if title:
            return title
        page = (BOOK / target).with_suffix(".md")
        heading = re.search(r"^#\s+(.+)$", page.read_text(), re.M) if page.is_file() else None
        if heading is None:
            raise ctx.error(f"{{doc}}`{target}`: give a title, {{doc}}`title <{target}>`")
        return heading.group(1).strip()
    if name == "math":
        return f"${text}$"
    if name.startswith("py:"):
        title, target = _title_and_target(text)
        shown = title or (target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target)
        suffix = "()" if name in ("py:func", "py:meth") and not shown.endswith(")") else ""
        return f"`{shown}{suffix}`"
    if name in ("sub", "sup", "kbd"):
        return f"<{name}>{html.escape(text)}</{name}>"
    if name == "abbr":
        return text
    raise ctx.error(f"the role {{{name}}} is not supported by the reader generator (book/AUTHORING.md)")


def render_inline(text: str, ctx: Context) -> str:
    """Replace roles outside code spans; everything else is left as it is."""
    out, i = [], 0
    while i < len(text):
        role = ROLE.match(text, i)
        if role:
            out.append(render_role(role.group(1), role.group(3), ctx))
            i = role.end()
            continue
        if text[i] == "`":  # a code span: copied verbatim up to the closing run of backticks
            run = re.match(r"`+", text[i:]).group(0)
            end = text.find(run, i + len(run))
            if end != -1:
                out.append(text[i:end + len(run)])
                i = end + len(run)
                continue
            out.append(run)
            i += len(run)
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


# ------------------------------------------------------------------------------------ directives

DIRECTIVE = re.compile(r"^(\s*)(`{3,}|:{3,})\{([\w:-]+)\}[ \t]*(.*)$")
CODE_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
ICONS = {"tip": "💡", "hint": "💡", "note": "📝", "seealso": "👉", "important": "❗", "warning": "⚠️",
         "caution": "⚠️", "attention": "⚠️", "danger": "⛔", "error": "⛔"}
ADMONITIONS = set(ICONS) | {"admonition", "dropdown"}


def _split_options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    if body and body[0].strip() == "---":
        end = body.index("---", 1) if "---" in body[1:] else None
        if end is None:
            raise ReaderError("a directive's option block (---) is not closed")
        options = {k: str(v) for k, v in (yaml.safe_load("\n".join(body[1:end])) or {}).items()}
        return options, body[end + 1:]
    k = 0
    while k < len(body) and re.match(r"^\s*:[\w-]+:", body[k]):
        key, _, value = body[k].strip()[1:].partition(":")
        options[key] = value.strip()
        k += 1
    return options, body[k:]


def _embed(path_text: str, ctx: Context) -> str:
    """An image in the book as a data URI: it shows in Colab and Jupyter without the repository."""
    if re.match(r"^[a-z]+://", path_text):
        return path_text
    path = (ctx.chapter.parent / path_text).resolve()
    if not path.is_file():
        raise ctx.error(f"image {path_text} not found")
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _join_display_math(text: str) -> str:
    """Put each $$ … $$ block on one line: inside a quoted callout, '> ' prefixes would otherwise be
    read as part of the TeX by Jupyter and Colab (newlines in TeX are only spaces)."""
    def one_line(m: re.Match) -> str:
        inner = " ".join(line.strip() for line in m.group(1).splitlines() if line.strip())
        return f"$${inner}$$"

    return re.sub(r"\$\$(.+?)\$\$", one_line, text, flags=re.S)


def render_directive(name: str, argument: str, body: list[str], ctx: Context) -> str:
    options, content = _split_options(body)
    text = "\n".join(content).strip("\n")
    if name in ADMONITIONS:
        classes = options.get("class", "").split()
        kind = name if name not in ("admonition", "dropdown") else next(
            (c for c in classes if c in ICONS), "note")
        title = render_inline(argument.strip(), ctx) or kind.capitalize()
        inner = render_markdown(text, ctx)
        if name == "dropdown" or "dropdown" in classes:
            return f"<details>\n<summary><b>{title}</b></summary>\n\n{inner}\n\n</details>"
        quoted = "\n".join(f"> {line}" if line.strip() else ">" for line in _join_display_math(inner).splitlines())
        return f"> **{ICONS[kind]} {title}**\n>\n{quoted}"
    if name in ("figure", "image"):
        alt = options.get("alt", "").strip()
        if not alt:
            raise ctx.error(f"the {name} {argument} has no :alt: text")
        width = re.sub(r"px$", "", options.get("width", ""))
        size = f' width="{width}"' if width.isdigit() else ""
        image = f'<img src="{_embed(argument.strip(), ctx)}" alt="{html.escape(alt)}"{size}>'
        if name == "image":
            return image
        if not text.strip():
            raise ctx.error(f"the figure {argument} has no caption")
        return f"{image}\n\n*{render_inline(text.strip(), ctx)}*"
    if name == "math":
        tag = f" \\tag{{{_number_equation(options['label'], ctx)}}}" if "label" in options else ""
        return f"$$\n{text}{tag}\n$$"
    if name in ("code-block", "code", "code-cell"):
        return f"```{argument.strip()}\n{text}\n```"
    raise ctx.error(f"the directive {{{name}}} is not supported by the reader generator (book/AUTHORING.md)")


def _number_equation(label: str, ctx: Context) -> int:
    ctx.equations.setdefault(label, len(ctx.equations) + 1)
    return ctx.equations[label]


def render_markdown(text: str, ctx: Context) -> str:
    """Render one markdown cell (or a directive's body): block constructs first, then roles."""
    lines = text.split("\n")
    out: list[str] = []
    plain: list[str] = []  # ordinary Markdown lines waiting for their roles to be rendered

    def flush() -> None:
        if plain:
            out.append(render_inline("\n".join(plain), ctx))
            plain.clear()

    i, in_math = 0, False
    while i < len(lines):
        line = lines[i]
        if not in_math:
            directive = DIRECTIVE.match(line)
            if directive:
                indent, fence, name, argument = directive.groups()
                closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
                end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), None)
                if end is None:
                    raise ctx.error(f"the {{{name}}} directive is not closed")
                body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:end]]
                flush()
                rendered = render_directive(name, argument, body, ctx)
                out.append("\n".join(indent + ln if ln else ln for ln in rendered.split("\n")))
                i = end + 1
                continue
            fence = CODE_FENCE.match(line)
            if fence:  # an ordinary code block: verbatim
                closing = re.compile(rf"^\s*{re.escape(fence.group(2)[0])}{{{len(fence.group(2))},}}\s*$")
                end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), len(lines) - 1)
                flush()
                out.append("\n".join(lines[i:end + 1]))
                i = end + 1
                continue
            if re.match(r"^\([\w.:-]+\)=\s*$", line) or re.match(r"^%", line) or line.strip() == "+++":
                i += 1  # a label target, a MyST comment, a block break
                continue
            if re.match(r"^\s*\{\{", line) or "{{ " in line:
                raise ctx.error("MyST substitutions ({{ … }}) are not supported")
        # display math: an equation label "$$ (label)" becomes \tag{n}
        label = re.match(r"^(.*)\$\$\s*\(([\w.:-]+)\)\s*$", line)
        if label:
            n = _number_equation(label.group(2), ctx)
            line = f"{label.group(1)}\\tag{{{n}}} $$" if label.group(1).strip() else f"\\tag{{{n}}}\n$$"
        if line.count("$$") % 2 == 1:
            in_math = not in_math
        plain.append(line)
        i += 1
    flush()
    return "\n".join(out)


# -------------------------------------------------------------------------------------- notebooks


def _markdown_cell(text: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text.splitlines(keepends=True)}


def _code_cell(source: str, metadata: dict, cell_id: str, outputs: list[dict] | None = None) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": cell_id, "metadata": metadata,
            "outputs": outputs or [], "source": source.splitlines(keepends=True)}


def note_text(chapter: pathlib.Path) -> str:
    return ("*This notebook is the chapter as generated for Colab and Jupyter from the book's source. "
            "Run the cell above first: where `course_lib` is missing it installs it, then it picks the "
            "GPU if there is one. The numbers in the text and the outputs under the cells are those of "
            "the build that made the site, on a CPU: timings and other measurements will differ on "
            "your machine.*")


def render_notebook(chapter: pathlib.Path, value: Callable[[str, str, str], str],
                    outputs: list[list[dict]] | None = None) -> dict:
    """The reader notebook of ``chapter`` with ``value(role, name, spec)`` giving each glued text and
    ``outputs[k]`` the executed outputs of its k-th code cell (None: no outputs)."""
    source = json.loads(chapter.read_text())
    code_index = -1
    ctx = Context(chapter, value)
    cells = []
    for index, cell in enumerate(source["cells"]):
        ctx.where = f"cell {index}"
        tags = _tags(cell)
        cell_id = cell.get("id") or f"cell-{index}"  # the source's id: links into the notebook stay
        if cell["cell_type"] == "code":
            code_index += 1
            shown = reader_outputs(outputs[code_index]) if outputs is not None else []
            text = "".join(cell["source"])
            if index == 0:  # the setup cell: kept first, as it is (it installs course_lib on Colab)
                cells.append(_code_cell(text, {}, cell_id, shown))
                cells.append(_markdown_cell(note_text(chapter), "course-reader-note"))
                continue
            if "remove-cell" in tags:
                continue
            metadata: dict = {}
            kept = [t for t in tags if t in ("raises-exception", "skip-execution")]
            if kept:
                metadata["tags"] = kept
            if {"remove-input", "hide-input", "hide-cell"} & set(tags):
                metadata["jupyter"] = {"source_hidden": True}
            if "hide-output" in tags:
                metadata.setdefault("jupyter", {})["outputs_hidden"] = True
            cells.append(_code_cell(text, metadata, cell_id, shown))
        elif cell["cell_type"] == "markdown":
            if "remove-cell" in tags:
                continue
            rendered = render_markdown("".join(cell["source"]), ctx).strip("\n")
            if rendered.strip():
                cells.append(_markdown_cell(rendered, cell_id))
        else:
            raise ctx.error(f"a {cell['cell_type']} cell: chapters hold only code and markdown cells")
    if not cells or cells[0]["cell_type"] != "code":
        raise ReaderError(f"{_rel(chapter)}: the first cell must be the setup cell")
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "colab": {"toc_visible": True},
            METADATA_KEY: {"source": _rel(chapter),
                           "source_sha256": source_digest(source),
                           "generator_sha256": generator_digest()},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def format_value(role: str, name: str, spec: str, values: dict[str, dict], chapter: pathlib.Path) -> str:
    """A glued value as myst-nb shows it (myst_nb.core.variables.format_plain_text)."""
    if name not in values:
        raise ReaderError(f"{_rel(chapter)}: nothing is glued under {name!r} in the build")
    data = values[name]
    if role == "glue:md":
        return data["text/markdown"]
    text = data.get("text/plain")
    if text is None:
        raise ReaderError(f"{_rel(chapter)}: {name!r} has no text/plain value")
    if role != "glue:text":
        return text
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    spec = spec or "s"
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


def reader_from_build(chapter: pathlib.Path) -> dict:
    values = build_values(chapter)
    return render_notebook(chapter, lambda role, name, spec: format_value(role, name, spec, values, chapter),
                           executed_outputs(chapter))


def masked_reader(chapter: pathlib.Path) -> dict:
    """The reader notebook with every glued value replaced by a marker (for the sync check)."""
    return render_notebook(chapter, lambda role, name, spec: MASK.format(name))


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------------------- checks


def out_of_sync(chapter: pathlib.Path) -> str | None:
    """Why the committed reader notebook of ``chapter`` is out of date, or None if it is in sync."""
    path = reader_path(chapter)
    fix = "run `make book && make readers` and commit it"
    if not path.is_file():
        return f"{_rel(path)} is missing: {fix}"
    committed = json.loads(path.read_text())
    meta = committed.get("metadata", {}).get(METADATA_KEY, {})
    source = json.loads(chapter.read_text())
    if meta.get("source_sha256") != source_digest(source):
        return f"{_rel(path)} was generated from an older {chapter.name}: {fix}"
    if meta.get("generator_sha256") != generator_digest():
        return f"{_rel(path)} was generated by an older book/_tools/reader_notebooks.py: {fix}"
    expected = masked_reader(chapter)
    if len(expected["cells"]) != len(committed["cells"]):
        return f"{_rel(path)} has {len(committed['cells'])} cells, its source gives " \
               f"{len(expected['cells'])}: {fix}"
    for k, (want, got) in enumerate(zip(expected["cells"], committed["cells"])):
        want_text, got_text = "".join(want["source"]), "".join(got["source"])
        pattern = "".join(re.escape(part) if n % 2 == 0 else ".+?"
                          for n, part in enumerate(want_text.split("\x00")))
        if want["cell_type"] != got["cell_type"] or re.fullmatch(pattern, got_text, re.S) is None:
            return f"{_rel(path)}, cell {k}, differs from its source's rendering: {fix}"
        if want["metadata"] != got["metadata"]:
            return f"{_rel(path)}, cell {k}: metadata differs from its source's: {fix}"
    stale = stale_source_cells(committed)
    if stale:
        return f"{_rel(path)}, cell {stale[0]}: its show_source output is not what the call shows now: {fix}"
    return None


def _course_lib_imports(cells: list[dict]) -> dict:
    """A namespace holding what the cells' top-level imports of course_lib bind (``from course_lib
    import attention as at``, ``from course_lib.model import DecoderLM``, …)."""
    namespace: dict = {}
    for cell in cells:
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]  # None: a relative import
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            if all(module.split(".")[0] == "course_lib" for module in modules):
                exec(compile(ast.Module([node], []), "<reader imports>", "exec"), namespace)
    return namespace


def stale_source_cells(reader: dict) -> list[int]:
    """The indices of the reader's ``show_source(...)`` cells whose shown text (text/plain) is not
    what the call shows now, formatted by IPython as a kernel formats it, or that are not one call of
    something the reader imports from course_lib. Cells without outputs (a reader rendered without
    a build) are not checked."""
    from IPython.core.formatters import format_display_data

    code = [cell for cell in reader["cells"] if cell["cell_type"] == "code"]
    namespace = None
    stale = []
    for index, cell in enumerate(reader["cells"]):
        text = "".join(cell["source"])
        if cell["cell_type"] != "code" or "show_source(" not in text:
            continue
        shown = ["".join(out.get("data", {}).get("text/plain", "")) for out in cell.get("outputs", [])]
        if not shown:
            continue
        if namespace is None:
            namespace = _course_lib_imports(code[1:])  # show_source among them, as in the notebook
        try:
            displayed = eval(compile(text, "<show_source cell>", "eval"), dict(namespace))
        except Exception:  # not one call, or of something the imports do not give: not checkable
            stale.append(index)
            continue
        if shown != [format_display_data(displayed)[0].get("text/plain", "")]:
            stale.append(index)
    return stale


def write_all() -> int:
    READERS.mkdir(exist_ok=True)
    failures = 0
    for chapter in chapters():
        if out_of_sync(chapter) is None:
            continue  # only the values could differ (timings): leave the committed notebook alone
        try:
            text = dumps(reader_from_build(chapter))
        except ReaderError as err:
            print(f"not written: {err}", file=sys.stderr)
            failures += 1
            continue
        path = reader_path(chapter)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {_rel(path)}")
    return failures


def check_all() -> int:
    problems = [p for p in (out_of_sync(c) for c in chapters()) if p]
    for problem in problems:
        print(problem, file=sys.stderr)
    return len(problems)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        sys.exit(1 if write_all() else 0)
    if sys.argv[1:] == ["--check"]:
        sys.exit(1 if check_all() else 0)
    raise SystemExit(__doc__)

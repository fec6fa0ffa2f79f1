"""The one setup cell that opens every notebook, and every Colab link of the course, derived from the
repository URL and branch in _config.yml (the one place they are set).

The cell installs course_lib where it is missing (Colab): from the repository, or from the local path
or pip requirement in the environment variable COURSE_LIB_SOURCE (tests/test_colab.py uses it to run
every reader notebook and released exercise in a fresh Colab-like environment).

    python book/_tools/setup_cell.py --write   # (make sync-setup) rewrite the first cell of every
                                               # notebook and every Colab link to match _config.yml

tests/test_notebooks.py checks that every notebook starts with exactly this cell and that every Colab
link opens a file of the repository and branch _config.yml names.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


# On the site the setup cell is not shown (the intro explains it; every page would repeat it). Reader
# notebooks (Colab) keep it: it installs course_lib there.
SETUP_TAGS = ["remove-cell"]


def _repository() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]


def repo_url() -> str:
    return _repository()["url"].rstrip("/")


def repo_branch() -> str:
    """The branch the Colab links and launch buttons open (``repository.branch``)."""
    return _repository().get("branch", "main")


def colab_prefix() -> str:
    """What every Colab link of the course starts with; the file's repository path follows."""
    return f"https://colab.research.google.com/github/{repo_url().removeprefix('https://github.com/')}" \
           f"/blob/{repo_branch()}/"


COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/[\w.-]+/")


def link_files() -> list[pathlib.Path]:
    """The files whose Colab links :func:`write_all` keeps in step with _config.yml."""
    return [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md")), *notebook_paths()]


def setup_source() -> str:
    return f'''\
# Setup: the same first cell in every notebook of the course.
# Where course_lib is missing (as on Colab) it is installed from the course repository,
# or from COURSE_LIB_SOURCE (a local path or any pip requirement) when that is set.
import importlib.util
import os
import subprocess
import sys

COURSE_REPO = "{repo_url()}"
if importlib.util.find_spec("course_lib") is None:
    requirement = os.environ.get("COURSE_LIB_SOURCE", f"git+{{COURSE_REPO}}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", requirement],
                   check=True)
    importlib.invalidate_caches()

from course_lib.notebook import setup

device = setup(seed=0)'''


def notebook_paths(readers: bool = False) -> list[pathlib.Path]:
    """Every chapter and exercise notebook (source and release) of the course; with ``readers``, also
    the generated reader notebooks (book/colab/, which copy the setup cell from their chapter)."""
    found = []
    for folder in ("book", "exercises/source", "exercises/release"):
        found += [p for p in sorted((ROOT / folder).rglob("*.ipynb"))
                  if ".ipynb_checkpoints" not in p.parts and (readers or "colab" not in p.parts)]
    return found


def first_code_cell(nb: dict) -> dict:
    return next(c for c in nb["cells"] if c["cell_type"] == "code")


def write_all() -> None:
    prefix = colab_prefix()
    for path in link_files():
        text = path.read_text()
        linked = COLAB_LINK.sub(prefix, text)
        if linked != text:
            path.write_text(linked)
            print(f"updated the Colab links of {path.relative_to(ROOT)}")
    source = setup_source()
    for path in notebook_paths():
        nb = json.loads(path.read_text())
        cell = nb["cells"][0]
        if cell["cell_type"] != "code":
            raise SystemExit(f"{path}: the first cell must be the setup code cell")
        if "".join(cell["source"]) != source or cell["metadata"].get("tags") != SETUP_TAGS:
            cell["source"] = source.splitlines(keepends=True)
            cell["metadata"]["tags"] = SETUP_TAGS
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            print(f"updated {path.relative_to(ROOT)}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(__doc__)
    write_all()

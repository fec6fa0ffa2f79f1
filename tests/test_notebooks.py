"""Rules every notebook follows: the same setup cell first, no outputs committed, one repository URL."""

import json
import re

import pytest

from setup_cell import ROOT, colab_prefix, link_files, notebook_paths, repo_url, setup_source

NOTEBOOKS = notebook_paths(readers=True)
IDS = [str(p.relative_to(ROOT)) for p in NOTEBOOKS]


def test_there_are_chapters_and_exercises():
    names = {p.parent.name if "exercises" in p.parts else "book" for p in NOTEBOOKS}
    assert "book" in names and len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_first_cell_is_the_setup_cell(path):
    nb = json.loads(path.read_text())
    first = nb["cells"][0]
    assert first["cell_type"] == "code"
    assert "".join(first["source"]) == setup_source(), f"{path.name}: run `make sync-setup`"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if not {"release", "colab"} & set(p.parts)],
                         ids=[i for i, p in zip(IDS, NOTEBOOKS) if not {"release", "colab"} & set(p.parts)])
def test_committed_without_outputs(path):
    """Sources carry no outputs (the reader notebooks in book/colab/ carry the build's: test_readers)."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{path.name} has outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_device_hardcoding_and_no_downloads(path):
    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"][1:] if c["cell_type"] == "code")
    assert ".cuda()" not in code and 'device="cuda"' not in code
    assert "from_pretrained" not in code and "load_dataset" not in code and "http" not in code


def test_repository_url_is_kept_in_one_place():
    """_config.yml holds the URL; the setup cell, README and pages must use exactly that one."""
    url = repo_url()
    assert url in setup_source()
    owner_repo = url.removeprefix("https://github.com/")
    pattern = re.compile(r"github\.com/([\w.-]+/[\w.-]+)")
    texts = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "book").glob("*.md")), *NOTEBOOKS]
    for path in texts:
        for found in pattern.findall(path.read_text()):
            assert found.removesuffix(".git") == owner_repo, f"{path.name} links to {found}, not {owner_repo}"
    readme = (ROOT / "README.md").read_text()
    assert f"colab.research.google.com/github/{owner_repo}/" in readme


def test_colab_links_open_files_of_the_configured_repository_and_branch():
    prefix = colab_prefix()  # from _config.yml's repository url and branch, the one place
    any_link = re.compile(r"https://colab\.research\.google\.com/github/[^\s)\"'<>]+")
    links = [(p, m) for p in link_files() for m in any_link.findall(p.read_text())]
    assert links
    for path, link in links:
        assert link.startswith(prefix), (
            f"{path.relative_to(ROOT)}: {link} does not start with {prefix} (make sync-setup)")
        assert (ROOT / link.removeprefix(prefix)).is_file(), link

"""What an adopter reads first agrees with itself: the licences, the version in every place that
states it, the citation file (validated against the Citation File Format's schema), and the README
as a page for users."""

import ast
import hashlib
import json
import pathlib
import re
import tomllib

import jsonschema  # nbformat's dependency, so always in the dev environment (jupyter-book, nbgrader)
import pytest
import yaml

import course_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FIXTURES = ROOT / "tests" / "fixtures"
CFF_SCHEMA = FIXTURES / "citation-file-format-1.2.0.schema.json"
README = (ROOT / "README.md").read_text()
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()
VERSION_HEADING = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def pyproject_version() -> str:
    """The version setuptools gives the package: pyproject's dynamic attr, read statically as
    setuptools reads it (the installed metadata may predate the last edit)."""
    assert "version" in PYPROJECT["project"]["dynamic"] and "version" not in PYPROJECT["project"]
    attr = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    path = ROOT / (module.replace(".", "/") + "/__init__.py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{attr} is not assigned a literal in {path}")


def changelog_releases() -> list[tuple[str, str]]:
    """(version, date) of every released version, newest first, as the headings give them."""
    return VERSION_HEADING.findall(CHANGELOG)


def citation() -> dict:
    # through JSON, so that the data is what a JSON validator sees (YAML dates would be date objects)
    return json.loads(json.dumps(yaml.safe_load((ROOT / "CITATION.cff").read_text()), default=str))


# --------------------------------------------------------------------------------------- versions


def test_version_is_the_same_everywhere():
    releases = changelog_releases()
    assert releases, "CHANGELOG.md has no '## [x.y.z] - YYYY-MM-DD' heading"
    latest, released_on = releases[0]
    assert course_lib.__version__ == pyproject_version() == latest, (
        f"course_lib.__version__ {course_lib.__version__}, pyproject {pyproject_version()}, "
        f"CHANGELOG's latest {latest}")
    cff = citation()
    assert cff["version"] == latest and cff["date-released"] == released_on
    assert set(re.findall(r"\bversion (\d+\.\d+\.\d+)", README)) == {latest}, "the README's citation"


def test_changelog_keeps_a_changelog():
    assert CHANGELOG.startswith("# Changelog\n")
    assert "keepachangelog.com" in CHANGELOG
    headings = re.findall(r"^## (.*)$", CHANGELOG, re.M)
    assert headings[0] == "[Unreleased]", "the first section gathers what is not released yet"
    assert all(VERSION_HEADING.match(f"## {h}") for h in headings[1:]), headings
    versions = [tuple(map(int, v.split("."))) for v, _ in changelog_releases()]
    dates = [d for _, d in changelog_releases()]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    assert dates == sorted(dates, reverse=True)
    allowed = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    assert set(re.findall(r"^### (.*)$", CHANGELOG, re.M)) <= allowed


# --------------------------------------------------------------------------------------- citation


def test_schema_fixture_is_the_published_one():
    """The schema is vendored (tests run offline); tests/fixtures/README.md says where it is from."""
    digest = hashlib.sha256(CFF_SCHEMA.read_bytes()).hexdigest()
    assert digest in (FIXTURES / "README.md").read_text(), "the schema changed: update its provenance"
    assert json.loads(CFF_SCHEMA.read_text())["$id"] == "https://citation-file-format.github.io/1.2.0/schema.json"


def _validator():
    schema = json.loads(CFF_SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def test_citation_file_is_valid():
    cff = citation()
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(cff)]
    assert errors == []
    assert cff["cff-version"] == "1.2.0"
    assert set(cff["license"]) == {"MIT", "CC-BY-4.0"}
    assert cff["repository-code"] == PYPROJECT["project"]["urls"]["Homepage"]


@pytest.mark.parametrize("break_it", [
    lambda c: c.pop("authors"),
    lambda c: c.update({"date-released": "28 November 2026"}),
    lambda c: c.update({"license": "MIT and more"}),
    lambda c: c.update({"cff-version": "1.1.0"}),
    lambda c: c.update({"title": ""}),
], ids=["no-authors", "date-format", "not-spdx", "old-cff-version", "empty-title"])
def test_the_validation_catches_a_broken_citation(break_it):
    cff = citation()
    break_it(cff)
    assert list(_validator().iter_errors(cff))


# --------------------------------------------------------------------------------------- licences


def test_code_is_mit_and_the_package_says_so():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 The Inside the Transformer Block authors" in text
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in text
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in PYPROJECT["project"].get("classifiers", []))


def test_content_is_cc_by_with_its_legal_code():
    text = (ROOT / "LICENSE-CONTENT.md").read_text()
    assert "Creative Commons Attribution 4.0 International" in text
    assert "https://creativecommons.org/licenses/by/4.0/legalcode" in text
    sections = re.findall(r"^Section (\d) -- ", text, re.M)
    assert sections == [str(i) for i in range(1, 9)], "the legal code is there in full"
    for part in ("book/", "book/figures/", "exercises/source/", "exercises/release/", "LICENSE"):
        assert part in text, part
    assert "course_lib/corpus/README.md" in text  # the corpus keeps its own provenance


def test_readme_and_site_say_which_licence_covers_what():
    licence = README[README.index("## Licence"):]
    for name in ("LICENSE", "LICENSE-CONTENT.md", "MIT", "CC BY 4.0", "course_lib/corpus/README.md"):
        assert name in licence, name
    assert (ROOT / "course_lib" / "corpus" / "README.md").is_file()
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    footer = config["html"]["extra_footer"]
    assert "MIT" in footer and "CC BY 4.0" in footer


# ----------------------------------------------------------------------------------------- README


def test_readme_is_a_page_for_users():
    lines = README.splitlines()
    assert len(lines) <= 160, f"README.md has {len(lines)} lines: details belong in benchmarks/, exercises/, CHANGELOG"
    for section in ("## Two commands", "## Chapters", "## Train and sample from the command line",
                    "## Run the experiments", "## Running in Colab", "## For students", "## For instructors",
                    "## Repository layout", "## Contributing", "## How to cite", "## Licence"):
        assert section in lines, section
    # the two commands, as CI (.ci/run) and a fresh clone run them
    assert "make book" in README and re.search(r"^make test\b", README, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test-fast" in README and re.search(r"^test-fast:", (ROOT / "Makefile").read_text(), re.M)
    for link in ("exercises/README.md", "benchmarks/README.md", "CHANGELOG.md", "CITATION.cff"):
        assert f"]({link})" in README and (ROOT / link).is_file(), link


def test_measurements_name_their_command_and_machine():
    bench = (ROOT / "benchmarks" / "README.md").read_text()
    for command in ("python benchmarks/benchmark.py", "python benchmarks/nanogpt_recipe.py",
                    "python -m course_lib.train", "python -m course_lib.experiments"):
        assert command in bench, command
    assert "**The machine.**" in bench
    for number in ("1.625", "0.96×"):  # the README's headline comes from here
        assert number in bench and number in README, number

"""The package installs as documented, and environment.yml agrees with pyproject.toml."""

import pathlib
import re
import tomllib

import yaml
from packaging.requirements import Requirement

import course_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", course_lib.__version__)


def test_core_dependencies_are_ranges_that_keep_colabs_torch():
    core = {Requirement(r).name: Requirement(r) for r in PYPROJECT["project"]["dependencies"]}
    # tqdm draws the training progress bar (chapter 12); like everything outside torch, NumPy and
    # matplotlib it is imported only when used (test_imports_only_the_allowed_libraries)
    assert set(core) == {"torch", "numpy", "matplotlib", "tqdm"}
    assert all(not str(req.specifier).startswith("==") for req in core.values())


def test_environment_yml_agrees_with_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert any(d.startswith("python=3.11") for d in conda) and "pip" in conda
    (pip_section,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert "-e ." in pip_section
    env_reqs = {Requirement(r).name.lower(): Requirement(r) for r in pip_section if r != "-e ."}

    core = {Requirement(r).name.lower(): Requirement(r) for r in PYPROJECT["project"]["dependencies"]}
    dev = {Requirement(r).name.lower(): Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["dev"]}
    assert set(env_reqs) == set(core) | set(dev), "environment.yml and pyproject.toml list different packages"
    for name, req in dev.items():  # pinned in both, to the same version
        assert str(env_reqs[name].specifier) == str(req.specifier), name
    for name, req in core.items():  # the environment pins a version the package accepts
        pinned = str(env_reqs[name].specifier).removeprefix("==")
        assert req.specifier.contains(pinned), f"{name}: environment.yml pins {pinned}, pyproject needs {req.specifier}"


def test_makefile_installs_the_same_torch_first():
    makefile = (ROOT / "Makefile").read_text()
    env = (ROOT / "environment.yml").read_text()
    pinned = re.search(r"TORCH_SPEC \?= (torch==[\d.]+)", makefile).group(1)
    assert pinned in env
    install = makefile[makefile.index("$(STAMP):"):]
    assert install.index("$(TORCH_SPEC)") < install.index('-e ".[dev]"')


def test_imports_only_the_allowed_libraries():
    """course_lib imports torch, numpy and matplotlib at import time, nothing else outside the stdlib."""
    import subprocess
    import sys

    code = (
        "import sys; before = set(sys.modules); import course_lib, course_lib.grading; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new - set(sys.stdlib_module_names)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    third_party = set(eval(out)) - {"course_lib", "torch", "numpy", "matplotlib"}
    # torch's own imports (e.g. sympy, typing_extensions) are allowed; nothing the course chose
    assert not third_party & {"transformers", "myst_nb", "nbgrader", "IPython", "pandas", "scipy", "yaml"}, third_party

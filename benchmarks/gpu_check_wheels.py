"""The wheels the GPU check needs on a GPU machine that has torch but cannot reach PyPI (a cluster's
compute node, say): downloaded where PyPI is reachable, for that machine's Python, into one folder to
copy there.

    python benchmarks/gpu_check_wheels.py --python-version 3.12 --have have.txt --out wheels
    # then, on the GPU machine, from the course's folder:
    python -m pip install --no-index --no-deps --target /tmp/site wheels/*.whl
    PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site python benchmarks/gpu_check.py

What the check runs besides torch: ``course_lib``'s other requirements (NumPy, Matplotlib, tqdm),
the Jupyter kernel and nbconvert's executor for the chapters, nbgrader for the exercises, and Hugging
Face's transformers for the benchmark, at the versions ``pyproject.toml``'s ``dev`` extra pins (a
test checks they agree), with everything they require, built for ``--python-version`` on x86-64
Linux.

Two kinds of package are left out, so that the folder stays small (about 26 MB for Python 3.12 where
the machine already has transformers):

- what the GPU machine already has: ``--have FILE`` names them, one per line, as
  ``python -m pip list --format=freeze`` prints them there (``name==version``; a bare name will do).
  A requirement it has is not downloaded, nor what only that requirement needs: its own version
  keeps what it came with;
- :data:`NOT_IMPORTED`: the front ends and the debugger that nbgrader and ipykernel declare but that
  a headless run never imports (JupyterLab, the Notebook server's pages, the widgets' browser side,
  Babel's locale data, debugpy, jedi). Every chapter and every exercise, and the dry run of the
  other steps, ran without them on 2026-12-07 (torch 2.11, transformers 5.17, Python 3.11, on a CPU).

Installing with ``--no-deps`` takes the folder as it is: pip resolves nothing on the GPU machine, so
nothing it has is replaced. The console scripts (nbgrader runs ``alembic``) land in the target's bin
folder, hence the PATH above. A failed download ends in one line and a non-zero status, and leaves
``--out`` as it was.
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's course_lib, installed or not

from course_lib._cli import OneLineParser  # noqa: E402
from packaging.requirements import InvalidRequirement, Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

PROG = "benchmarks/gpu_check_wheels.py"

#: What the check runs besides torch (course_lib's other requirements among them), pinned where
#: pyproject.toml's dev extra pins them.
REQUIREMENTS = ["nbgrader==0.9.6", "ipykernel==7.4.0", "ipywidgets", "nbconvert", "nbclient",
                "transformers==5.23.0", "tqdm", "matplotlib==3.11.2", "numpy==2.4.6"]

#: Declared by the packages above, never imported by the check (a headless kernel, nbconvert, nbgrader's
#: command line): browser front ends and their build tools, locale data, the debugger, completion.
NOT_IMPORTED = frozenset({
    "jupyterlab", "jupyterlab-server", "jupyterlab-widgets", "jupyter-builder", "jupyter-lsp", "notebook",
    "notebook-shim", "widgetsnbextension", "json5", "babel", "debugpy", "jedi", "parso",
})

#: The x86-64 Linux wheel tags pip may take, newest first (pip matches each exactly).
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]


def requirement_name(requirement: str) -> str:
    """The distribution a requirement line names (``name==1.0``, ``name @ url``, a bare name), canonical."""
    return canonicalize_name(Requirement(requirement).name)


def wheel_name(filename: str) -> str:
    """The distribution a wheel file holds: its name's first field (PEP 427), canonical."""
    return canonicalize_name(filename.split("-", 1)[0])


def read_have(path: Path) -> set[str]:
    """The packages named in ``path``, one per line (``name==version`` or a bare name; blank lines and
    ``#`` comments skipped), canonical."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {requirement_name(line) for line in lines if line}


def download(requirements: list[str], python_version: str, into: Path) -> None:
    """pip download of ``requirements`` and everything they require, as wheels for ``python_version``
    on x86-64 Linux, into ``into``; a failure raises RuntimeError with pip's last line."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--implementation",
               "cp", "--python-version", python_version, "--dest", str(into)]
    command += [arg for platform in PLATFORMS for arg in ("--platform", platform)] + requirements
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise RuntimeError(f"pip download failed: {lines[-1] if lines else f'status {done.returncode}'}")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--python-version", required=True, metavar="X.Y",
                        help="the GPU machine's Python, as 3.12")
    parser.add_argument("--have", type=Path, metavar="FILE",
                        help="the packages the GPU machine has (its `pip list --format=freeze`): left out")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the folder for the wheels (made anew; it must not hold anything else)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d{1,2}", args.python_version):
        parser.error(f"--python-version {args.python_version!r}: give the major and minor version, as 3.12")
    try:
        have = read_have(args.have) if args.have else set()
    except OSError as err:
        parser.error(f"--have {str(args.have)!r} cannot be read: {err.strerror or err}")
    except InvalidRequirement as err:
        parser.error(f"--have {str(args.have)!r} holds a line that names no package: {err}")
    if args.out.exists() and (not args.out.is_dir() or any(p.suffix != ".whl" for p in args.out.iterdir())):
        parser.error(f"--out {str(args.out)!r} holds something other than wheels: give a new folder")
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    # downloaded beside --out and renamed into place: a failure leaves --out as it was
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        # a requirement the machine has is not asked for, nor what only it needs
        download([r for r in REQUIREMENTS if requirement_name(r) not in have],
                 args.python_version, tmp)
    except (RuntimeError, OSError) as err:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    names = {wheel_name(w.name) for w in tmp.glob("*.whl")}
    for wheel in tmp.glob("*.whl"):
        if wheel_name(wheel.name) in have | NOT_IMPORTED:
            wheel.unlink()
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    kept = list(out.glob("*.whl"))
    size = sum(w.stat().st_size for w in kept)
    print(f"{len(kept)} wheels, {size / 2**20:.1f} MiB, in {args.out}; left out: {len(names & have)} the "
          f"machine has, {len(names & NOT_IMPORTED - have)} never imported")
    return 0


if __name__ == "__main__":
    sys.exit(main())

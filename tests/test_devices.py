"""GPU-ready: no notebook (chapter source, reader notebook, exercise) and no course_lib module hard-codes
a device; tensors follow the ``device`` the setup cell picks (course_lib.device, the one exception).

The rule, on the code's syntax tree (comments and strings elsewhere do not count):
- no ``.cuda(...)`` call;
- no device literal ("cpu", "cuda", "cuda:0", "mps", "xpu") given as ``device=`` / ``device_type=``,
  to ``torch.device(...)``, ``torch.set_default_device(...)`` or ``torch.autocast(...)``, or assigned
  to a name that says device (``DEVICE = "cuda"``);
- no ``.to("cuda")`` / ``.to("mps")``.
Allowed: ``.cpu()`` and ``.to("cpu")`` (moving a result to the host, for NumPy or a comparison),
``map_location=...``, ``"meta"`` (shapes without memory), and comparisons such as
``device.type == "cuda"``.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re

import pytest

from setup_cell import ROOT

DEVICE_LITERAL = re.compile(r"^(cpu|cuda(:\d+)?|mps|xpu)$")
ACCELERATOR_LITERAL = re.compile(r"^(cuda(:\d+)?|mps|xpu)$")
DEVICE_FUNCTIONS = {"torch.device", "torch.set_default_device", "torch.autocast", "torch.amp.autocast"}


def _literal(node: ast.AST, pattern: re.Pattern = DEVICE_LITERAL) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.match(node.value):
        return node.value
    return None


def hard_coded_devices(code: str) -> list[tuple[int, str]]:
    """(line, what) for every hard-coded device in ``code``."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "cuda":
                found.append((node.lineno, f"{ast.unparse(node)}: .cuda() pins the GPU"))
            for keyword in node.keywords:
                if keyword.arg in ("device", "device_type") and _literal(keyword.value):
                    found.append((node.lineno, f"{keyword.arg}={keyword.value.value!r}"))
            if ast.unparse(func) in DEVICE_FUNCTIONS and node.args and _literal(node.args[0]):
                found.append((node.lineno, f"{ast.unparse(func)}({node.args[0].value!r})"))
            if isinstance(func, ast.Attribute) and func.attr == "to" and node.args \
                    and _literal(node.args[0], ACCELERATOR_LITERAL):
                found.append((node.lineno, f".to({node.args[0].value!r})"))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _literal(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any("device" in ast.unparse(t).lower() for t in targets):
                found.append((node.lineno, f"{ast.unparse(node)}"))
    return found


def notebook_code(path: pathlib.Path) -> list[tuple[int, str]]:
    """(cell index, code) of every code cell; IPython magics and shell lines are left out."""
    cells = json.loads(path.read_text())["cells"]
    return [(i, "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                          for ln in "".join(c["source"]).splitlines()))
            for i, c in enumerate(cells) if c["cell_type"] == "code"]


NOTEBOOKS = sorted([*ROOT.glob("book/*.ipynb"), *ROOT.glob("book/colab/*.ipynb"),
                    *ROOT.glob("exercises/source/*/*.ipynb"), *ROOT.glob("exercises/release/*/*.ipynb")])
MODULES = sorted(p for p in ROOT.glob("course_lib/**/*.py") if p != ROOT / "course_lib" / "device.py")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_notebook_follows_the_device(path):
    problems = [f"cell {i}, line {line}: {what}" for i, code in notebook_code(path)
                for line, what in hard_coded_devices(code)]
    assert problems == [], f"{path.relative_to(ROOT)} hard-codes a device (use `device`): {problems}"


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(ROOT)) for p in MODULES])
def test_module_follows_the_device(path):
    problems = [f"line {line}: {what}" for line, what in hard_coded_devices(path.read_text())]
    assert problems == [], f"{path.relative_to(ROOT)} hard-codes a device (follow the tensors): {problems}"


@pytest.mark.parametrize("code", [
    "x = torch.zeros(3).cuda()",
    "model.cuda()",
    "x = torch.zeros(3, device='cuda')",
    "x = torch.zeros(3, device=\"cpu\")",
    "d = torch.device('cuda:0')",
    "torch.set_default_device('cuda')",
    "with torch.autocast('cuda', dtype=torch.bfloat16):\n    pass",
    "with torch.autocast(device_type='cpu'):\n    pass",
    "x = x.to('cuda')",
    "m = m.to('mps')",
    "DEVICE = 'cuda'",
    "device: str = 'cpu'",
])
def test_the_rule_finds_hard_coded_devices(code):
    assert hard_coded_devices(code), code


@pytest.mark.parametrize("code", [
    "x = torch.zeros(3, device=device)",
    "y = x.cpu().numpy()",
    "y = x.to('cpu', torch.float64)",
    "state = torch.load(path, map_location='cpu', weights_only=True)",
    "m = Model().to(device)",
    "if device.type == 'cuda':\n    torch.cuda.synchronize()",
    "available = torch.cuda.is_available()",
    "shapes = Model().to('meta')",
    "x = torch.empty(3, device='meta')",
    "label = 'cuda'  # just a string",
])
def test_the_rule_allows_what_follows_the_device(code):
    assert hard_coded_devices(code) == [], code

"""Printed library code shows the math, not the argument checks (and says that it left them out)."""

from course_lib import norms
from course_lib.notebook import source_lines


def test_argument_checks_are_left_out_and_the_math_kept():
    shown = source_lines(norms.rms_norm)
    assert "_check" not in shown and "raise" not in shown
    assert "torch.rsqrt(ms + eps)" in shown and "# (..., 1)" in shown  # the math and its shape comments
    assert "argument checks omitted" in shown
    assert "raise" in source_lines(norms.rms_norm_backward, checks=True)


def test_assignments_that_keep_state_are_shown():
    shown = source_lines(norms.RMSNorm)
    assert "self.eps = _check_eps(eps)" in shown  # forward reads self.eps: it must stay visible
    assert "x = _check_x(x)" not in source_lines(norms.layer_norm)


def _shown_objects():
    """Every object a chapter displays with show_source(...), found by the dotted name in the call:
    its last one or two parts (``it.log_softmax`` → ``log_softmax``; ``DecoderLM.forward``) looked up
    in course_lib's modules."""
    import importlib
    import json
    import pathlib
    import pkgutil
    import re

    import course_lib

    root = pathlib.Path(__file__).resolve().parents[1]
    modules = [importlib.import_module(f"course_lib.{m.name}") for m in pkgutil.iter_modules(course_lib.__path__)
               if not m.name.startswith("_") and m.name not in ("grading", "train", "sample")]
    found = []
    for chapter in sorted((root / "book").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(chapter.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        for expr in re.findall(r"show_source\(\s*([\w.]+)", code):
            parts = expr.split(".")
            candidates = [parts[-2:], parts[-1:]] if len(parts) > 1 else [parts]
            obj = None
            for path in candidates:
                for module in modules:
                    value = module
                    for name in path:
                        value = getattr(value, name, None)
                    if value is not None:
                        obj = value
                        break
                if obj is not None:
                    break
            assert obj is not None, f"{chapter.name}: cannot find the object of show_source({expr})"
            found.append((chapter.name, expr, obj))
    return found


def test_every_shown_line_fits_the_column():
    """The site's code column holds 88 characters: a longer printed line scrolls sideways."""
    shown = _shown_objects()
    assert len(shown) >= 10
    long = [f"{chapter} show_source({expr}): {len(line)} characters: {line.strip()[:60]}"
            for chapter, expr, obj in shown for line in source_lines(obj).splitlines() if len(line) > 88]
    assert long == [], "\n".join(long)

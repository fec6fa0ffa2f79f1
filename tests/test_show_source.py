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

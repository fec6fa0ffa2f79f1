"""Checkers called by the exercises' hidden tests, one module per chapter.

Each ``check_<task>(student_function)`` returns None when the function agrees with the reference on
many random and edge cases, and otherwise raises ``AssertionError`` (a :class:`GradingError`) whose
message names the likely mistake without revealing reference values. A function that delegates the
operation it is meant to implement (to course_lib or to torch's own version) fails.

Importing this package inside a notebook makes grading failures display as their message alone
(see ``_display``), so feedback never shows a hidden-test cell's lines.
"""

from . import _display
from ._core import GradingError
from .info_theory import check_cross_entropy_from_logits, check_entropy, check_kl_divergence

__all__ = ["GradingError", "check_entropy", "check_cross_entropy_from_logits", "check_kl_divergence"]

_display.install()

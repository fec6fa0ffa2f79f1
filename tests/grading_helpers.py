"""What every tests/test_grading_*.py file needs: expect a checker to fail, with the right words and
without leaking values (each file says what a leak looks like for its chapter)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest


def expect_failure(checker: Callable, student, *fragments: str, no_leak: Callable[[str], None]) -> str:
    """Run ``checker(student)``, require an AssertionError whose message contains every fragment and
    passes ``no_leak``; return the message."""
    with pytest.raises(AssertionError) as info:
        checker(student)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    no_leak(message)
    return message


def no_values_leak(message: str, max_decimals: int = 2) -> None:
    """The usual rule: a message may mention shapes, counts and settings, never a tensor or a number
    with more than ``max_decimals`` decimals (which would be a computed value)."""
    assert "tensor(" not in message
    assert not re.search(rf"\d\.\d{{{max_decimals + 1},}}", message), message

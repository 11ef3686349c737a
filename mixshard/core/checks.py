"""Checks of the public API's arguments, at the call: a `TypeError` or `ValueError` that names
the argument (`core/errors.py`)."""

from __future__ import annotations

import numbers
import re
from typing import Any


def check_int(name: str, value: Any, minimum: int | None = None) -> None:
    """`value` is an integer (not a bool, not a float such as 2.5), at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_optional_int(name: str, value: Any, minimum: int | None = None) -> None:
    if value is not None:
        check_int(name, value, minimum)


def is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def json_int(value: Any, what: str, lo: int, hi: int = 1 << 62) -> int:
    """A manifest's integer field: an int (not a bool, not a float) in `[lo, hi]`."""
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{what} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def json_str(value: Any, what: str, pattern: re.Pattern | None = None) -> str:
    """A manifest's text field, matching `pattern` when one is given."""
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        raise ValueError(f"{what} is not valid: {value!r}")
    return value

"""Checks of the public API's arguments, at the call: a `TypeError` or `ValueError` that names
the argument (`core/errors.py`)."""

from __future__ import annotations

import numbers
from typing import Any


def check_int(name: str, value: Any, minimum: int | None = None) -> None:
    """`value` is an integer (not a bool, not a float such as 2.5), at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_optional_int(name: str, value: Any, minimum: int | None = None) -> None:
    if value is not None:
        check_int(name, value, minimum)


def is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)

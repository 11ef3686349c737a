"""libc functions called through ctypes, which releases the GIL for the call."""

from __future__ import annotations

import ctypes
from typing import Any


def function(name: str, restype: Any, argtypes: tuple[Any, ...] | None = None) -> Any | None:
    """libc's `name` with its result and argument types set (`argtypes` None: variadic, as
    `syscall`), errno kept for `ctypes.get_errno`; None where this platform's libc lacks it."""
    try:
        func = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError):
        return None
    func.restype = restype
    if argtypes is not None:
        func.argtypes = argtypes
    return func

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


_malloc_trim = function("malloc_trim", ctypes.c_int, (ctypes.c_size_t,))


def trim_heap() -> None:
    """Hand the heap memory that is free back to the system (glibc's `malloc_trim`; a no-op
    elsewhere). glibc keeps what threads freed in their arenas, so an object whose reader
    threads allocated hundreds of MB leaves them counted in the process's RSS after it is gone:
    call this once such an object is closed, not on a hot path (it walks every arena)."""
    if _malloc_trim is not None:
        _malloc_trim(0)

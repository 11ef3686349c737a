"""One `preadv` that scatters a run of equal-sized records to arbitrary addresses.

`os.preadv` takes a Python buffer object per destination, built and torn down under the GIL
for every image of a block. Here the `iovec` array is built with numpy and `preadv` is called
through ctypes, which releases the GIL for the call.

The caller must keep every destination alive and writable until the call returns.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

import numpy as np

from ...core.libc import function

try:
    IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))  # buffers one `preadv` fills at most
except (AttributeError, OSError, ValueError):
    IOV_MAX = 16


_ARGS = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64)
_PREADV: Any = (  # the iovec array below is laid out for 64-bit pointers and sizes
    function("preadv", ctypes.c_ssize_t, _ARGS)
    if ctypes.sizeof(ctypes.c_void_p) == 8 and ctypes.sizeof(ctypes.c_size_t) == 8
    else None
)


def read_iov(fd: int, iov: np.ndarray, offset: int) -> int:
    """Read the bytes of `fd` from `offset` on into the buffers of `iov` (uint64 rows of
    `(address, length)`), one after the other. Returns the bytes read: fewer only at the end
    of the file.

    Raises:
        OSError: the read failed.
    """
    done = 0
    for lo in range(0, len(iov), IOV_MAX):
        part = iov[lo : lo + IOV_MAX]
        want = int(part[:, 1].sum())
        got = _call(fd, part, offset + done)
        if 0 < got < want and _PREADV is not None:  # cut short (a signal): the rest by record
            got += _python_preadv(fd, _rest(part, got), offset + done + got)
        done += got
        if got < want:  # the end of the file
            break
    return done


def _call(fd: int, iov: np.ndarray, offset: int) -> int:
    if _PREADV is None:  # no libc preadv to call: Python buffers over the same addresses
        return _python_preadv(fd, iov, offset)
    while True:
        got = _PREADV(fd, iov.ctypes.data, len(iov), offset)
        if got >= 0:
            return got
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


def _rest(iov: np.ndarray, skip: int) -> np.ndarray:
    """The rows of `iov` still to fill after its first `skip` bytes."""
    ends = np.cumsum(iov[:, 1].astype(np.int64))
    first = int(np.searchsorted(ends, skip, side="right"))
    into = np.uint64(skip - (int(ends[first - 1]) if first else 0))
    rest = iov[first:].copy()
    rest[0, 0] += into
    rest[0, 1] -= into
    return rest


def _python_preadv(fd: int, iov: np.ndarray, offset: int) -> int:
    views = [(ctypes.c_char * int(n)).from_address(int(a)) for a, n in iov.tolist()]
    return os.preadv(fd, views, offset)

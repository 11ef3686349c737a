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
    if _PREADV is None:  # no libc preadv to call: Python buffers over the same addresses
        views = [(ctypes.c_char * int(n)).from_address(int(a)) for a, n in iov.tolist()]
        return _python_preadv(fd, views, offset)
    done = 0
    for lo in range(0, len(iov), IOV_MAX):
        part = iov[lo : lo + IOV_MAX]
        want = int(part[:, 1].sum())
        got = _call(fd, part, offset + done)
        if 0 < got < want:  # cut short (a signal): the rest record by record
            got += _rest(fd, part, got, offset + done + got)
        done += got
        if got < want:  # the end of the file
            break
    return done


def _call(fd: int, iov: np.ndarray, offset: int) -> int:
    while True:
        got = _PREADV(fd, iov.ctypes.data, len(iov), offset)
        if got >= 0:
            return got
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


def _rest(fd: int, iov: np.ndarray, skip: int, offset: int) -> int:
    """What a `preadv` into `iov` left unread after its first `skip` bytes."""
    ends = np.cumsum(iov[:, 1].astype(np.int64))
    first = int(np.searchsorted(ends, skip, side="right"))
    into = skip - (int(ends[first - 1]) if first else 0)
    rows = iov[first:].tolist()
    views = [(ctypes.c_char * (int(rows[0][1]) - into)).from_address(int(rows[0][0]) + into)]
    views += [(ctypes.c_char * int(n)).from_address(int(a)) for a, n in rows[1:]]
    return _python_preadv(fd, views, offset)


def _python_preadv(fd: int, views: list, offset: int) -> int:
    done = 0
    for lo in range(0, len(views), IOV_MAX):
        part = views[lo : lo + IOV_MAX]
        want = sum(ctypes.sizeof(v) for v in part)
        got = os.preadv(fd, part, offset + done)
        done += got
        if got < want:
            break
    return done

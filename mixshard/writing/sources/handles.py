"""One open handle per process of each archive a pack reads: a descriptor (a tar, or a .tar.gz's
members file) or a `ZipFile`, made again after a fork and when another file took the path."""

from __future__ import annotations

import os
from typing import Any

# per process: (path, kind) -> (pid, the file's identity, handle)
_OPEN: dict[tuple[str, str], tuple[int, tuple[int, ...], Any]] = {}


def _close(handle: Any) -> None:
    if isinstance(handle, int):
        os.close(handle)
    else:
        handle.close()


def handle(path: str, kind: str) -> Any:
    """This process's open descriptor (raw) or ZipFile (zip) of `path`; one per process, reopened
    after a fork (a ZipFile shares its file position with the parent's) and when another file
    took the path (an archive downloaded again where the last one was)."""
    st = os.stat(path)
    ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    pid, known, opened = _OPEN.get((path, kind), (None, (), None))
    if pid != os.getpid() or known != ident:
        import zipfile

        if pid == os.getpid():  # this process's handle of the file that was there
            _close(opened)
        opened = os.open(path, os.O_RDONLY) if kind == "raw" else zipfile.ZipFile(path)
        _OPEN[(path, kind)] = (os.getpid(), ident, opened)
    return opened

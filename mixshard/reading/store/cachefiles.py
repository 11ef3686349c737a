"""The block cache's files on disk (`blockcache.py`): its part folders (one per process), opened
without following a link, the pages a block takes, and holes punched where blocks are dropped.
The layout, and why: docs/design.md, "Which blocks a store's cache keeps".
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ...core.errors import MixshardError
from ...core.libc import function

_PUNCH = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


_FALLOCATE = function(  # hole punching (Linux): blocks can be dropped again
    "fallocate", ctypes.c_int, (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
)


def punch(fd: int, start: int, length: int) -> None:
    """Free bytes `[start, start + length)` of the file behind `fd` (they read as zeros)."""
    if _FALLOCATE is None or _FALLOCATE(fd, _PUNCH, start, length) != 0:
        raise OSError(ctypes.get_errno(), "cannot punch a hole in a cache file")


def existing(path: Path) -> Path:
    """`path`, or its nearest existing parent (where a cache yet to be made will be)."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def page_size(path: Path) -> int:
    """The allocation unit of the file system of `path` (`existing`)."""
    return max(512, os.statvfs(existing(path)).f_frsize or 4096)


def footprint(spans: np.ndarray, page: int) -> np.ndarray:
    """Per block (`spans` rows `(slot, start, end)`), the bytes of the pages its span touches:
    what keeping it costs on disk (neighbours sharing a page are each charged for it)."""
    start, end = spans[:, 1], spans[:, 2]
    cost = np.where(end > start, ((end + page - 1) // page - start // page) * page, 0)
    return cost.astype(np.int64)


class Pages:
    """The file-system pages of the blocks (`spans` rows `(slot, start, end)`): what keeping one
    costs (`sizes`), and what dropping one frees (`hole`)."""

    def __init__(self, spans: np.ndarray, page: int) -> None:
        self.spans, self.page = spans, page
        self.sizes = footprint(spans, page)  # what keeping each block costs on disk
        self.order = np.lexsort((spans[:, 1], spans[:, 0]))  # file order: shard, then offset
        self.rank = np.argsort(self.order)  # block -> its place in file order (the inverse)

    def hole(self, b: int, kept: Callable[[int], bool]) -> tuple[int, int]:
        """`(start, end)` to punch when block `b` is dropped: its span, widened to whole pages
        at either end where no block `kept` says is kept shares the edge page."""
        start, end = int(self.spans[b, 1]), int(self.spans[b, 2])
        if end <= start:
            return start, start
        first, last = start // self.page, (end - 1) // self.page
        lo = start if self._shared(b, first, -1, kept) else first * self.page
        hi = end if self._shared(b, last, 1, kept) else (last + 1) * self.page
        return lo, hi

    def _shared(self, b: int, page: int, step: int, kept: Callable[[int], bool]) -> bool:
        """Whether a kept block before (`step` -1) or after (1) block `b` touches `page`."""
        slot, i = self.spans[b, 0], int(self.rank[b]) + step
        while 0 <= i < len(self.order):
            c = int(self.order[i])
            c_slot, c_start, c_end = (int(x) for x in self.spans[c])
            if c_slot != slot or not c_start // self.page <= page <= (c_end - 1) // self.page:
                return False
            if c_end > c_start and kept(c):
                return True
            i += step
        return False


def planted(path: Path) -> MixshardError:
    """The error of a link (or other non-regular entry) found where the cache keeps its own."""
    return MixshardError(
        f"{path} in the block cache is a symbolic link or not a regular file or folder; "
        "mixshard never writes through one: remove it (or the whole cache folder, "
        f"{path.parent}) or give another cache_dir"
    )


def open_folder(path: Path) -> int:
    """A descriptor of the real folder `path` (made if missing); a link there is refused."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise planted(path) from None
        raise


def open_in(folder: int, name: str, flags: int, where: Path) -> int:
    """Open the regular file `name` in the folder `folder` (a descriptor, `where`) without
    following a link (`O_NOFOLLOW` refuses one even with `O_CREAT`)."""
    try:
        fd = os.open(name, flags | _NOFOLLOW, 0o644, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise planted(where / name) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise planted(where / name)
    return fd


@contextlib.contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    """`fd`, closed when the block ends."""
    try:
        yield fd
    finally:
        os.close(fd)


def claim_part(root: Path) -> tuple[Path, int]:
    """A part folder of `root` no other process holds: `(folder, fd of its held lock)`; a link
    at `root`, a part or a file in it raises `planted`'s MixshardError."""
    root.parent.mkdir(parents=True, exist_ok=True)
    os.close(open_folder(root))
    for n in range(1 << 10):
        folder = root / f"part-{n}"
        with closing_fd(open_folder(folder)) as part:
            fd = open_in(part, "lock", os.O_RDWR | os.O_CREAT, folder)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return folder, fd
    raise MixshardError(f"every part of the cache {root} is held by another process")


def disk_full(folder: Path, b: int, exc: OSError, used: int, limit: int) -> MixshardError:
    """The error of a write of block `b` into the part `folder` that found the disk full."""
    cache_dir = folder.parent.parent
    try:
        free = f"{shutil.disk_usage(folder).free} bytes"
    except OSError:
        free = "unknown"
    return MixshardError(
        f"the disk of cache_dir {cache_dir} is full ({exc.strerror}; {free} free): the block "
        f"cache could not write block {b}, with {used} bytes of its limit of {limit} in use. "
        "Give a smaller cache_limit= (bytes), or a cache_dir= on a disk with more room"
    )

"""Getting a cold pack into the page cache without getting in the way of its readers.

The shards are read one after the other in chunks asked of the kernel ahead
(`posix_fadvise(WILLNEED)`: no copy into this process), with at most `WARM_IN_FLIGHT` chunks
asked for and not yet read: asking for the whole pack at once would queue gigabytes in front of
every read a loader makes meanwhile.

`cache_misses` tells how much of a file is already there, from a sample of its pages.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from pathlib import Path

from ...core.files import open_regular

WARM_CHUNK = 8 << 20  # bytes asked for at a time, at most
WARM_IN_FLIGHT = 4  # chunks of WARM_CHUNK asked for and not yet read: what a loader's reads
# queue behind (as many more as a chunk is smaller)
CACHE_SAMPLE = 2 << 20  # cache_misses: one byte read every this many bytes


def warm_files(files: list[tuple[Path, int]], stop: threading.Event) -> bool:
    """Read `(path, size)` files into the page cache in order. Returns False when `stop` was
    set (or a file could not be opened) before the end."""
    asked: deque[tuple[int, int, bool]] = deque()  # (fd, last byte, its file's last chunk)
    opened: set[int] = set()
    try:
        for path, size in files:
            try:
                fd = open_regular(path)
            except OSError:
                return False
            opened.add(fd)
            chunk = min(WARM_CHUNK, read_whole(fd))
            for lo in range(0, size, chunk):
                if stop.is_set():
                    return False
                hi = min(size, lo + chunk)
                os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)
                asked.append((fd, hi - 1, hi == size))
                while len(asked) > WARM_IN_FLIGHT * WARM_CHUNK // chunk:
                    _arrived(*asked.popleft(), opened)
        while asked:
            _arrived(*asked.popleft(), opened)
        return True
    finally:
        for fd in opened:
            os.close(fd)


def read_whole(fd: int) -> int:
    """Bytes of one `WILLNEED` the kernel reads for the file behind `fd`: the larger of its block
    device's `read_ahead_kb` and `max_sectors_kb` (it drops the rest); where sysfs does not say
    (no block device: NFS, FUSE, btrfs), 128 KB, the kernel's default read-ahead."""
    dev = os.fstat(fd).st_dev
    for queue in ("queue", "../queue"):  # a disk's, or a partition's disk's
        at = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/{queue}/"
        try:
            kb = max(
                int(Path(at + name).read_text()) for name in ("read_ahead_kb", "max_sectors_kb")
            )
        except (OSError, ValueError):
            continue
        return max(4, kb) << 10
    return 128 << 10


def _arrived(fd: int, last: int, closes: bool, opened: set[int]) -> None:
    """Wait until the chunk that ends at byte `last` is read (a one-byte read of its last page
    waits for the kernel's read in flight); close `fd` when it was its file's last (`closes`)."""
    with contextlib.suppress(OSError):
        os.pread(fd, 1, last)
    if closes:
        opened.discard(fd)
        os.close(fd)


def cache_samples(size: int, step: int = CACHE_SAMPLE) -> int:
    """How many bytes `cache_misses` samples of a file of `size` bytes."""
    return -(-size // step) + 1 if size > 0 else 0


def cache_misses(fd: int, size: int, most: int, step: int = CACHE_SAMPLE) -> int:
    """How many of the bytes sampled from the first `size` bytes of `fd` (one every `step`
    bytes, and the last) are not in the page cache, each read with `RWF_NOWAIT` (which fails
    rather than wait for the disk, though the kernel starts reading what it missed). Counting
    stops past `most`, so a cold file gets a few reads started, not one per sample: returns
    `most + 1` then, and where the platform or the file system cannot tell. (Not `mincore`:
    Linux reports every page of a file the caller may not write as resident.)"""
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None:
        return most + 1
    byte, missed = bytearray(1), 0
    for at in [*range(0, size, step), size - 1] if size > 0 else []:
        try:
            got = os.preadv(fd, [byte], at, flag)
        except BlockingIOError:  # EAGAIN: not in the cache
            got = 0
        except OSError:  # EOPNOTSUPP and the like: cannot tell
            return most + 1
        missed += got != 1
        if missed > most:
            return most + 1
    return missed

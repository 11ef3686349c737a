"""Reads out of memory mappings of a pack's shards, where it is safe (and a batch's `pread`s in
one call, `read_rows`).

A batch of the global order is one image from each of 256 random places: read with `pread`,
the kernel does per-page work for every image; out of a mapping it is one memcpy per image in
user space (`_mapped.c`), in the batch's order. A shard truncated or copied over while mapped
(or a disk error paging it in) raises SIGBUS on the access: `_mapped.copy_rows` catches the
fault and the reader raises `ShardError` naming the shard, as a short `pread` does; a shard
rewritten in place is found by the identity check after each batch. Where the extension was
not built, nothing is mapped.

A pack is mapped whole or not at all, when the read plan says (`plan.py`: in the page cache,
as a fault reads a missing page synchronously, one at a time, and within half the available
memory). Mappings share the page cache's pages: they add no memory, though the pages a process
has touched count in its RSS.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Optional

import numpy as np

from ...core import libc, locks
from ...core.jobs import this_process
from .warming import cache_misses, cache_samples

_mapped: Optional[ModuleType]
try:  # compiled at install where there was a C compiler
    from . import _mapped
except ImportError:  # pragma: no cover - an install without a compiler
    _mapped = None


# libc's mmap, not Python's `mmap.mmap`, which keeps a duplicate of the descriptor for the
# mapping's life (a pack of many shards would run out of descriptors); a mapping needs none.
_mmap = libc.function(
    "mmap",
    ctypes.c_void_p,
    (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long),
)
_munmap = libc.function("munmap", ctypes.c_int, (ctypes.c_void_p, ctypes.c_size_t))
_madvise = libc.function("madvise", ctypes.c_int, (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int))
_MAP_FAILED = ctypes.c_void_p(-1).value


def mapping_built() -> bool:
    """Whether shards can be mapped here (`_mapped.c` compiled, libc's `mmap` found)."""
    return _mapped is not None and _mmap is not None


def read_rows(
    out: np.ndarray, rows: np.ndarray, fds: np.ndarray, offsets: np.ndarray, size: int
) -> int:
    """Read `size` bytes at `offsets[j]` of descriptor `fds[j]` into row `rows[j]` of `out`
    (C-contiguous), for every `j`, in one call with the GIL released (`_mapped.read_rows`).
    Returns how many were read before one ended short or failed (0 where the extension was
    not built): the caller reads the rest with `pread`, which raises the error naming it."""
    if _mapped is None:
        return 0
    rows, fds, offsets = (np.ascontiguousarray(a, np.int64) for a in (rows, fds, offsets))
    return _mapped.read_rows(out, rows, fds, offsets, size)[1]


def map_file(fd: int, length: int) -> int | None:
    """The address of a read-only shared mapping of the first `length` bytes of `fd`, which
    holds no descriptor (`fd` may be closed at once); None when it cannot be made."""
    if _mmap is None or _munmap is None or length <= 0:
        return None
    address = _mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        return None
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None and _madvise is not None:  # where the page cache holds 2 MB folios
        _madvise(address, length, advice)  # (read in sequentially), one fault maps 2 MB
    return int(address)


def _unmap(bases: np.ndarray, lengths: np.ndarray) -> None:
    """Unmap every mapping of `bases` (addresses, 0: none) of `lengths` bytes (and forget them)."""
    for slot in np.flatnonzero(bases).tolist():
        if _munmap is not None:
            _munmap(int(bases[slot]), int(lengths[slot]))
    bases[:] = 0
    lengths[:] = 0


def resident(open_shard: Callable[[int], int], sizes: list[int], share: float) -> bool:
    """Whether a pack whose shard `i` is `sizes[i]` bytes of `open_shard(i)` (a descriptor,
    closed here before the next is opened: a pack may have more shards than this process may
    open) is in the page cache: at most `share` of a sample of its bytes out of it
    (`warming.cache_misses`; the plan's `MISSES_ALLOWED`). The pages still out are asked for
    ahead (`WILLNEED`); a copy that gets there first reads them."""
    allowed = int(share * sum(cache_samples(size) for size in sizes))
    missed = 0
    for slot, size in enumerate(sizes):
        fd = open_shard(slot)
        try:
            misses = cache_misses(fd, size, allowed - missed)
            missed += misses
            if missed > allowed:
                return False
            if misses:
                os.posix_fadvise(fd, 0, size, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)
    return True


class ShardMaps:
    """Read-only mappings of every shard of a pack, or of none, and the copies out of them.
    Thread-safe: the mappings are never unmapped while a copy holds them. A forked child keeps
    the parent's mappings (inherited with the address space); an unpickled pack starts with
    none."""

    def __init__(self, shards: int) -> None:
        self._bases = np.zeros(shards, np.uint64)  # address of each mapping (0: none)
        self._lengths = np.zeros(shards, np.int64)
        # collected: unmapped. Not at exit, where a daemon reader may still copy out of them
        # (the process's end unmaps them anyway).
        weakref.finalize(self, _unmap, self._bases, self._lengths).atexit = False
        self._all = False
        self._users = 0  # copies holding the mappings
        self._cond = locks.Condition()
        self._pid = this_process()

    def __len__(self) -> int:
        return len(self._bases) if self._all else 0

    def _here(self) -> None:
        """In a forked child: no users (those were the parent's threads)."""
        if self._pid != this_process():
            self._users, self._pid = 0, this_process()  # (the lock is renewed by core.locks)

    def map_all(self, open_shard: Callable[[int], int], sizes: list[int]) -> bool:
        """Map shard `i`: the first `sizes[i]` bytes of `open_shard(i)` (closed here), for
        every `i`; False, and none mapped, when one cannot be (then every image is read with
        `pread`). Errors of `open_shard` are raised."""
        self._here()
        with self._cond:
            if self._all:
                return True
            try:
                for slot, size in enumerate(sizes):
                    fd = open_shard(slot)
                    try:
                        address = map_file(fd, size)
                    finally:
                        os.close(fd)
                    if address is None:
                        return False
                    self._bases[slot], self._lengths[slot] = address, size
                self._all = True
            finally:
                if not self._all:
                    _unmap(self._bases, self._lengths)
        return True

    @contextlib.contextmanager
    def held(self) -> Iterator[bool]:
        """Whether the shards are mapped, kept mapped until the block ends."""
        self._here()
        with self._cond:
            mapped = self._all
            self._users += mapped
        try:
            yield mapped
        finally:
            if mapped:
                with self._cond:
                    self._users -= 1
                    self._cond.notify_all()

    def copy(
        self, out: np.ndarray, rows: np.ndarray, slots: np.ndarray, offsets: np.ndarray, size: int
    ) -> tuple[int, int]:
        """Copy `size` bytes at `offsets[j]` of shard `slots[j]` into row `rows[j]` of `out`,
        for every `j`, with the GIL released; the caller holds the mappings (`held`). Returns
        `(0, n)`, or `(1, j)`: item `j` lies past the end of its shard, `(2, j)`: the file
        failed under item `j` (truncated, or a page that could not be read); the items before
        `j` are copied."""
        assert _mapped is not None  # only shards mapped by `map_all` are copied from
        rows, slots, offsets = (np.ascontiguousarray(a, np.int64) for a in (rows, slots, offsets))
        return _mapped.copy_rows(out, rows, slots, offsets, self._bases, self._lengths, size)

    def close(self) -> None:
        """Unmap every shard, once no copy holds them."""
        self._here()
        with self._cond:
            while self._users:
                self._cond.wait()
            _unmap(self._bases, self._lengths)
            self._all = False

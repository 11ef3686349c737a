"""Many small reads in one system call: Linux's io_uring, through ctypes.

The global order reads one image (21 KB at 84 px) from a random place per sample. One `pread`
each costs about as much in Python around the call as in the kernel, and holds the GIL in
between, so two reader threads made no more than ~1.3x one (scripts/bench_cold.py). Here a
batch's reads are queued with numpy (no Python object per image) and handed to the kernel in
one `io_uring_enter`, which releases the GIL while the kernel copies them all: reads from the
page cache are done inline, the others by the kernel's own workers.

Only on x86-64 (its stores reach memory in program order, which the ring's protocol needs
without a barrier) with a kernel that has `IORING_OP_READ` (5.6); elsewhere, where a
container's seccomp filter refuses `io_uring_setup`, or with `MIXSHARD_IO_URING=0`, `RingPool`
is unavailable and callers read one `pread` at a time.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from typing import Any

import numpy as np

from ..core import locks
from ..core.jobs import this_process
from ..core.libc import function

_SETUP, _ENTER = 425, 426  # system call numbers (the same on every 64-bit architecture)
_OP_READ = 22
_ENTER_GETEVENTS = 1
_FEAT_SINGLE_MMAP, _FEAT_RW_CUR_POS = 1 << 0, 1 << 3  # the latter came with OP_READ (5.6)
_SQES_OFFSET = 0x10000000  # mmap offset of the submission entries
_PROT_READ, _PROT_WRITE, _MAP_SHARED, _MAP_POPULATE = 1, 2, 1, 0x8000  # Linux x86-64
ENTRIES = 256  # reads queued at once (a batch of 256 images is one call)

_SQE = np.dtype(
    {
        "names": ["opcode", "fd", "off", "addr", "len", "user_data"],
        "formats": [np.uint8, np.int32, np.uint64, np.uint64, np.uint32, np.uint64],
        "offsets": [0, 4, 8, 16, 24, 32],
        "itemsize": 64,
    }
)
_CQE = np.dtype(
    {
        "names": ["user_data", "res"],
        "formats": [np.uint64, np.int32],
        "offsets": [0, 8],
        "itemsize": 16,
    }
)


class _Params(ctypes.Structure):
    """`struct io_uring_params`; the ring offsets as 10 words each."""

    _fields_ = [
        ("sq_entries", ctypes.c_uint32),
        ("cq_entries", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("sq_thread_cpu", ctypes.c_uint32),
        ("sq_thread_idle", ctypes.c_uint32),
        ("features", ctypes.c_uint32),
        ("wq_fd", ctypes.c_uint32),
        ("resv", ctypes.c_uint32 * 3),
        ("sq_off", ctypes.c_uint32 * 10),  # head, tail, mask, entries, flags, dropped, array
        ("cq_off", ctypes.c_uint32 * 10),  # head, tail, mask, entries, overflow, cqes
    ]


def _libc() -> tuple[Any, Any, Any] | None:
    """libc's `syscall`, `mmap` and `munmap`, typed; None where io_uring is not used."""
    if platform.machine() not in ("x86_64", "AMD64") or not hasattr(os, "posix_fadvise"):
        return None
    address, size, num = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    calls = (
        function("syscall", ctypes.c_long),
        function("mmap", address, (address, size, num, num, num, ctypes.c_int64)),
        function("munmap", num, (address, size)),
    )
    return None if None in calls else calls


# Python's mmap.mmap would keep a duplicate of the ring's descriptor per map, and refuse to
# close while a numpy view lives: the rings are mapped with libc's own calls.
_SYSCALL: Any
_MMAP: Any
_MUNMAP: Any
_SYSCALL, _MMAP, _MUNMAP = _libc() or (None, None, None)
_ENTER_NR, _NO_SIGSET = ctypes.c_long(_ENTER), ctypes.c_size_t(0)


class Ring:
    """One io_uring of `ENTRIES` reads, used by one thread at a time.

    Raises:
        OSError: the kernel refused a ring (no io_uring, a seccomp filter, no memory).
    """

    def __init__(self) -> None:
        if _SYSCALL is None:
            raise OSError(errno.ENOSYS, "io_uring is not used on this platform")
        p = _Params()
        fd = _SYSCALL(ctypes.c_long(_SETUP), ctypes.c_uint(ENTRIES), ctypes.byref(p))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self.fd, self._maps = fd, list[tuple[int, int]]()  # (address, bytes)
        try:
            if p.features & (_FEAT_SINGLE_MMAP | _FEAT_RW_CUR_POS) != (
                _FEAT_SINGLE_MMAP | _FEAT_RW_CUR_POS
            ):
                raise OSError(errno.ENOSYS, "io_uring without IORING_OP_READ (Linux < 5.6)")
            so, co = list(p.sq_off), list(p.cq_off)
            rings = self._map(max(so[6] + 4 * p.sq_entries, co[5] + 16 * p.cq_entries), 0)
            words = rings.view(np.uint32)
            self._words = words
            self._sq_head, self._sq_tail, self._cq_head, self._cq_tail = (
                so[0] // 4, so[1] // 4, co[0] // 4, co[1] // 4,
            )  # fmt: skip
            self._sq_mask, self._cq_mask = int(words[so[2] // 4]), int(words[co[2] // 4])
            self._cqes = rings[co[5] : co[5] + 16 * p.cq_entries].view(_CQE)
            self._sqes = self._map(64 * p.sq_entries, _SQES_OFFSET).view(_SQE)
            # entry i of the submission array names submission entry i, once and for all
            words[so[6] // 4 : so[6] // 4 + p.sq_entries] = np.arange(p.sq_entries)
            self._size = int(p.sq_entries)
        except BaseException:
            self.close()
            raise

    def _map(self, nbytes: int, offset: int) -> np.ndarray:
        """`nbytes` of the ring's memory at `offset`, as uint8."""
        prot, flags = _PROT_READ | _PROT_WRITE, _MAP_SHARED | _MAP_POPULATE
        address = _MMAP(None, nbytes, prot, flags, self.fd, offset)
        if address in (None, ctypes.c_void_p(-1).value):
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self._maps.append((address, nbytes))
        return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))

    def read(
        self, fds: np.ndarray, offsets: np.ndarray, addresses: np.ndarray, length: int
    ) -> np.ndarray:
        """Read `length` bytes at `offsets[j]` of `fds[j]` to `addresses[j]`, for every `j`.
        Returns each read's result: `length`, fewer (the end of the file), or `-errno`.

        Raises:
            OSError: the kernel refused the ring's call itself.
        """
        results = np.empty(len(fds), np.int32)
        for lo in range(0, len(fds), self._size):
            hi = min(len(fds), lo + self._size)
            self._queue(fds[lo:hi], offsets[lo:hi], addresses[lo:hi], length, lo)
            self._wait(hi - lo, results)
        return results

    def _queue(self, fds, offsets, addresses, length: int, first: int) -> None:  # noqa: ANN001
        tail = int(self._words[self._sq_tail])
        slots = (tail + np.arange(len(fds))) & self._sq_mask
        sqes = self._sqes
        sqes["opcode"][slots] = _OP_READ
        sqes["fd"][slots] = fds
        sqes["off"][slots] = offsets
        sqes["addr"][slots] = addresses
        sqes["len"][slots] = length
        sqes["user_data"][slots] = np.arange(first, first + len(fds))
        self._words[self._sq_tail] = (tail + len(fds)) & 0xFFFFFFFF  # the kernel may take them

    def _wait(self, count: int, results: np.ndarray) -> None:
        words, done = self._words, 0
        while done < count:
            queued = (int(words[self._sq_tail]) - int(words[self._sq_head])) & 0xFFFFFFFF
            want = ctypes.c_uint(count - done)
            flags, fd = ctypes.c_uint(_ENTER_GETEVENTS), ctypes.c_int(self.fd)
            got = _SYSCALL(_ENTER_NR, fd, ctypes.c_uint(queued), want, flags, None, _NO_SIGSET)
            # a signal: ask again for what is left (the ring's counters say what that is);
            # anything else is the caller's to handle (it reads one `pread` at a time)
            if got < 0 and (code := ctypes.get_errno()) != errno.EINTR:
                raise OSError(code, os.strerror(code))
            head, tail = int(words[self._cq_head]), int(words[self._cq_tail])
            new = (tail - head) & 0xFFFFFFFF
            cqes = self._cqes[(head + np.arange(new)) & self._cq_mask]
            results[cqes["user_data"].astype(np.int64)] = cqes["res"]
            words[self._cq_head] = tail  # the kernel may use the entries again
            done += new

    def close(self) -> None:
        """Unmap and close the ring (never used again)."""
        self._words = self._cqes = self._sqes = None  # type: ignore[assignment]
        for address, nbytes in self._maps:
            _MUNMAP(address, nbytes)
        self._maps = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class RingPool:
    """Rings for the threads reading one pack: each call takes an idle ring (or makes one)
    and gives it back. A forked child never uses the parent's rings (their memory is shared
    with the parent): it closes its copies, which leaves the parent's open, and makes new ones.
    `available` is False once the kernel refused a ring for good in this process, or with
    `MIXSHARD_IO_URING=0`."""

    def __init__(self) -> None:
        self._lock = locks.Lock()
        self._idle: list[Ring] = []
        self._pid = this_process()
        self.available = _SYSCALL is not None and os.environ.get("MIXSHARD_IO_URING") != "0"

    def read(
        self, fds: np.ndarray, offsets: np.ndarray, addresses: np.ndarray, length: int
    ) -> np.ndarray | None:
        """`Ring.read` on an idle ring; None when no ring can be had (read otherwise)."""
        ring = self._take()
        if ring is None:
            return None
        try:
            results = ring.read(fds, offsets, addresses, length)
        except OSError:  # the call itself refused (not a read's error: those are results)
            ring.close()
            return None
        with self._lock:
            self._idle.append(ring)
        return results

    def _take(self) -> Ring | None:
        with self._lock:
            if self._pid != this_process():  # forked: this process's copies of the parent's
                for ring in self._idle:  # (closing them leaves the parent's rings alone)
                    ring.close()
                self._idle, self._pid = [], this_process()
            if not self.available:
                return None
            if self._idle:
                return self._idle.pop()
        try:
            return Ring()
        except OSError as exc:  # refused for good (no io_uring, seccomp), or for now (EMFILE)
            if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL):
                self.available = False
            return None

    def close(self) -> None:
        """Close the idle rings (a later read makes new ones)."""
        with self._lock:
            rings, self._idle = self._idle, []
        for ring in rings:
            ring.close()


def read_rows(
    pool: RingPool,
    out: np.ndarray,
    rows: np.ndarray,
    fds: np.ndarray,
    offsets: np.ndarray,
    size: int,
) -> list[int]:
    """Read `size` bytes at `offsets[j]` of `fds[j]` into row `rows[j]` of `out` (C-contiguous,
    rows of `size` bytes), for every `j`: in io_uring calls where the pool has a ring, else one
    `pread` each. Returns the `j`s not read in full (an error or a short read), for the caller
    to read again and name what went wrong."""
    flat = out.reshape(-1).data
    addresses = out.ctypes.data + rows.astype(np.uint64) * np.uint64(size)
    results = pool.read(fds, offsets.astype(np.uint64), addresses, size) if len(rows) else None
    if results is not None:
        return np.flatnonzero(results != size).tolist()
    failed = []
    for j, (i, fd, offset) in enumerate(zip(rows.tolist(), fds.tolist(), offsets.tolist())):
        try:
            if os.preadv(fd, (flat[i * size : (i + 1) * size],), offset) == size:
                continue
        except OSError:
            pass
        failed.append(j)
    return failed

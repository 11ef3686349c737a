"""The global order from a copy of the pack's images in this process's memory.

Reading an image out of the page cache costs the kernel ~7-9 µs on the 2-core VM this was
measured on, one `pread` each or a batch per io_uring call: the global order stays near 140k
images/s. A gather of
rows from memory (`np.take(mode="clip")`, ~3 µs per 84 px image on one thread, and it scales
over threads) is about twice that. So when asked (`in_memory=True`, or `None`: when the pack
fits comfortably, its images at most `MEMORY_SHARE` of the available memory when the stream is
made; the default `False` changes nothing) the pack is copied into anonymous memory by one
background job, runs of blocks in stored order with one read each (each block checked as the
block order checks it), and once the copy is complete every batch is gathered from it. Until
then batches are read from the page cache as before (`LocalPack.read_images`): a batch of
random images nearly always has one in a block not copied yet.

* The job starts once the reader has made an epoch (`localbatches.py`), and runs at idle CPU
  priority (`SCHED_IDLE`): it fills the copy in the time the readers and the training leave.
  Fresh memory is dear on a VM: the first touch of a page cost ~20x a copy into a touched one
  (0.24-0.75 GB/s), so filling 4.2 GB takes 5-15 s even alone. Made during the first pass, even
  at idle priority, it slowed that pass by 22% warm and 40% cold (measured). The gain comes
  from the epoch after the fill on, for the rest of the run; a run of 2 epochs is 11% slower
  for it, one of 3 about even (measured), which is why the copy is opt-in.
* The copy is anonymous memory (`mmap(-1)`) of this process's own, not a mapping of the
  shards (`mapped.py`, which shares the page cache's pages and which the reads it falls back on
  use once warm).
* A shard changed on disk after the pack was opened is still noticed: one shard's identity is
  checked per batch, in turn, so within as many batches as the pack has shards the reader
  raises `ShardError`, as the `pread` path does (the copy itself is never torn).
* The copy belongs to the process that made it: a forked or unpickled one (DataLoader worker
  processes) reads with `pread` and copies nothing, so workers never hold one copy each.
* The pages the copy was read from stay in the page cache, shared with any other reader of the
  pack (other ranks, the next run) and evicted first under memory pressure; the bound of a
  quarter leaves room for both. A pack with a bad block skipped (`on_error="skip"`) is never
  complete and keeps the `pread` path.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import threading
from typing import Any

import numpy as np

from ..core import locks
from ..core.env import available_memory
from ..core.errors import ShardError
from ..core.jobs import this_process
from ..core.libc import function
from .local import LocalPack

MEMORY_SHARE = 0.25  # a copy may take at most this share of the available memory
LOAD_RUN = 4  # consecutive blocks copied with one read
MADV_POPULATE_WRITE = 23  # Linux >= 5.14 (Python 3.11's mmap does not name it)


def wants_copy(pack: LocalPack, order: str, wanted: bool | None) -> bool:
    """Whether the global order of `pack` reads from a memory copy: `wanted` when given,
    else when its images take at most `MEMORY_SHARE` of the available memory."""
    if order != "global":
        return False
    if wanted is not None:
        return wanted
    return pack.count * pack.manifest.image_bytes <= MEMORY_SHARE * available_memory()


class MemoryCopy:
    """A copy of a pack's images (rows of `image_bytes`, in image-number order), filled by
    `load` block by block; `read_images` gathers from it once complete. Thread-safe."""

    def __init__(self, pack: LocalPack) -> None:
        self.pack = pack
        self.nbytes = pack.count * pack.manifest.image_bytes
        self.copied = np.zeros(len(pack.block_count), bool)  # block copied and good
        self.complete = False
        self.from_memory = 0  # images gathered from the copy
        self.from_preads = 0  # images read with `pread` (their block not copied yet)
        self._rows: np.ndarray | None = None  # allocated by the first load
        self._populating = sys.platform == "linux"  # until the kernel refuses the call
        self._pid = this_process()
        self._lock = locks.Lock()
        self._counting = locks.Lock()
        self._loading = False
        self._turn = 0  # the shard whose identity the next batch checks

    @property
    def usable(self) -> bool:
        """False in a process other than the one that made the copy (forked, unpickled)."""
        return self._pid == this_process()

    def stats(self) -> dict[str, Any]:
        """Bytes, blocks copied (of all), whether complete, images served each way."""
        return {
            "bytes": self.nbytes,
            "blocks_copied": int(self.copied.sum()),
            "blocks": len(self.copied),
            "complete": self.complete,
            "from_memory": self.from_memory,
            "from_preads": self.from_preads,
        }

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_rows=None, _lock=None, _counting=None, _pid=None, complete=False)
        state["_loading"] = False
        state["copied"] = np.zeros_like(self.copied)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock, self._counting = locks.Lock(), locks.Lock()

    # ------------------------------------------------------------------ loading
    def _allocate(self) -> np.ndarray:
        # plain pages: with huge pages asked for, the kernel compacts memory (moving the very
        # page cache being read) on every fault, and the fill took 2.5x longer (measured)
        memory = mmap.mmap(-1, max(1, self.nbytes), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        return np.frombuffer(memory, np.uint8).reshape(self.pack.count, -1)

    def _populate(self, start: int, end: int) -> None:
        """Fault rows' bytes `[start, end)` in with one call before they are read into
        (`MADV_POPULATE_WRITE`, through ctypes: `mmap.madvise` holds the GIL for the whole
        call, and the readers' threads would wait on it): 1.4x faster than the read faulting
        each page in (measured). Where the kernel has no such call (before Linux 5.14, other
        systems) the read does."""
        if not self._populating or self._rows is None:
            return
        start -= start % mmap.PAGESIZE
        if _madvise(self._rows.ctypes.data + start, end - start, MADV_POPULATE_WRITE) != 0:
            self._populating = False

    def load(self, stop: threading.Event, idle: bool = False) -> None:
        """Copy the blocks not copied yet, in stored order, `LOAD_RUN` at a time, until done or
        `stop` is set (one at a time). A block found bad is left to the `pread` path, which
        reports it; so is a shard that cannot be read. `idle`: the calling thread (a job's own,
        which ends with it) is put at idle CPU priority first."""
        with self._lock:
            if self._loading or self.complete or not self.usable:
                return
            self._loading = True
            if self._rows is None:
                self._rows = self._allocate()
        if idle:
            _yield_cpu()
        try:
            for run in self._runs():
                if stop.is_set():
                    return
                if not self._copy_run(run):
                    return
            self.complete = bool(self.copied.all())
        finally:
            with self._lock:
                self._loading = False

    def _runs(self) -> list[list[int]]:
        """The blocks left to copy, in runs of consecutive blocks of one shard."""
        pack, runs = self.pack, []
        run: list[int] = []
        for b in np.flatnonzero(~self.copied).tolist():
            if run and (
                len(run) == LOAD_RUN
                or b != run[-1] + 1
                or pack.block_shard[b] != pack.block_shard[run[0]]
            ):
                runs.append(run)
                run = []
            run.append(b)
        return runs + ([run] if run else [])

    def _copy_run(self, run: list[int]) -> bool:
        pack, rows = self.pack, self._rows
        assert rows is not None
        base, step = rows.ctypes.data, pack.manifest.image_bytes
        first, last = run[0], run[-1]
        end = int(pack.block_start[last]) + int(pack.block_count[last])
        self._populate(int(pack.block_start[first]) * step, end * step)
        addresses = [
            base
            + (int(pack.block_start[b]) + np.arange(int(pack.block_count[b]), dtype=np.uint64))
            * np.uint64(step)
            for b in run
        ]
        try:
            results = pack.scatter_run(run, addresses)
        except (ShardError, OSError):
            return False
        for b, result in zip(run, results):
            if result is True:
                self.copied[b] = True
        return True

    # ------------------------------------------------------------------ reading
    def read_images(self, index: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        """As `LocalPack.read_images`: images `index` into `out`, gathered from the copy once
        it is complete, else read with `pread`. Returns the bad-block mask or None.

        Raises:
            ShardError: a shard changed since the pack was opened (checked one shard per
                call, in turn), or the `pread` path's errors.
        """
        index = np.asarray(index, dtype=np.int64)
        self._check_a_shard()
        rows, n = self._rows, len(index)
        if rows is None or not self.complete or not self.usable:
            self._count(0, n)
            return self.pack.read_images(index, out)
        if not out.flags.c_contiguous or out.nbytes < n * rows.shape[1]:
            raise ValueError(f"out must be C-contiguous with room for {n} images")
        flat = out.reshape(-1)[: n * rows.shape[1]].reshape(n, -1)
        # mode="clip": no bounds check (the order's numbers are in range), and `out` is
        # written directly, not through a buffer as with mode="raise" (3x slower)
        np.take(rows, index, axis=0, out=flat, mode="clip")
        self._count(n, 0)
        return None

    def _check_a_shard(self) -> None:
        slot = self._turn % len(self.pack.shards)
        self._turn = slot + 1
        self.pack.check_shard(slot)

    def _count(self, memory: int, preads: int) -> None:
        with self._counting:
            self.from_memory += memory
            self.from_preads += preads


_MADVISE = function("madvise", ctypes.c_int, (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int))


def _madvise(address: int, length: int, advice: int) -> int:
    """libc's `madvise` (0, or -1 when refused or missing), called without the GIL."""
    return -1 if _MADVISE is None else int(_MADVISE(address, length, advice))


def _yield_cpu() -> None:
    """Run the calling thread only on CPU time nobody else wants (for good: not undone)."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))

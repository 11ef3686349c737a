"""A bounded local cache of the blocks of a pack on an object store, each fetched by one checked
ranged read (`fetch_block`) ahead of the reader, in the order it will read, and dropped by its
next use (docs/design.md, "Which blocks a store's cache keeps").
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import os
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ...core import locks
from ...core.errors import MixshardError, ShardError
from ...core.stores import STORE_MIN_RATE as MIN_RATE
from ...core.stores import Store, deadline
from . import eviction
from .cachefiles import Pages, closing_fd, disk_full, open_folder, open_in, page_size, punch

FETCH_THREADS = 8  # ranged reads in flight at once
AHEAD = 256  # uses of the schedule looked at for prefetching
_FULL = (errno.ENOSPC, errno.EDQUOT)


class BlockCache:
    """The blocks of one pack (`spans`: per block, `(shard slot, start, end)`; `digests`: the
    sha256 of each) fetched from `store` on threads into the part `folder`, held by `lock_fd`
    (both from `claim_part`). At most `limit` bytes of pages are kept or being fetched (`Pages`)
    and a block being read is never dropped; at the limit the block to go is chosen by `policy`
    (`"future"`: Belady's rule, `eviction.Schedule`; `"lru"`)."""

    def __init__(
        self,
        store: Store,
        shards: list[tuple[str, int]],
        spans: np.ndarray,
        digests: list[str],
        folder: Path,
        limit: int,
        policy: str,
        lock_fd: int,
    ) -> None:
        self.store, self.shards, self.folder = store, shards, folder
        self.spans, self.digests, self.limit, self.policy = spans, digests, limit, policy
        self.pages = Pages(spans, page_size(folder))
        self.sizes = self.pages.sizes
        n = len(spans)
        self.present = np.zeros(n, bool)  # on disk, in this folder
        self.checked = np.zeros(n, bool)  # ... and checked by this process
        self.pins = np.zeros(n, np.int64)
        self._last = np.full(n, -1, np.int64)  # per block, the clock of its last use (-1: never)
        self.fetched_bytes = 0
        self.fetches = 0
        self.fetched_for: dict[int, int] = {}  # bytes fetched per epoch of the use fetched for
        self._clock = 0
        # block being fetched -> (its fetch, when it started, the epoch of the use it is for)
        self._inflight: dict[int, tuple[Future, float, int]] = {}
        self._cond = locks.Condition()
        self._schedule = eviction.Schedule(None, n)
        self._unknown = eviction.Schedule(None, n)  # what the "lru" policy knows of the future
        self._holding: dict[int, set[int]] = {}  # ticket -> blocks of each read waiting for them
        self._tickets = itertools.count()
        self._starved: set[int] = set()  # tickets of reads waiting for room
        self.scheduled = False
        self._pool = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="mixshard-fetch")
        self._closed = False
        # the part folder is let go (its lock, its folders) on close(), when collected, or at
        # exit; at once when it cannot be set up (a link planted in it, a file not ours)
        self._folders: list[int] = []
        self._release = weakref.finalize(self, _let_go, self._pool, lock_fd, self._folders)
        try:
            self._open_files(shards, n)
        except BaseException:
            self._release()
            raise
        self.used = int(self.sizes[self.present].sum())  # bytes kept and being fetched
        with self._cond:
            self._make_room(0)
        self.peak = self.used  # the most bytes kept and being fetched at once

    def _open_files(self, shards: list[tuple[str, int]], n: int) -> None:
        """Open the part's folders (its files are opened relative to them, never through a
        link), make the sparse shard files, find the blocks an earlier run kept."""
        self._folders.append(open_folder(self.folder))
        self._folders.append(open_folder(self.folder / "have"))
        self._dir, self._have = self._folders
        for name, size in shards:
            with closing_fd(self.open(name, os.O_RDWR | os.O_CREAT)) as fd:
                if os.fstat(fd).st_size != size:
                    os.ftruncate(fd, size)
        for entry in os.listdir(self._have):
            if entry.isdigit() and int(entry) < n:
                self.present[int(entry)] = True

    def schedule(self, uses_of: Callable[[int], np.ndarray] | None, first: int) -> None:
        """The reader's sequence of block reads from epoch `first` on (`eviction.Schedule`)."""
        with self._cond:
            self._schedule = eviction.Schedule(uses_of, len(self.spans), first)
            self.scheduled = uses_of is not None
            self._pump()

    def _victim(self, before: int | None, keep: set[int]) -> int | None:
        """A present block, neither pinned, fetched nor in `keep`, to drop (None: none now):
        `eviction.belady_victim`, with no future known for `"lru"` (the least recently used)."""
        busy = self.pins > 0
        busy[list(self._inflight)] = True
        future = self._unknown if self.policy == "lru" else self._schedule
        return eviction.belady_victim(future, self.present, busy, keep, self._last, before)

    def _make_room(self, size: int, before: int | None = None, own: set[int] | None = None) -> bool:
        """Drop blocks until `size` more bytes fit for the use at `before` (None: a read now);
        False when that cannot be done now. Blocks reads wait for stay, but the oldest read's
        (`own`) take a younger read's once nothing else can go and nothing is pinned or fetched."""
        held = set().union(*self._holding.values())
        while self.used + size > self.limit:
            victim = self._victim(before, held)
            if victim is None and own is not None and not self.pins.any() and not self._inflight:
                victim = self._victim(None, own)
            if victim is None:
                return False
            self._drop(victim)
        return True

    def _drop(self, b: int) -> None:
        self.present[b] = self.checked[b] = False
        self.used -= int(self.sizes[b])
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(b), dir_fd=self._have)
        self._punch(b)

    def _punch(self, b: int) -> None:
        """Free block `b`'s bytes, and its edge pages where no kept block shares them."""
        lo, hi = self.pages.hole(b, lambda c: bool(self.present[c]) or c in self._inflight)
        if hi > lo:
            with closing_fd(self.open(self.shards[int(self.spans[b, 0])][0], os.O_RDWR)) as fd:
                punch(fd, lo, hi - lo)

    def open(self, name: str, flags: int = os.O_RDONLY) -> int:
        """A descriptor of the cache file of shard `name` (never through a link)."""
        return open_in(self._dir, name, flags, self.folder)

    def _pump(self) -> None:
        """Start fetches of the blocks needed next, as far as the limit and the threads allow."""
        if self._closed or self._starved:
            return  # a read waits for room: what frees up is its
        if self.present.all():
            return  # a warm cache: nothing to fetch (no walk over the schedule per release)
        for i, (t, b) in enumerate(self._schedule.upcoming()):
            if len(self._inflight) >= FETCH_THREADS or i >= AHEAD:
                return
            if self.present[b] or b in self._inflight:
                continue
            if self.policy == "lru" and self.used + int(self.sizes[b]) > self.limit:
                return  # LRU drops blocks only for a read that waits (fetched ahead: no room)
            if not self._make_room(int(self.sizes[b]), before=t):
                return  # everything kept is needed sooner than this block
            self._start(b, t)

    def _start(self, b: int, t: int) -> None:
        self.used += int(self.sizes[b])
        self.peak = max(self.peak, self.used)
        future = self._pool.submit(self._fetch, b)
        self._inflight[b] = (future, time.monotonic(), t // eviction.STRIDE)

    def _fetch(self, b: int) -> None:
        slot, start, end = (int(x) for x in self.spans[b])
        name = self.shards[slot][0]
        try:
            data = fetch_block(self.store, name, (start, end), self.digests[b], b)
            try:
                with closing_fd(self.open(name, os.O_WRONLY)) as fd:
                    done = 0  # a short write (a disk filling up) goes on until it raises
                    while done < len(data):
                        done += os.pwrite(fd, memoryview(data)[done:], start + done)
                os.close(
                    open_in(self._have, str(b), os.O_WRONLY | os.O_CREAT, self.folder / "have")
                )
            except OSError as exc:
                if exc.errno in _FULL:
                    raise disk_full(self.folder, b, exc, self.used, self.limit) from None
                raise
        except BaseException:
            with self._cond:
                self.used -= int(self.sizes[b])
                self._inflight.pop(b, None)  # a reader waiting has the future: it raises
                with contextlib.suppress(OSError, MixshardError):
                    self._punch(b)  # what a write cut short left
                self._cond.notify_all()
            raise
        with self._cond:
            self.present[b] = self.checked[b] = True
            self.fetched_bytes += len(data)
            self.fetches += 1
            epoch = self._inflight.pop(b)[2]  # still there: `_wait` lets go of done fetches only
            self.fetched_for[epoch] = self.fetched_for.get(epoch, 0) + len(data)
            self._cond.notify_all()
            self._pump()

    def _recheck(self, b: int) -> bool:
        """A block found on disk from an earlier run: its span hashed again."""
        slot, start, end = (int(x) for x in self.spans[b])
        with closing_fd(self.open(self.shards[slot][0], os.O_RDONLY)) as fd:
            data = os.pread(fd, end - start, start)
        return hashlib.sha256(data).hexdigest() == self.digests[b]

    def _wait(self, b: int) -> None:
        """Wait for block `b`'s fetch, under the stores' minimum-rate rule (`core/stores.py`)."""
        future, started, _ = self._inflight[b]
        until = started + deadline(int(self.sizes[b]))  # read now: a shortened deadline counts
        self._cond.release()
        try:
            future.result(timeout=max(0.0, until - time.monotonic()))
        except TimeoutError:
            slot, start, end = (int(x) for x in self.spans[b])
            url = self.store.object_url(self.shards[slot][0])
            raise ShardError(
                f"{url} stalled: bytes {start}-{end} did not arrive at {MIN_RATE >> 10} KiB/s "
                "or more; check the endpoint or network (a store that stalls is not retried)"
            ) from None
        finally:
            self._cond.acquire()
            if self._inflight.get(b, (None,))[0] is future and future.done():
                del self._inflight[b]

    def hold(self, blocks: list[int]) -> None:
        """Make `blocks` present and checked, and keep them until `release`: fetched now if no
        fetch ahead brought them. Raises the `ShardError` of a failed fetch or check."""
        need = int(self.sizes[blocks].sum())
        if need > self.limit:
            raise MixshardError(
                f"the block cache's limit ({self.limit} bytes) is smaller than one read of "
                f"{need} bytes ({len(blocks)} blocks); give a larger cache_limit"
            )
        with self._cond:
            when: dict[int, int] = {}
            for b in dict.fromkeys(blocks):  # a block listed twice is one use, one pin
                when[b] = self._schedule.take(b)
                self._clock += 1
                self._last[b] = self._clock
            ticket = next(self._tickets)
            self._holding[ticket] = set(blocks)
            try:
                self._hold_all(when, ticket)
            finally:
                del self._holding[ticket]
                self._starved.discard(ticket)
            self._pump()

    def _hold_all(self, when: dict[int, int], ticket: int) -> None:
        """Fetch the missing ones of `when`'s blocks (block -> time of its use) together, then
        pin them all at once: a read pins blocks only while it reads them locally, never while
        it waits for the network."""
        blocks = list(when)
        while True:
            # only the oldest read drops blocks, so reads never drop each other's in turn
            oldest = ticket == min(self._holding)
            waiting = False
            for b in blocks:
                if self._closed:
                    raise MixshardError("the block cache was closed")
                if self.present[b] and not self.checked[b]:
                    if self._recheck(b):
                        self.checked[b] = True
                    else:
                        self._drop(b)
                if not self.present[b] and b not in self._inflight:
                    size = int(self.sizes[b])
                    room = self.used + size <= self.limit
                    if self._make_room(size, own=self._holding[ticket]) if oldest else room:
                        self._start(b, when[b])
                    else:
                        waiting = True
            for b in blocks:
                if b in self._inflight:
                    self._wait(b)
            if not waiting and all(self.present[b] for b in blocks):
                for b in blocks:
                    self.pins[b] += 1
                return
            if waiting:
                self._starved.add(ticket)
                self._cond.wait(0.02)  # older reads fill the cache: let them finish first

    def release(self, blocks: list[int]) -> None:
        """The reader is done with `blocks` (as given to `hold`)."""
        with self._cond:
            for b in dict.fromkeys(blocks):
                self.pins[b] -= 1
            self._cond.notify_all()
            self._pump()

    def close(self) -> None:
        """Stop fetching ahead (fetches under way finish on their own)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._release()


def fetch_block(
    store: Store, name: str, span: tuple[int, int], digest: str | None, block: int
) -> bytes:
    """Bytes `span` (start, end) of object `name`, the pack's block `block`, in one ranged read
    checked against `digest` (its sha256; None: its size only) before anyone uses them (the
    cache's and `preview`'s fetch). Raises `ShardError` naming the object, block and fix."""
    start, end = span
    data = store.read(name, start, end)
    if len(data) != end - start:
        problem = f"came back as {len(data)} bytes (the object is shorter than index.json says)"
    elif digest is not None and hashlib.sha256(data).hexdigest() != digest:
        problem = "is not as its sha256 in index.json says"
    else:
        return data
    raise ShardError(
        f"{store.object_url(name)}: block {block} (bytes {start}-{end}) {problem}; the pack "
        f"changed after its index.json was read, or is damaged: run `mixshard verify "
        f"{store.url}` and open the pack again (repack it or restore the object if verify fails)"
    )


def _let_go(pool: ThreadPoolExecutor, lock_fd: int, folders: list[int]) -> None:
    pool.shutdown(wait=False, cancel_futures=True)
    for fd in [*folders, lock_fd]:
        os.close(fd)

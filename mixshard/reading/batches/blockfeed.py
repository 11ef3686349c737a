"""Whole blocks read ahead for the block order, straight into the batches they feed.

The batches a reader will make are known in advance (`order.py`), and so is where each image of
a block goes: which batch, which row. A walker thread goes through the batches in order; the
first time a batch needs a block, reader threads read it (with the rest of its run) in one
`preadv` whose buffers are the rows its images take in every batch of this feed (images of
other ranks or workers, and those left over, go to a scratch row; a block whose first or last
images are another's is read alone, only the span of ours). No Python object is made per
image. Memory: the batches laid out ahead (half a window) and those a window's blocks feed.
"""

from __future__ import annotations

import queue
from collections.abc import Callable

import numpy as np
import torch

from ...core import locks
from ...core.errors import MixshardError
from ...core.jobs import Job, check_process, own
from ..pack.reader import PackReader
from ..pack.shardfiles import FeedReads
from . import order
from .recycle import Recycler

# the state of a block's read in one epoch
NOT_READ, READING, DONE, BAD, FAILED = 0, 1, 2, 3, 4
ADDRESS_SLOTS = 1 << 12  # batch addresses cached (more than the batches alive at once)


class _EpochReads:
    """The reads of one epoch's blocks: a state per block, and the errors of failed ones."""

    __slots__ = ("errors", "state")

    def __init__(self, blocks: int) -> None:
        self.state = np.zeros(blocks, np.int8)
        self.errors: dict[int, BaseException] = {}


class BlockFeed:
    """Makes the batches `batches` (an increasing range, maybe endless), taken in that order
    from any number of threads, out of whole blocks read ahead. `sequence_of(epoch)`: the
    epoch's sequence and its inverse; `per_epoch` batches a rank (a block is read once an
    epoch); at most `ahead` batches laid out beyond those taken; `threads` reads in flight keep
    a disk busy; a run of `run` blocks is read with one request; `drop_cache`: packs larger
    than memory."""

    def __init__(
        self,
        pack: PackReader,
        sequence_of: Callable[[int], tuple[np.ndarray, np.ndarray]],
        per_epoch: int,
        rank: int,
        batch_size: int,
        batches: range,
        ahead: int,
        threads: int = 8,
        drop_cache: bool = False,
        pin: bool = False,
        run: int = 1,
    ) -> None:
        if not isinstance(batches, range) or batches.step < 1:
            raise TypeError("the block order needs its batches as an increasing range")
        self.pack = pack
        size = pack.manifest.size
        self._shape = (batch_size, 3, size, size)
        self._image_bytes = pack.manifest.image_bytes
        self._sequence_of = sequence_of
        self._per_epoch, self._rank, self._batch_size = per_epoch, rank, batch_size
        self._batches = batches
        self._drop_cache, self._pin, self._run = drop_cache, pin, run
        self._sink = np.empty(self._image_bytes, np.uint8)  # images no batch of ours takes
        # the epoch being laid out: its number, sequence, inverse and reads
        self._epoch, self._reads = -1, _EpochReads(0)
        self._sequence = self._inverse = np.zeros(0, np.int64)
        self._seen = np.zeros(len(pack.block_count), bool)  # scratch: the blocks of a batch
        # batch k's address, cached in slot k % ADDRESS_SLOTS (`_buffers` has them all)
        self._address = np.zeros(ADDRESS_SLOTS, np.uint64)
        self._address_of = np.full(ADDRESS_SLOTS, -1, np.int64)
        # batch -> (its images, their address, the recycled buffer under them or None)
        self._buffers: dict[int, tuple[torch.Tensor, int, np.ndarray | None]] = {}
        self._recycler = Recycler(batch_size, self._image_bytes, keep=4 * ahead + 16)
        self._any_bad = False  # a read failed or found a bad block: batches check theirs
        self._laid: dict[int, tuple[np.ndarray, np.ndarray, _EpochReads]] = {}
        self._ahead = ahead
        self._cond = locks.Condition()
        self._stop = False
        self._error: BaseException | None = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        blocks = len(pack.block_count)  # a store's cache fetches, and evicts, by this
        pack.files.expect(
            FeedReads(sequence_of, per_epoch, rank, batch_size, batches, run, pack.block_of, blocks)
        )
        self._readers = [Job(self._read_all, f"mixshard-read-{i}") for i in range(threads)]
        self._walker = Job(self._walk_all, "mixshard-walk")
        # the threads hold the feed until closed: by its reader, or at interpreter exit
        self._closer = own(self, self._shut)

    # ------------------------------------------------------------------ walker side
    def _walk_all(self) -> None:
        try:
            for k in self._batches:
                with self._cond:
                    while len(self._laid) >= self._ahead and not self._stop:
                        self._cond.wait()
                    if self._stop:
                        return
                epoch, first = order.batch_span(k, self._per_epoch, self._rank, self._batch_size)
                if epoch != self._epoch:
                    self._sequence, self._inverse = self._sequence_of(epoch)
                    self._epoch, self._reads = epoch, _EpochReads(len(self.pack.block_count))
                index = self._sequence[first : first + self._batch_size]
                seen = self._seen
                seen[self.pack.block_of(index)] = True
                blocks = np.flatnonzero(seen)
                seen[blocks] = False
                reads = self._reads
                for b in blocks[reads.state[blocks] == NOT_READ].tolist():
                    if reads.state[b] == NOT_READ:  # not read with an earlier one of its run
                        self._start(k, b, reads)
                with self._cond:
                    self._laid[k] = (index, blocks, reads)
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumers
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _start(self, k: int, b: int, reads: _EpochReads) -> None:
        """Queue the read of block `b`, first needed by batch `k`, and of the rest of its run
        (one read per shard it spans), into every batch they feed: the job holds those
        batches' images, so they outlive the read whatever happens. (No batch before `k`
        needs a block of the run: it would have been read with that batch.)"""
        run = order.run_of(b // self._run, self._run, len(self.pack.block_count))
        # Only the run's blocks that feed a batch of ours, and of a block only the span of
        # images that do: blocks wholly in another worker's or rank's part are the other's, and
        # the block two parts meet in is read by both, each its own images (the pack read once).
        places: dict[int, tuple[np.ndarray, list]] = {}
        for x in run:
            if reads.state[x] == NOT_READ:
                at, held, (lo, hi) = self._addresses(k, x, must_feed_k=x == b)
                if not held:
                    continue
                if hi - lo < len(at):  # where two parts meet in it: only our images of it
                    reads.state[x] = READING
                    self._jobs.put((reads, [x], [at[lo:hi]], held, lo))
                else:
                    places[x] = (at, held)
        members = np.array(sorted(places), np.int64)
        shard = self.pack.block_shard[members]
        cuts = (np.diff(shard) != 0) | (np.diff(members) != 1)  # one read: consecutive blocks
        for group in np.split(members, np.flatnonzero(cuts) + 1) if len(members) else []:
            addresses, images = [], []  # a group: consecutive blocks of one shard
            for x in group.tolist():
                addresses.append(places[x][0])
                images += places[x][1]
            reads.state[group] = READING
            self._jobs.put((reads, group.tolist(), addresses, images, None))

    def _addresses(
        self, k: int, b: int, must_feed_k: bool
    ) -> tuple[np.ndarray, list, tuple[int, int]]:
        """Where each image of block `b` goes (its row in the batch of ours that takes it,
        else the sink), the images of those batches, and the span `(lo, hi)` of the block's
        images that are ours (`(0, 0)`: none)."""
        start, count = int(self.pack.block_start[b]), int(self.pack.block_count[b])
        where, rows = order.batch_places(
            self._inverse[start : start + count],
            self._epoch,
            self._per_epoch,
            self._rank,
            self._batch_size,
        )
        todo = self._batches
        mine = (where >= max(todo.start, k)) & (where < todo.stop)
        if todo.step > 1:
            mine &= (where - todo.start) % todo.step == 0
        ours, rows = where[mine], rows[mine]
        feeds = np.unique(ours)
        if must_feed_k and k not in feeds:
            raise MixshardError(f"batch {k} takes images of block {b} that are placed elsewhere")
        slots = feeds % ADDRESS_SLOTS
        for batch in feeds[self._address_of[slots] != feeds].tolist():  # not cached
            held = self._buffers.get(batch)
            if held is None:  # the batch's images, made by the first block feeding it
                images, buffer = self._recycler.images(self._shape, self._pin)
                with self._cond:
                    held = self._buffers[batch] = (images, images.data_ptr(), buffer)
            self._address[batch % ADDRESS_SLOTS] = held[1]
            self._address_of[batch % ADDRESS_SLOTS] = batch
        if (self._address_of[slots] == feeds).all():
            base = self._address[ours % ADDRESS_SLOTS]
        else:  # two of them share a slot (tiny batches): from the dict
            at = np.array([self._buffers[f][1] for f in feeds.tolist()], np.uint64)
            base = at[np.searchsorted(feeds, ours)]
        addresses = np.full(count, self._sink.ctypes.data, np.uint64)
        addresses[mine] = base + (rows * self._image_bytes).astype(np.uint64)
        used = np.flatnonzero(mine)
        span = (int(used[0]), int(used[-1]) + 1) if len(used) else (0, 0)
        return addresses, [self._buffers[f][0] for f in feeds.tolist()], span

    # ------------------------------------------------------------------ reader side
    def _read_all(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            # `_images`: alive until the read ends; `first`: the first image of a part read
            reads, blocks, addresses, _images, first = job
            results: list[bool | BaseException]
            if self._stop:
                results = [MixshardError("the block reader was closed")] * len(blocks)
            else:
                try:
                    drop = self._drop_cache
                    if first is None:  # a run of whole blocks, else a part of one block
                        results = list(self.pack.scatter_run(blocks, addresses, drop))
                    else:
                        results = [self.pack.scatter_part(blocks[0], first, addresses[0], drop)]
                except BaseException as exc:  # noqa: BLE001 - raised by the batches needing it
                    results = [exc] * len(blocks)
            with self._cond:
                for b, result in zip(blocks, results):
                    if isinstance(result, BaseException):
                        reads.errors[b] = result
                        reads.state[b] = FAILED
                    else:
                        reads.state[b] = DONE if result else BAD
                    if reads.state[b] != DONE:
                        self._any_bad = True
                self._cond.notify_all()
            del job, _images

    # ------------------------------------------------------------------ consumer side
    def take(self, k: int) -> tuple[np.ndarray, torch.Tensor, np.ndarray | None]:
        """Batch `k`: `(image numbers, images, bad mask or None)`; the images of bad, skipped
        blocks (where the mask is True) are left unwritten.

        Raises:
            ShardError: a block it needs could not be read (with `on_error="raise"`).
            ForkedError: the feed was made in another process (before a fork).
        """
        check_process(self._walker.pid, "a block feed")
        with self._cond:
            while k not in self._laid:
                if self._error is not None:
                    raise self._error
                if self._stop:
                    raise MixshardError("the block reader was closed")
                self._cond.wait()
            index, blocks, reads = self._laid.pop(k)
            images, _, buffer = self._buffers.pop(k)
            self._cond.notify_all()
            while (reads.state[blocks] < DONE).any():
                self._cond.wait()
            any_bad = self._any_bad
        bad = None
        if any_bad:
            state = reads.state[blocks]
            failed = blocks[state == FAILED]
            if len(failed):
                raise reads.errors[int(failed[0])]
            if (state == BAD).any():
                bad = np.isin(self.pack.block_of(index), blocks[state == BAD])
        if buffer is not None:  # every read into it has ended
            self._recycler.lend(buffer)
        return index, images, bad

    def stats(self) -> dict[str, int]:
        """Counters: batch buffers made (the others were used again), and the blocks of the
        epoch being laid out by the state of their read."""
        with self._cond:
            state = np.bincount(self._reads.state, minlength=FAILED + 1).tolist()
        names = ("not_read", "reading", "done", "bad", "failed")
        return {
            "buffers_made": self._recycler.made,
            **{f"blocks_{n}": c for n, c in zip(names, state)},
        }

    def close(self) -> None:
        """Stop walking and reading; returns once the reads in flight end (those queued end as
        errors, for anyone waiting). Nothing in a forked child (the threads are not there)."""
        self._closer()

    def _shut(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._walker.join()  # it queues no read after this
        for _ in self._readers:
            self._jobs.put(None)  # after every queued read
        for thread in self._readers:
            thread.join()
        with self._cond:
            self._buffers.clear()

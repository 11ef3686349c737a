"""Which cached block to drop, and what the future holds: pure bookkeeping, no I/O.

A reader's order is a pure function (`order.py`): the full cache drops the block needed furthest
ahead in the sequence the reader follows (`feed_uses`, `feed_batches`; docs/design.md, "Which
blocks a store's cache keeps"). Time is a use's place in it: `epoch * STRIDE + i` for the
`i`-th block read in `epoch`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

import numpy as np

from ..batches import order
from ..pack.shardfiles import FeedReads

NEVER = 1 << 62  # the next use of a block that is not used again within the known future
STRIDE = 1 << 32  # time of the first use of epoch e: e * STRIDE


def belady_victim(
    schedule: Schedule,
    present: np.ndarray,
    busy: np.ndarray,
    keep: set[int],
    last: np.ndarray,
    before: int | None,
) -> int | None:
    """A block of `present` (bool per block), not `busy` (being read or fetched) nor in
    `keep`, to drop; None: none to drop now.

    Belady's rule picks the block whose next use is furthest, counted from `before`, the time
    of the use a block is fetched ahead for (None: a read waiting now); ties go to the least
    recently used (`last`), then the lowest number. None when that block cannot go yet: a
    busy block is used later (let go soon), or, fetching ahead, it or one needed later is read
    before `before` (to go once read); dropping one needed sooner costs a fetch waiting saves."""
    mine = np.zeros(len(busy), bool)
    mine[list(keep)] = True
    busy = busy & ~mine
    nxt = schedule.next_uses(before)
    idx = np.flatnonzero(present & ~busy & ~mine)
    if not len(idx):
        return None
    idx = idx[nxt[idx] == nxt[idx].max()]
    if len(idx) > 1:
        idx = idx[last[idx] == last[idx].min()]
    victim = int(idx[0])
    if (nxt[busy] > nxt[victim]).any():
        return None
    if before is not None:
        now = schedule.next_uses()
        if now[victim] < before:
            return None  # read before then: the one to drop once read, maybe
        if (present & (now < before) & (nxt > nxt[victim])).any():
            return None  # dropped once read, it saves the fetch dropping `victim` costs
    return victim


def feed_batches(batches: range, per_epoch: int, epoch: int, workers: int = 1) -> range:
    """The batches of `epoch` (`per_epoch` a rank) that a block feed over `batches` makes. A
    process worker (`workers > 1`) makes its role's part of each epoch, one feed an epoch
    (`roles.py`): `batches` in one epoch with step 1; for a later epoch, its role's part."""
    lo, hi = epoch * per_epoch, (epoch + 1) * per_epoch
    first_epoch = batches.start // per_epoch
    if workers > 1 and batches.step == 1 and epoch > first_epoch:
        last = (batches.stop - 1) // per_epoch if len(batches) else first_epoch
        if last == first_epoch:  # one epoch with step 1: a worker's role
            counts = order.role_counts(first_epoch, per_epoch, workers)
            offset = batches.start - first_epoch * per_epoch
            role = min(int(np.searchsorted(np.cumsum(counts), offset, side="right")), workers - 1)
            counts = order.role_counts(epoch, per_epoch, workers)
            base = lo + sum(counts[:role])
            return range(base, base + counts[role])
    start = max(batches.start, lo)
    start += (batches.start - start) % batches.step
    return range(start, min(hi, batches.stop), batches.step)


def feed_uses(feed: FeedReads, epoch: int, workers: int = 1) -> np.ndarray:
    """The blocks a block feed (`feed`, of a process worker of `workers` when more than 1)
    reads in `epoch`, in the order it reads them: batch after batch (`feed_batches`), its
    blocks not read yet in ascending order, each with the rest of its run (`order.run_of`)
    that feeds these batches."""
    sequence, size = feed.sequence_of(epoch)[0], feed.batch_size
    ks = feed_batches(feed.batches, feed.per_epoch, epoch, workers)
    firsts = [order.batch_span(k, feed.per_epoch, feed.rank, size)[1] for k in ks]
    parts = [feed.block_of(sequence[f : f + size]) for f in firsts]
    if not parts:
        return np.zeros(0, np.int64)
    ours = np.zeros(feed.blocks, bool)
    ours[np.concatenate(parts)] = True
    read = np.zeros(feed.blocks, bool)
    out: list[int] = []
    for part in parts:
        for b in np.unique(part).tolist():
            if read[b]:
                continue
            for x in order.run_of(b // feed.run, feed.run, feed.blocks):
                if not read[x] and ours[x]:
                    read[x] = True
                    out.append(x)
    return np.array(out, np.int64)


def future_uses(feed: FeedReads, workers: int = 1) -> Callable[[int], np.ndarray]:
    """`uses_of(epoch)`: `feed_uses` of `feed` (of a process worker of `workers`) in `epoch`."""
    return lambda epoch: feed_uses(feed, epoch, workers)


class Schedule:
    """Follows one reader, from `first_epoch` on, along its known sequence of block reads:
    `uses_of(epoch)`, the blocks it reads in that epoch in order, the first epoch's from where
    the reader starts (None: nothing is known; every next use is `NEVER`: LRU). Reads may come
    slightly out of order (reader threads: `take`). Not thread-safe: its owner holds a lock."""

    def __init__(
        self, uses_of: Callable[[int], np.ndarray] | None, blocks: int, first_epoch: int = 0
    ) -> None:
        self._uses_of = uses_of
        self._pending: list[deque[int]] = [deque() for _ in range(blocks)]
        # the first two uses to come of each block, as arrays (`next_uses`)
        self._head = np.full(blocks, NEVER, np.int64)
        self._then = np.full(blocks, NEVER, np.int64)
        self._epochs: dict[int, np.ndarray] = {}
        self._low: dict[int, int] = {}  # per epoch: no use before this index is still to come
        self._first = first_epoch
        self.now = first_epoch * STRIDE  # time of the latest use taken
        self._extend(first_epoch + 1)

    def _extend(self, last_epoch: int) -> None:
        if self._uses_of is None:
            return
        for e in range(self._first, last_epoch + 1):  # epochs not known yet
            uses = np.asarray(self._uses_of(e), np.int64)
            self._epochs[e], self._low[e] = uses, 0
            for i, b in enumerate(uses.tolist()):
                self._pending[b].append(e * STRIDE + i)
            for b in np.unique(uses).tolist():
                self._mirror(b)
        self._first = max(self._first, last_epoch + 1)
        for e in [e for e in self._epochs if e < self.now // STRIDE - 1]:
            del self._epochs[e], self._low[e]

    def _mirror(self, b: int) -> None:
        pending = self._pending[b]
        self._head[b] = pending[0] if pending else NEVER
        self._then[b] = pending[1] if len(pending) > 1 else NEVER

    def next_uses(self, t: int | None = None) -> np.ndarray:
        """Per block, the time of its next use (`NEVER`: none known), or with `t`, of its first
        use at `t` or later. Read only."""
        if t is None:
            return self._head
        out = self._head.copy()
        low = out < t
        if low.any():
            out[low] = self._then[low]
            for b in np.flatnonzero(low & (self._then < t)).tolist():
                out[b] = self.next_use_from(b, t)
        return out

    def next_use_from(self, b: int, t: int) -> int:
        """Time of block `b`'s first use at `t` or later (`NEVER` when none is known)."""
        for u in self._pending[b]:
            if u >= t:
                return u
        return NEVER

    def take(self, b: int) -> int:
        """Block `b` is being read now: its earliest use still to come is taken. Returns the
        use's time (`now` for a read the schedule did not foresee)."""
        pending = self._pending[b]
        if not pending:
            return self.now  # a read the schedule did not foresee
        t = pending.popleft()
        self._mirror(b)
        if t > self.now:
            self.now = t
            self._extend(t // STRIDE + 1)
        return t

    def upcoming(self) -> Iterator[tuple[int, int]]:
        """`(time, block)` of the uses still to come, in time order: a use is to come when it is
        not before its block's next use (`_head`)."""
        head = self._head
        for e in sorted(self._epochs):
            uses = self._epochs[e]
            i = self._low[e]
            while i < len(uses) and e * STRIDE + i < head[uses[i]]:
                i += 1
            self._low[e] = i
            for j in range(i, len(uses)):
                t, b = e * STRIDE + j, int(uses[j])
                if t >= head[b]:
                    yield t, b

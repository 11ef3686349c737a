"""Which cached block to drop, and what the future holds: pure bookkeeping, no I/O.

A pack on an object store is read through a bounded local cache (`blockcache.py`). The read
order is a pure function of (seed, epoch, rank) (`order.py`), so the blocks a reader will need,
in the order it needs them, are known for the current epoch and the next: a full cache drops
the block whose next use lies furthest in the future (Belady's rule, optimal for a known
sequence), never the LRU guess that re-fetches a whole pack each epoch when it holds half of it.

Time is a use's place in that sequence: `epoch * STRIDE + i` for the `i`-th block read in
`epoch`. `Schedule` follows a reader along it; `furthest_victim` and `lru_victim` choose; and
`simulate` replays a sequence of uses against a byte limit (what the tests and the benchmark
compare the policies with).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

NEVER = 1 << 62  # the next use of a block that is not used again within the known future
STRIDE = 1 << 32  # time of the first use of epoch e: e * STRIDE
POLICIES = ("future", "lru")


def furthest_victim(
    cached: Iterable[int], next_use: Mapping[int, int], last_used: Mapping[int, int]
) -> int | None:
    """The block of `cached` to drop under Belady's rule: the one whose next use is furthest
    away (ties, e.g. blocks never used again: the least recently used, then the lowest number).
    None when `cached` is empty."""
    best, key = None, None
    for b in cached:
        k = (next_use.get(b, NEVER), -last_used.get(b, -1), -b)
        if key is None or k > key:
            best, key = b, k
    return best


def lru_victim(cached: Iterable[int], last_used: Mapping[int, int]) -> int | None:
    """The least recently used block of `cached` (never used: first; ties: lowest number)."""
    best, key = None, None
    for b in cached:
        k = (last_used.get(b, -1), b)
        if key is None or k < key:
            best, key = b, k
    return best


def simulate(
    uses: Sequence[int], sizes: Sequence[int] | np.ndarray, limit: int, policy: str = "future"
) -> list[int]:
    """Bytes fetched at each use of `uses` (block numbers in the order they are read) by a
    cache of `limit` bytes that evicts by `policy` (`"future"`: Belady; `"lru"`). A block
    larger than the limit is fetched and not kept."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    later: dict[int, deque[int]] = {}
    for t, b in enumerate(uses):
        later.setdefault(int(b), deque()).append(t)
    cached: set[int] = set()
    last: dict[int, int] = {}
    used, fetched = 0, []
    for t, b in enumerate(int(u) for u in uses):
        later[b].popleft()
        last[b] = t
        if b in cached:
            fetched.append(0)
            continue
        size = int(sizes[b])
        fetched.append(size)
        if size > limit:
            continue
        while used + size > limit:
            if policy == "lru":
                victim = lru_victim(cached, last)
            else:
                nxt = {c: later[c][0] for c in cached if later[c]}
                victim = furthest_victim(cached, nxt, last)
                if victim is not None and nxt.get(victim, NEVER) < (
                    later[b][0] if later[b] else NEVER
                ):
                    victim = None  # every cached block is needed before this one: not kept
            if victim is None:
                break
            cached.discard(victim)
            used -= int(sizes[victim])
        if used + size <= limit:
            cached.add(b)
            used += size
    return fetched


class Schedule:
    """Follows one reader along its known sequence of block reads.

    Args:
        uses_of: epoch -> the blocks the reader reads in that epoch, in order (None: nothing
            is known; every next use is `NEVER`, and eviction falls back to LRU). The first
            epoch's list starts where the reader starts (a resumed epoch: its remaining reads).
        blocks: blocks in the pack.
        first_epoch: the epoch the reader starts in.

    Reads may come slightly out of order (reader threads): a read takes its block's earliest
    use still to come. Not thread-safe: its owner holds a lock.
    """

    def __init__(
        self, uses_of: Callable[[int], np.ndarray] | None, blocks: int, first_epoch: int = 0
    ) -> None:
        self._uses_of = uses_of
        self._pending: list[deque[int]] = [deque() for _ in range(blocks)]
        self._epochs: dict[int, np.ndarray] = {}
        self._low: dict[int, int] = {}  # per epoch: no use before this index is still to come
        self._first = first_epoch
        self.now = first_epoch * STRIDE  # time of the latest use taken
        self._extend(first_epoch + 1)

    def _extend(self, last_epoch: int) -> None:
        if self._uses_of is None:
            return
        for e in range(self._first, last_epoch + 1):
            if e not in self._epochs:
                uses = np.asarray(self._uses_of(e), np.int64)
                self._epochs[e], self._low[e] = uses, 0
                for i, b in enumerate(uses.tolist()):
                    self._pending[b].append(e * STRIDE + i)
        self._first = max(self._first, last_epoch + 1)
        for e in [e for e in self._epochs if e < self.now // STRIDE - 1]:
            del self._epochs[e], self._low[e]

    def next_use(self, b: int) -> int:
        """Time of block `b`'s next use (`NEVER` when none is known)."""
        pending = self._pending[b]
        return pending[0] if pending else NEVER

    def take(self, b: int) -> None:
        """Block `b` is being read now: its next use is taken."""
        pending = self._pending[b]
        if not pending:
            return  # a read the schedule did not foresee
        t = pending.popleft()
        if t > self.now:
            self.now = t
            self._extend(t // STRIDE + 1)

    def _to_come(self, t: int, b: int) -> bool:
        pending = self._pending[b]
        return bool(pending) and t >= pending[0]

    def upcoming(self) -> Iterator[tuple[int, int]]:
        """`(time, block)` of the uses still to come, in time order."""
        for e in sorted(self._epochs):
            uses = self._epochs[e]
            i = self._low[e]
            while i < len(uses) and not self._to_come(e * STRIDE + i, int(uses[i])):
                i += 1
            self._low[e] = i
            for j in range(i, len(uses)):
                t, b = e * STRIDE + j, int(uses[j])
                if self._to_come(t, b):
                    yield t, b

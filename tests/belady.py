"""The eviction policies replayed on a known sequence of reads: Belady's rule (the fewest
fetches any cache of that size can make) and LRU, the oracle the block cache's tests and
`docs/packing-to-a-store.md` compare the cache's real fetches with."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from mixshard.reading.store.eviction import NEVER

POLICIES = ("future", "lru")


def lru_victim(cached: Iterable[int], last_used: Mapping[int, int]) -> int | None:
    """The least recently used block of `cached` (never used: first; ties: lowest number)."""
    best, key = None, None
    for b in cached:
        k = (last_used.get(b, -1), b)
        if key is None or k < key:
            best, key = b, k
    return best


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

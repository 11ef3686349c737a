"""The descriptors of a pack's shards: opened on first use, kept open (at most
`MAX_OPEN_SHARDS` once nobody holds them), held while a read uses them."""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator

from ...core import locks
from . import shardfiles


class OpenShards:
    """Cached shard descriptors, thread-safe. `held` takes the descriptors of a batch's
    shards with one lock for those already open: a batch of the global order holds one
    image from each of up to hundreds of shards."""

    def __init__(self) -> None:
        self._fds: OrderedDict[int, list[int]] = OrderedDict()  # slot -> [fd, users]
        self._lock = locks.Lock()

    def __len__(self) -> int:
        return len(self._fds)

    @contextlib.contextmanager
    def held(self, slots: list[int], opener: Callable[[int], int]) -> Iterator[list[int]]:
        """The descriptors of shards `slots` (distinct), opened by `opener(slot)` when not
        open yet, held open until the block ends (the cache closes only idle ones)."""
        entries: list[list[int] | None] = []
        with self._lock:
            for slot in slots:
                entry = self._fds.get(slot)
                if entry is not None:
                    self._fds.move_to_end(slot)
                    entry[1] += 1
                entries.append(entry)
        try:
            for k, slot in enumerate(slots):
                if entries[k] is None:
                    entries[k] = self._add(slot, opener(slot))
            yield [e[0] for e in entries]  # type: ignore[index]
        finally:
            with self._lock:
                for entry in entries:
                    if entry is not None:
                        entry[1] -= 1
                self._evict()

    def _add(self, slot: int, fd: int) -> list[int]:
        with self._lock:
            entry = self._fds.get(slot)
            if entry is not None:  # another thread opened it meanwhile: use that one
                os.close(fd)
                entry[1] += 1
                return entry
            entry = self._fds[slot] = [fd, 1]
            return entry

    def _evict(self) -> None:
        excess = len(self._fds) - shardfiles.MAX_OPEN_SHARDS
        if excess > 0:
            self._close_idle(excess)

    def _close_idle(self, most: int) -> None:
        """Close at most `most` descriptors nobody holds, least recently used first (locked)."""
        idle = [s for s, (_, users) in self._fds.items() if users == 0]
        for s in idle[:most]:
            os.close(self._fds.pop(s)[0])

    def close(self) -> None:
        """Close the descriptors nobody holds (they are opened again on the next read)."""
        with self._lock:
            self._close_idle(len(self._fds))

"""Whole blocks read ahead for the block order, into a fixed ring of buffers.

The batches a reader will make are known in advance (`order.py`), so the blocks they need are
too: a planner thread walks the batches in order and has reader threads `pread` each needed
block once into a free slot of the ring; a batch is then one gather from the ring. A block's
slot is freed when the last planned batch that needs it has been made. Memory is the ring:
`capacity` blocks, whatever the size of the pack.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import MixshardError
from .local import LocalPack
from .order import block_schedule


@dataclass
class _Slot:
    slot: int
    refs: int
    ready: threading.Event = field(default_factory=threading.Event)
    good: bool = True
    error: BaseException | None = None


class BlockFeed:
    """Makes the batches `batches` (in that order, from any number of threads) out of whole
    blocks read ahead.

    Args:
        pack: the open pack.
        index_of: batch number -> the image numbers that make it.
        batches: the batch numbers this feed will be asked for, in order (may be endless).
        capacity: blocks held at most (the ring's size); must cover the blocks two
            consecutive windows need.
        ahead: batches planned at most beyond those taken (about what the ring holds).
        threads: reader threads (several reads in flight keep a disk busy).
        drop_cache: drop each block from the page cache once read (packs larger than memory).
    """

    def __init__(
        self,
        pack: LocalPack,
        index_of: Callable[[int], np.ndarray],
        batches: Iterable[int],
        capacity: int,
        ahead: int,
        threads: int = 8,
        drop_cache: bool = False,
    ) -> None:
        self.pack = pack
        self._drop_cache = drop_cache
        self._index_of = index_of
        self._block_size = pack.manifest.block_size
        self._ring = np.empty((capacity * self._block_size, pack.manifest.image_bytes), np.uint8)
        self._capacity = capacity
        self._free = list(range(capacity - 1, -1, -1))
        self._resident: dict[int, _Slot] = {}
        self._slot_of = np.full(len(pack.block_count), -1, np.int64)
        self._plans: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._ahead = ahead
        self._cond = threading.Condition()
        self._stop = False
        self._error: BaseException | None = None
        self._io = ThreadPoolExecutor(threads, thread_name_prefix="mixshard-read")
        self._planner = threading.Thread(
            target=self._plan_all, args=(iter(batches),), daemon=True, name="mixshard-plan"
        )
        self._planner.start()

    # ------------------------------------------------------------------ planner side
    def _plan_all(self, batches: Iterable[int]) -> None:
        try:
            for k in batches:
                index = self._index_of(k)
                blocks = block_schedule(self.pack.block_of(index))
                if len(blocks) > self._capacity:  # it could never be planned: say so, not wait
                    raise MixshardError(
                        f"batch {k} needs {len(blocks)} blocks, more than the {self._capacity} "
                        "the block reader holds"
                    )
                with self._cond:
                    while len(self._plans) >= self._ahead and not self._stop:
                        self._cond.wait()
                    if self._stop:
                        return
                    for b in blocks.tolist():
                        if not self._reserve(b):
                            return
                    self._plans[k] = (index, blocks)
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumers
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _reserve(self, b: int) -> bool:
        """Hold block `b` for one more batch, starting its read if it is not resident. Called
        with the lock held; False when the feed was closed while waiting for a free slot."""
        held = self._resident.get(b)
        if held is not None:
            held.refs += 1
            return True
        while not self._free and not self._stop:
            self._cond.wait()
        if self._stop:
            return False
        held = self._resident[b] = _Slot(self._free.pop(), 1)
        self._slot_of[b] = held.slot
        self._io.submit(self._load, b, held)
        return True

    def _load(self, b: int, held: _Slot) -> None:
        rows = self._ring[held.slot * self._block_size : (held.slot + 1) * self._block_size]
        try:
            held.good = self.pack.read_block(b, rows, self._drop_cache)
        except BaseException as exc:  # noqa: BLE001 - raised by the batch that needs it
            held.error = exc
        held.ready.set()

    # ------------------------------------------------------------------ consumer side
    @property
    def ring(self) -> np.ndarray:
        """The buffer blocks are read into: one image per row."""
        return self._ring

    @contextlib.contextmanager
    def batch(self, k: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """Batch `k` while its blocks are held: `(image numbers, their rows in `ring`, bad
        mask or None)`. Gather the rows inside the `with`; the blocks may be reused after it.

        Raises:
            ShardError: a block it needs could not be read (with `on_error="raise"`).
        """
        with self._cond:
            while k not in self._plans:
                if self._error is not None:
                    raise self._error
                if self._stop:
                    raise MixshardError("the block reader was closed")
                self._cond.wait()
            index, blocks = self._plans.pop(k)
            held = [self._resident[b] for b in blocks.tolist()]
        try:
            for h in held:
                h.ready.wait()
                if h.error is not None:
                    raise h.error
            block = self.pack.block_of(index)
            rows = self._slot_of[block] * self._block_size + (index - self.pack.block_start[block])
            bad = None
            if not all(h.good for h in held):
                bad = ~np.isin(block, [b for b, h in zip(blocks.tolist(), held) if h.good])
            yield index, rows, bad
        finally:
            self._release(blocks)

    def _release(self, blocks: np.ndarray) -> None:
        with self._cond:
            for b in blocks.tolist():
                held = self._resident[b]
                held.refs -= 1
                if held.refs == 0:
                    del self._resident[b]
                    self._slot_of[b] = -1
                    self._free.append(held.slot)
            self._cond.notify_all()

    def close(self) -> None:
        """Stop planning and reading; returns once the planner and the reads in flight ended."""
        with self._cond:
            self._stop = True
            for held in self._resident.values():
                if not held.ready.is_set():  # its read may be cancelled: never leave a waiter
                    held.error = MixshardError("the block reader was closed")
                    held.ready.set()
            self._cond.notify_all()
        self._io.shutdown(wait=True, cancel_futures=True)
        self._planner.join(timeout=10)

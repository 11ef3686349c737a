"""The pool's refills: the images of a pack in block order, endlessly, read ahead on a
background thread, handed out in pieces of any size (`pool.py` puts them in the pool)."""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any

import torch

from ..core.env import rank_world
from ..core.errors import MixshardError
from ..reading.source import Source
from .draws import Carry

REFILL_BATCH = 256  # images per refill read
REFILL_AHEAD = 8  # refill batches read ahead
REFILL_WINDOW = 8  # blocks shuffled together in the refill stream (the pool itself shuffles)


class RefillFeed:
    """Images of a pack in block order, endlessly, read ahead on a background thread."""

    def __init__(self, source: Source, seed: int, pin: bool) -> None:
        """`pin`: batches in pinned memory (for copies to CUDA)."""
        from ..reading.loading import loader

        # each rank reads its share
        batch = max(1, min(REFILL_BATCH, source.count // rank_world()[1]))
        kwargs: dict[str, Any] = (
            {"order": "block", "window": REFILL_WINDOW} if source.is_folder else {}
        )
        self._loader = loader(
            source, batch, num_workers=2, infinite=True, seed=seed, pin_memory=pin, **kwargs
        )
        self._queue: queue.Queue = queue.Queue(REFILL_AHEAD)
        self._carry: Carry[torch.Tensor] = Carry(self._next)
        self._failed: BaseException | None = None  # raised again by every later take
        self._stop = threading.Event()
        self.waits, self.wait_seconds = 0, 0.0
        self._thread = threading.Thread(target=self._run, daemon=True, name="mixshard-refill")
        self._thread.start()
        # closed at interpreter exit too: a reader thread left inside torch then aborts the
        # process (a feed nobody closed, e.g. the Overlays `compat.random_overlay` keeps)
        self._closer = weakref.finalize(self, _stop_reading, self._stop, self._loader, self._thread)

    def _run(self) -> None:
        try:
            for batch in self._loader:
                if not self._put(batch):
                    return
            self._put(MixshardError("the refill stream of the pool ended"))
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            self._put(exc)

    def _put(self, item: Any) -> bool:
        """Queue `item`, unless the feed is closed first."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _next(self) -> torch.Tensor:
        if self._failed is not None:  # the reader thread has ended: never wait for it
            raise self._failed
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            self.waits += 1
            t0 = time.perf_counter()
            item = self._wait()
            self.wait_seconds += time.perf_counter() - t0
        if isinstance(item, BaseException):
            self._failed = item
            raise item
        return item

    def _wait(self) -> Any:
        while not self._stop.is_set():
            try:
                return self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
        return MixshardError("the refill stream of the pool was closed")

    def take(self, m: int) -> list[torch.Tensor]:
        """The next `m` images, as consecutive pieces of the feed's batches (host memory,
        pinned when asked): not copied into one tensor, which would cost a fresh allocation
        and a copy per refill."""
        return self._carry.take(m)

    def close(self) -> None:
        """Stop reading and wait for the reader thread to end."""
        self._closer()


def _stop_reading(stop: threading.Event, reader: Any, thread: threading.Thread) -> None:
    stop.set()
    reader.close()
    thread.join(timeout=10)

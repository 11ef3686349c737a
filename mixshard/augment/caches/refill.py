"""The pool's refills: the images of a pack in block order, endlessly, read ahead on a
background thread, handed out in pieces of any size (`imagepool.py` puts them in the pool)."""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
import time
import weakref
from typing import Any

import numpy as np
import torch

from ...core.env import rank_world
from ...core.errors import MixshardError
from ...core.jobs import Job, check_process, own
from ...reading.source import Source
from .pieces import Carry

REFILL_BATCH = 256  # images per refill read
REFILL_AHEAD = 8  # refill batches read ahead
REFILL_WINDOW = 8  # blocks shuffled together in the refill stream (the pool itself shuffles)


class Refill:
    """Images of a pack in block order, endlessly, read ahead on a background thread."""

    def __init__(self, source: Source, seed: int, pin: bool, start: int = 0) -> None:
        """`pin`: batches in pinned memory (for copies to CUDA); `start`: the images of the
        stream to skip (a pool's loaded state: `imagepool.py`)."""
        from ...reading.loading import loader

        # each rank reads its share
        batch = max(1, min(REFILL_BATCH, source.count // rank_world()[1]))
        kwargs: dict[str, Any] = {"order": "block", "window": REFILL_WINDOW}
        self._loader = loader(
            source, batch, num_workers=2, infinite=True, seed=seed, pin_memory=pin, **kwargs
        )
        self.batch = batch
        first, skip = divmod(start, batch)
        if first:  # before the reader starts: it starts there
            saved = self._loader.state_dict()
            saved["epoch"], saved["batch"] = divmod(first, self._loader.batches_per_epoch)
            self._loader.load_state_dict(saved)
        self._queue: queue.Queue = queue.Queue(REFILL_AHEAD)
        # through a weak reference: `Carry(self._next)` made a cycle, which kept a dropped
        # refill (and the batches in its queue) until the next full garbage collection
        me = weakref.ref(self)
        self._carry: Carry[torch.Tensor] = Carry(lambda: _next_of(me))
        self._stop = threading.Event()
        self.waits, self.wait_seconds = 0, 0.0
        # the thread holds the loader, the queue and the event, not the refill: a refill nobody
        # closed is stopped when collected, or at interpreter exit (`core/jobs.py`)
        job = functools.partial(_queue_batches, self._loader, self._queue, self._stop)
        self._job = Job(job, "mixshard-refill")
        self._closer = own(self, _stop_reading, self._stop, self._loader, self._job)
        if skip:
            self._carry.take(skip)

    def numbers(self, positions: np.ndarray) -> np.ndarray:
        """The pack's image number of each image of the stream at `positions` (every batch
        holds `batch` images: the stream drops an epoch's last partial batch)."""
        stream = self._loader.stream
        batch, at = np.divmod(positions, self.batch)
        out = np.empty_like(positions)
        for k in np.unique(batch).tolist():
            rows = batch == k
            out[rows] = stream.batch_index(k)[at[rows]]
        return out

    def _next(self) -> torch.Tensor:
        check_process(self._job.pid, "the pool's refill")
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            self.waits += 1
            t0 = time.perf_counter()
            try:
                return self._wait()
            finally:
                self.wait_seconds += time.perf_counter() - t0

    def _wait(self) -> torch.Tensor:
        while True:
            try:
                return self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set():
                    raise MixshardError("the refill stream of the pool was closed") from None
                if not self._job.alive:  # it put all it read before it ended
                    with contextlib.suppress(queue.Empty):
                        return self._queue.get_nowait()
                    self._job.raise_error()
                    raise MixshardError("the refill stream of the pool ended") from None

    def take(self, m: int) -> list[torch.Tensor]:
        """The next `m` images, as consecutive pieces of the refill's batches (host memory,
        pinned when asked): not copied into one tensor, which would cost a fresh allocation
        and a copy per refill."""
        return self._carry.take(m)

    def close(self) -> None:
        """Stop reading and wait for the reader thread to end."""
        self._closer()


def _next_of(refill: weakref.ref[Refill]) -> torch.Tensor:
    """`refill()._next()`: the refill is alive while its `take` runs."""
    alive = refill()
    if alive is None:
        raise MixshardError("the refill stream of the pool was closed")
    return alive._next()


def _queue_batches(reader: Any, into: queue.Queue, stop: threading.Event) -> None:
    """(The refill's job.) Queue the reader's batches until it ends or `stop` is set."""
    for batch in reader:
        while not stop.is_set():
            try:
                into.put(batch, timeout=0.1)
                break
            except queue.Full:
                continue
        else:
            return


def _stop_reading(stop: threading.Event, reader: Any, job: Job) -> None:
    stop.set()
    reader.close()
    job.join()

"""A pool of pack images on the device, for packs too large to keep whole.

`P` images are resident. Each call draws `n` distinct slots at random; every image is drawn
exactly `uses` times, then its slot is refilled with the next image of the block-order stream
(sequential reads), so the disk only has to deliver `draws / uses` images per second and every
image of the pack enters the pool once per pass. The pool fills over the first calls on a fixed
schedule (`n` images to start, then `ceil(n / uses)` more per call), so the first call does not
wait for `P` images. Refills are read ahead on a background thread (into pinned host memory
for CUDA) and put into the pool while the caller works on: on CUDA copied on a side stream, on
CPU written by a writer thread; the next call's draws wait for them. When the disk falls
behind, a call waits; `stats()` counts those waits.

Draws depend only on the seed and the call sizes, not on timing. Each call also draws the next
call's slots before it returns (for as many images; drawn again if the next call asks for a
different number): right after a blend the first numpy call costs 5-10x, while the code is
warm it does not.
"""

from __future__ import annotations

import math
import queue
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..core.env import rank_world
from ..core.errors import MixshardError
from ..core.manifest import Manifest
from ..reading.remote import is_folder

REFILL_BATCH = 256  # images per refill read
REFILL_AHEAD = 8  # refill batches read ahead
REFILL_WINDOW = 8  # blocks shuffled together in the refill stream (the pool itself shuffles)


class RefillFeed:
    """Images of a pack in block order, endlessly, read ahead on a background thread."""

    def __init__(
        self, source: Any, seed: int, pin: bool, count: int, manifest: Manifest | None = None
    ) -> None:
        """`count`: the images `source` holds (a list of shard URLs may hold part of a pack);
        `manifest`: its manifest, when already read."""
        from ..reading.loading import loader

        batch = max(1, min(REFILL_BATCH, count // rank_world()[1]))  # each rank reads its share
        kwargs: dict[str, Any] = (
            {"order": "block", "window": REFILL_WINDOW} if is_folder(source) else {}
        )
        self._loader = loader(
            source,
            batch,
            num_workers=2,
            infinite=True,
            seed=seed,
            pin_memory=pin,
            manifest=manifest,
            **kwargs,
        )
        self._queue: queue.Queue = queue.Queue(REFILL_AHEAD)
        self._left: torch.Tensor | None = None
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
        parts, have = [], 0
        if self._left is not None:
            parts.append(self._left)
            have = len(self._left)
        while have < m:
            batch = self._next()
            parts.append(batch)
            have += len(batch)
        last = parts[-1]
        keep = len(last) - (have - m)
        self._left = last[keep:] if keep < len(last) else None
        parts[-1] = last[:keep]
        return parts

    def close(self) -> None:
        """Stop reading and wait for the reader thread to end."""
        self._closer()


def _stop_reading(stop: threading.Event, reader: Any, thread: threading.Thread) -> None:
    stop.set()
    reader.close()
    thread.join(timeout=10)


class _Writer:
    """A daemon thread that runs one job at a time off the caller's thread: the CPU pool's
    refills, done while the caller blends. A job's error is raised by every later `wait`."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="mixshard-pool-write")
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                self._error = exc
            finally:
                self._idle.set()

    def submit(self, job: Any) -> None:
        self.wait()
        self._idle.clear()
        self._jobs.put(job)

    def wait(self) -> None:
        """Until the job submitted last has ended; raises what any job raised."""
        self._idle.wait()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Ends the thread once its job has (close the feed first: a job waiting on a closed
        feed ends with an error). Never left running: a thread inside torch at interpreter
        exit aborts the process."""
        self._jobs.put(None)
        self._thread.join(timeout=10)


class PoolCache:
    """See the module docstring.

    Args:
        source: the pack (folder or URLs) and its manifest.
        device: where the pool lives.
        size: images in the pool (`P`).
        uses: draws per image before it is replaced.
        seed: seed of the draws (and of the refill order, unless `feed_seed`).
        feed_seed: seed of the refill order: the same on every DDP rank, which the refill
            stream then splits between the ranks.
        count: the images `source` holds (default: the manifest's count).
    """

    def __init__(
        self,
        source: Any,
        manifest: Manifest,
        device: torch.device,
        size: int,
        uses: int,
        seed: int,
        feed_seed: int | None = None,
        count: int | None = None,
    ) -> None:
        check_pool_args(size, uses)
        count = manifest.count if count is None else count
        self.size, self.uses, self.device = min(size, count), uses, device
        s = manifest.size
        self.images = torch.empty((self.size, 3, s, s), dtype=torch.uint8, device=device)
        self.left = np.zeros(self.size, np.int64)  # draws left per slot
        self.filled = 0  # slots 0 .. filled-1 hold images
        self.rng = np.random.default_rng([seed, 5])
        self.draws = self.entered = self.retired = 0
        self.last_slots = np.zeros(0, np.int64)  # the slots the last call drew, in draw order
        self._side = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._copied: torch.cuda.Event | None = None
        self._writer = _Writer() if self._side is None else None
        # (filled, slots) drawn at the end of a call for the next one, while the code is warm:
        # used when the next call asks for as many (else drawn again); timing never matters
        self._predrawn: tuple[int, np.ndarray] | None = None
        feed_seed = seed if feed_seed is None else feed_seed
        self.feed = RefillFeed(source, feed_seed, device.type == "cuda", count, manifest)
        # at exit too, before the feed's own finalizer (finalizers run newest first)
        self._closer = weakref.finalize(self, _stop_pool, self.feed, self._writer)

    def _put(self, slots: np.ndarray) -> None:
        """Fill `slots` with the next images of the feed: on CPU on the writer thread, on CUDA
        on the side stream, after the draws queued so far. Draws wait for it (`_ready`)."""
        if len(slots) == 0:
            return
        self.left[slots] = self.uses
        self.entered += len(slots)
        if self._side is None:  # CPU
            assert self._writer is not None
            self._writer.submit(lambda: self._write(slots))
            return
        parts = self.feed.take(len(slots))
        with torch.cuda.stream(self._side):
            self._side.wait_stream(torch.cuda.current_stream(self.device))
            for where, part in _by_piece(slots, parts):  # pinned pieces: asynchronous copies
                self.images.index_copy_(
                    0,
                    torch.from_numpy(where).to(self.device, non_blocking=True),
                    part.to(self.device, non_blocking=True),
                )
            self._copied = torch.cuda.Event()
            self._copied.record(self._side)

    def _write(self, slots: np.ndarray) -> None:
        """CPU: the feed's next images into `slots` (numpy's row assignment: 30x torch's CPU
        index_copy_ for rows of 21 KB, measured)."""
        pool = self.images.numpy()
        for where, part in _by_piece(slots, self.feed.take(len(slots))):
            pool[where] = part.numpy()

    def _ready(self) -> None:
        """Until the refills queued so far are in the pool (on CUDA: for this stream)."""
        if self._writer is not None:
            self._writer.wait()
        elif self._copied is not None:
            torch.cuda.current_stream(self.device).wait_event(self._copied)

    def _draw(self, n: int) -> np.ndarray:
        """`n` distinct filled slots, and the bookkeeping of their uses."""
        pre, self._predrawn = self._predrawn, None
        if pre is not None and pre[0] == self.filled and len(pre[1]) == n:
            slots = pre[1]
        else:
            slots = self.rng.choice(self.filled, n, replace=False)
        self.left[slots] -= 1
        self.draws += n
        return slots

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images: distinct ones when `n` <= the pool size."""
        if self.filled < min(n, self.size):  # the first call(s): start with n images
            self._put(np.arange(self.filled, min(n, self.size)))
            self.filled = min(n, self.size)
        parts, drawn = [], []
        for lo in range(0, n, self.filled):
            slots = self._draw(min(self.filled, n - lo))
            drawn.append(slots)
            self._ready()  # refills queued so far (also by the last round)
            parts.append(self.images.index_select(0, torch.from_numpy(slots).to(self.device)))
            spent = slots[self.left[slots] == 0]
            self.retired += len(spent)
            grow = np.arange(self.filled, min(self.size, self.filled + math.ceil(n / self.uses)))
            self.filled += len(grow)
            self._put(np.concatenate([spent, grow]))
        self.last_slots = np.concatenate(drawn)
        m = min(self.filled, n)
        self._predrawn = (self.filled, self.rng.choice(self.filled, m, replace=False))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def stats(self) -> dict[str, Any]:
        """Counters: draws, images that entered / left the pool, waits for the disk."""
        return {
            "mode": "pool",
            "pool": self.size,
            "filled": self.filled,
            "uses": self.uses,
            "draws": self.draws,
            "entered": self.entered,
            "retired": self.retired,
            "uses_per_image": self.draws / self.entered if self.entered else 0.0,
            "waits": self.feed.waits,
            "wait_seconds": round(self.feed.wait_seconds, 3),
        }

    def close(self) -> None:
        """Stop the refills and wait for the threads doing them."""
        self._closer()


def _by_piece(slots: np.ndarray, parts: list[torch.Tensor]) -> Iterator[tuple[np.ndarray, Any]]:
    """`(the slots it fills, piece)` for consecutive pieces that fill `slots` in order."""
    lo = 0
    for part in parts:
        yield slots[lo : lo + len(part)], part
        lo += len(part)


def _stop_pool(feed: RefillFeed, writer: _Writer | None) -> None:
    feed.close()
    if writer is not None:
        writer.close()


def check_pool_args(pool: int | None, uses: int) -> None:
    if pool is not None and pool < 1:
        raise ValueError(f"pool must be >= 1 images, got {pool}")
    if uses < 1:
        raise ValueError(f"uses must be >= 1, got {uses}")


def pool_size(manifest: Manifest, budget: int) -> int:
    """Images a pool may hold in `budget` bytes.

    Raises:
        MixshardError: not even one batch fits.
    """
    size = budget // manifest.image_bytes
    if size < 1:
        raise MixshardError(
            f"no room for a pool: {budget} bytes free for it, one image takes "
            f"{manifest.image_bytes}; free memory or pass pool=N"
        )
    return int(size)

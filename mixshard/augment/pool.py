"""A pool of pack images on the device, for packs too large to keep whole.

`P` images are resident. Each call draws `n` distinct slots at random; every image is drawn
exactly `uses` times, then its slot is refilled with the next image of the block-order stream
(sequential reads, `refill.py`), so the disk only has to deliver `draws / uses` images per
second and every image of the pack enters the pool once per pass. The pool fills over the
first calls on a fixed schedule (`n` images to start, then `ceil(n / uses)` more per call), so
the first call does not wait for `P` images; once full, the draws walk a random permutation of
the slots (each call a uniform random set, every slot once before any twice). Refills are read
ahead on a background thread (into pinned host memory for CUDA) and put into the pool while
the caller works on: on CUDA copied on a side stream, on CPU written by a writer thread; the
next call's draws wait for them. When the disk falls behind, a call waits; `stats()` counts
those waits.

Draws depend only on the seed and the call sizes, not on timing. Each call makes the next
call's draws before it returns (for as many images; drawn again if the next call asks for a
different number). On CPU the writer thread makes them after that call's refills and gathers
their images too, while the caller blends; a call is then left with the bookkeeping of uses.
What the writer does holds the GIL as little as it can (torch's copies, no numpy draw per
call): whatever it holds, the caller's blend waits for between its ops.
"""

from __future__ import annotations

import math
import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..core.errors import MixshardError
from ..core.manifest import Manifest
from .refill import RefillFeed

_WORDS = (torch.int64, torch.int32, torch.int16, torch.uint8)


class _Writer:
    """A daemon thread that runs one job at a time off the caller's thread: the CPU pool's
    refills and the next call's draws, done while the caller blends. A job's error is raised
    by every later `wait`."""

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
        self._perm, self._cursor = np.zeros(0, np.int64), 0  # a full pool's draws (`_slots`)
        self.draws = self.entered = self.retired = 0
        self.last_slots = np.zeros(0, np.int64)  # the slots the last call drew, in draw order
        self._side = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._copied: torch.cuda.Event | None = None
        self._writer = _Writer() if self._side is None else None
        self._writes: list[np.ndarray] = []  # CPU: slots to refill, not yet given the writer
        # CPU refills go through a view of each image as words of the widest integer type
        # that divides it: torch's CPU index_put_ costs per element (4x less in int64 than uint8)
        self._word = next(d for d in _WORDS if manifest.image_bytes % d.itemsize == 0)
        self._buffers: list[torch.Tensor] = []  # CPU: the two the next calls' images alternate in
        # (filled, slots, their images or None) drawn at the end of a call for the next one:
        # used when the next call asks for as many (else drawn again); timing never matters
        self._predrawn: tuple[int, np.ndarray, torch.Tensor | None] | None = None
        feed_seed = seed if feed_seed is None else feed_seed
        self.feed = RefillFeed(source, feed_seed, device.type == "cuda", count, manifest)
        # at exit too, before the feed's own finalizer (finalizers run newest first)
        self._closer = weakref.finalize(self, _stop_pool, self.feed, self._writer)

    def _put(self, slots: np.ndarray) -> None:
        """Fill `slots` with the next images of the feed: on CPU by the writer thread's next
        job, on CUDA on the side stream, after the draws queued so far. Draws wait for it
        (`_ready`)."""
        if len(slots) == 0:
            return
        self.left[slots] = self.uses
        self.entered += len(slots)
        if self._side is None:  # CPU
            self._writes.append(slots)
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

    def _write(self, writes: list[np.ndarray]) -> None:
        """CPU: the feed's next images into the slots `writes`, with torch's index_put_: it
        lets go of the GIL while it copies, so the caller's blend is not kept waiting for it
        (numpy's row assignment keeps it)."""
        if not writes:
            return
        slots = writes[0] if len(writes) == 1 else np.concatenate(writes)
        pool = self._words(self.images)
        for where, part in _by_piece(slots, self.feed.take(len(slots))):
            pool.index_put_((torch.from_numpy(where),), self._words(part))

    def _words(self, images: torch.Tensor) -> torch.Tensor:
        return images.view(len(images), -1).view(self._word)

    def _ready(self) -> None:
        """Until the refills queued so far are in the pool (on CUDA: for this stream), and the
        draws made ahead are made."""
        if self._writer is not None:
            if self._writes:
                writes, self._writes = self._writes, []
                self._writer.submit(lambda: self._write(writes))
            self._writer.wait()
        elif self._copied is not None:
            torch.cuda.current_stream(self.device).wait_event(self._copied)

    def _slots(self, filled: int, m: int) -> np.ndarray:
        """`m` distinct slots out of the first `filled`. While the pool fills, a fresh draw per
        call; once it is full, consecutive pieces of a random permutation of the slots (a new
        one when fewer than `m` are left): each call is still a uniform random set, drawn for
        the cost of a slice (a `choice` beside a blend holds the GIL for ~250 µs)."""
        if filled < self.size:
            return self.rng.choice(filled, m, replace=False)
        if self._cursor + m > len(self._perm):
            self._perm, self._cursor = self.rng.permutation(self.size), 0
        self._cursor += m
        return self._perm[self._cursor - m : self._cursor]

    def _predraw(self, filled: int, m: int, gather: bool) -> None:
        """The next call's `m` slots out of `filled`; with `gather`, their images too, into
        the buffer the last call did not hand out."""
        slots = self._slots(filled, m)
        images = None
        if gather:
            self._buffers.reverse()
            if not self._buffers or len(self._buffers[0]) != m:
                self._buffers = [torch.empty_like(self.images[:m]) for _ in range(2)]
            index = torch.from_numpy(slots)
            images = torch.index_select(self.images, 0, index, out=self._buffers[0])
        self._predrawn = (filled, slots, images)

    def _draw(self, n: int) -> tuple[np.ndarray, torch.Tensor, bool]:
        """`n` distinct filled slots, their images, whether those are in a buffer used again
        by the call after next; and the bookkeeping of their uses."""
        pre, self._predrawn = self._predrawn, None
        if pre is not None and pre[0] == self.filled and len(pre[1]) == n:
            slots, images = pre[1], pre[2]
        else:
            slots, images = self._slots(self.filled, n), None
        lent = images is not None
        if images is None:
            images = self.images.index_select(0, torch.from_numpy(slots).to(self.device))
        self.left[slots] -= 1
        self.draws += n
        return slots, images, lent

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images: distinct ones when `n` <= the pool size. With `own=False` they may be
        a buffer used again by the call after next."""
        if self.filled < min(n, self.size):  # the first call(s): start with n images
            self._put(np.arange(self.filled, min(n, self.size)))
            self.filled = min(n, self.size)
        parts, drawn = [], []
        for lo in range(0, n, self.filled):
            self._ready()  # refills queued so far (also by the last round), draws made ahead
            slots, images, lent = self._draw(min(self.filled, n - lo))
            drawn.append(slots)
            parts.append(images.clone() if lent and own else images)
            spent = slots[self.left[slots] == 0]
            self.retired += len(spent)
            grow = np.arange(self.filled, min(self.size, self.filled + math.ceil(n / self.uses)))
            self.filled += len(grow)
            self._put(np.concatenate([spent, grow]))
        self.last_slots = np.concatenate(drawn)
        filled, m = self.filled, min(self.filled, n)
        if self._writer is None:  # CUDA: the gather is queued on the device by the next call
            self._predraw(filled, m, gather=False)
        else:  # CPU: the refills, then the next draws and their images, while the caller works
            writes, self._writes = self._writes, []

            def job() -> None:
                self._write(writes)
                self._predraw(filled, m, gather=True)

            self._writer.submit(job)
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

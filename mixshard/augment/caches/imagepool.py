"""A pool of pack images on the device, for packs too large to keep whole.

`P` images are resident, each drawn exactly `uses` times and then refilled from the block-order
stream (`refill.py`), as docs/design.md describes; every image of the pack enters once a pass.
The pool fills on a fixed schedule (`n` images to start, then `ceil(n / uses)` more a call).
Refills are read ahead on a thread (into pinned host memory for CUDA) and put in as jobs of the
device's lane (`core/device.py`: a side stream on CUDA, a writer thread on a CPU); the next
call's draws wait for them (a fence), and `stats()` counts the waits for a disk behind.

Draws depend only on the seed and the call sizes, not on timing or the device. Each call
queues, after its refills, the next call's draws and the gather of their images into one of two
buffers that alternate (for as many images; drawn again if the next call asks for a different
number), so a call is left with the bookkeeping of uses. The same algorithm runs on every
device; only how a job is queued and waited for differs. On a CPU what the writer does holds
the GIL as little as it can (torch's copies, no numpy draw per call): whatever it holds, the
caller's blend waits for between its ops. No call makes a blocking host-device copy: indices
reach the device through pinned staging memory, asynchronously.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import torch

from ...core.device import Fence, Lane, host_empty, move, move_index, wants_pinned
from ...core.jobs import own
from ...reading.buffers import read_images_into
from ...reading.source import Source
from .pieces import PermutationWalk
from .refill import Refill

_WORDS = (torch.int64, torch.int32, torch.int16, torch.uint8)
MAX_RUNS = 64  # runs of call sizes a pool's state keeps (8-12 bytes each)


class ImagePool:
    """See the module docstring.

    Args:
        source: the pack (a folder or a store), resolved.
        device: where the pool lives.
        size: images in the pool (`P`), >= 1.
        uses: draws per image before it is replaced, >= 1 (`Overlay` checks both: `checks.py`).
        seed: seed of the draws (and of the refill order, unless `refill_seed`).
        refill_seed: seed of the refill order: the same on every DDP rank, which the refill
            stream then splits between the ranks.
        calls: a loaded state's calls (`state_dict`): the pool continues after them.
    """

    def __init__(
        self,
        source: Source,
        device: torch.device,
        size: int,
        uses: int,
        seed: int,
        refill_seed: int | None = None,
        calls: list[list[int]] | None = None,
    ) -> None:
        manifest = source.manifest
        self._setup(min(size, source.count), uses, device, seed)
        s = manifest.size
        self.images = torch.empty((self.size, 3, s, s), dtype=torch.uint8, device=device)
        self.lane = Lane(device, "mixshard-pool-write")
        # refills go through a view of each image as words of the widest integer type that
        # divides it: torch's CPU index_put_ costs per element (4x less in int64 than uint8)
        self.word = next(d for d in _WORDS if manifest.image_bytes % d.itemsize == 0)
        replay = None if not calls else self._replay(calls, seed)
        refill_seed = seed if refill_seed is None else refill_seed
        start = 0 if replay is None else replay.entered  # (images the replay wrote)
        self.refill = Refill(source, refill_seed, wants_pinned(device), start)
        # at exit too, before the refill's own finalizer (finalizers run newest first)
        self._closer = own(self, _stop_pool, self.refill, self.lane)
        if replay is not None:
            try:
                self._continue(replay, source)
            except BaseException:
                self.close()
                raise

    def _setup(self, size: int, uses: int, device: torch.device, seed: int) -> None:
        """The bookkeeping of a pool of `size` slots (no images, no refill)."""
        self.size, self.uses, self.device = size, uses, device
        self.left = np.zeros(self.size, np.int64)  # draws left per slot
        self.filled = 0  # slots 0 .. filled-1 hold images
        self.rng = np.random.default_rng([seed, 5])
        # a full pool's draws: pieces of permutations of its slots
        # (a bound method, not a lambda over self: that made a cycle, so a dropped pool kept
        # its images until the next full garbage collection, ~23 MB a pool)
        self._walk = PermutationWalk(self.size, partial(self.rng.permutation, self.size), True)
        self.draws = self.entered = self.retired = 0
        self.last_slots = np.zeros(0, np.int64)  # the slots the last call drew, in draw order
        self._fence: Fence | None = None  # of the job queued last
        self._writes: list[np.ndarray] = []  # slots to refill, not yet queued
        self._buffers: list[torch.Tensor] = []  # the two the next calls' images alternate in
        # (filled, slots, their images) drawn at the end of a call for the next one: used
        # when the next call asks for as many (else drawn again); timing never matters
        self._predrawn: tuple[int, np.ndarray, torch.Tensor] | None = None
        self.calls: list[list[int]] = []  # the calls' sizes, as runs of [n, times]

    def _replay(self, calls: list[list[int]], seed: int) -> ImagePool:
        """A pool without images that makes `calls`: its every slot's "image" is the position
        in the refill stream of the image there (`_Positions`), its lane runs jobs inline. The
        same code as the pool's own, so the same bookkeeping, for the cost of the calls'
        bookkeeping alone (tens of µs a call)."""
        replay = ImagePool.__new__(ImagePool)
        replay._setup(self.size, self.uses, torch.device("cpu"), seed)
        replay.images = torch.zeros((self.size, 1), dtype=torch.int64)
        replay.word, replay.refill = torch.int64, _Positions()  # type: ignore[assignment]
        replay.lane = Lane(torch.device("cpu"), threaded=False)
        for n, times in calls:
            for _ in range(times):
                replay.take(n)
        replay.wait()
        return replay

    def _continue(self, replay: ImagePool, source: Source) -> None:
        """Where `replay` is: its bookkeeping, draws and next draws, and in each slot the
        image of the refill stream it holds, read from the pack."""
        self.left[:], self.filled, self.calls = replay.left, replay.filled, replay.calls
        self.draws, self.entered, self.retired = replay.draws, replay.entered, replay.retired
        self.rng.bit_generator.state = replay.rng.bit_generator.state
        self._walk.restart(replay._walk.perm, replay._walk.cursor)
        self.last_slots = replay.last_slots
        positions = replay.images[: self.filled, 0].numpy()
        read_images_to(source, self.refill.numbers(positions), self.images)
        if replay._predrawn is not None:
            filled, slots, _ = replay._predrawn
            self._buffers = [torch.empty_like(self.images[: len(slots)]) for _ in range(2)]
            index = move_index(slots, self.device)
            images = torch.index_select(self.images, 0, index, out=self._buffers[0])
            self._predrawn = (filled, slots, images)

    def state_dict(self) -> dict[str, Any]:
        """The calls' sizes (runs of `[n, times]`): a pool continues by making them again
        without images, then reading in the images its slots hold (`_replay`).

        Raises:
            ValueError: the call sizes changed more than `MAX_RUNS` times (the state would
                pass 4 KB).
        """
        if len(self.calls) > MAX_RUNS:
            raise ValueError(
                f"state_dict: a pool's state is its calls' sizes, which changed "
                f"{len(self.calls)} times (at most {MAX_RUNS} keep it under 4 KB); call it "
                f"with one batch size, or use cache='device' or cache='stream'"
            )
        return {"calls": [list(c) for c in self.calls], "draws": self.draws}

    def _put(self, slots: np.ndarray) -> None:
        """Mark `slots` for the refill's next images; they are written by the next job queued
        (`wait` or the end of the call), after the draws queued so far."""
        if len(slots) == 0:
            return
        self.left[slots] = self.uses
        self.entered += len(slots)
        self._writes.append(slots)

    def _write(self, writes: list[np.ndarray]) -> None:
        """(A lane job.) The refill's next images into the slots `writes`, with torch's
        index_put_ on word views: on a CPU it lets go of the GIL while it copies, so the
        caller's blend is not kept waiting for it (numpy's row assignment keeps it)."""
        if not writes:
            return
        slots = writes[0] if len(writes) == 1 else np.concatenate(writes)
        pool = self._words(self.images)
        for where, part in _by_piece(slots, self.refill.take(len(slots))):
            index = move_index(where, self.device)
            pool.index_put_((index,), self._words(move(part, self.device)))

    def _words(self, images: torch.Tensor) -> torch.Tensor:
        return images.view(len(images), -1).view(self.word)

    def wait(self) -> None:
        """Until the refills marked so far are in the pool and the draws made ahead are made
        (on CUDA: for the work queued on the current stream from now on)."""
        if self._writes:
            writes, self._writes = self._writes, []
            self._fence = self.lane.submit(lambda: self._write(writes))
        self.lane.wait(self._fence)

    def _slots(self, filled: int, m: int) -> np.ndarray:
        """`m` distinct slots out of the first `filled`. While the pool fills, a fresh draw per
        call; once it is full, consecutive pieces of a random permutation of the slots: each
        call is still a uniform random set, drawn for the cost of a slice (a `choice` beside a
        blend holds the GIL for ~250 µs)."""
        if filled < self.size:
            return self.rng.choice(filled, m, replace=False)
        return self._walk.take(m)[0]

    def _predraw(self, filled: int, m: int) -> None:
        """(A lane job.) The next call's `m` slots out of `filled`, and their images, into the
        buffer the last call did not hand out."""
        slots = self._slots(filled, m)
        self._buffers.reverse()
        index = move_index(slots, self.device)
        images = torch.index_select(self.images, 0, index, out=self._buffers[0])
        self._predrawn = (filled, slots, images)

    def _draw(self, n: int) -> tuple[np.ndarray, torch.Tensor, bool]:
        """`n` distinct filled slots, their images, whether those are in a buffer used again
        by the call after next; and the bookkeeping of their uses."""
        pre, self._predrawn = self._predrawn, None
        if pre is not None and pre[0] == self.filled and len(pre[1]) == n:
            slots, images, lent = pre[1], pre[2], True
        else:
            slots = self._slots(self.filled, n)
            images, lent = self.images.index_select(0, move_index(slots, self.device)), False
        self.left[slots] -= 1
        self.draws += n
        return slots, images, lent

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images: distinct ones when `n` <= the pool size. With `own=False` they may be
        a buffer used again by the call after next."""
        if self.calls and self.calls[-1][0] == n:
            self.calls[-1][1] += 1
        else:
            self.calls.append([n, 1])
        if self.filled < min(n, self.size):  # the first call(s): start with n images
            self._put(np.arange(self.filled, min(n, self.size)))
            self.filled = min(n, self.size)
        parts, drawn = [], []
        for lo in range(0, n, self.filled):
            self.wait()  # refills queued so far (also by the last round), draws made ahead
            slots, images, lent = self._draw(min(self.filled, n - lo))
            drawn.append(slots)
            parts.append(images.clone() if lent and own else images)
            spent = slots[self.left[slots] == 0]
            self.retired += len(spent)
            grow = np.arange(self.filled, min(self.size, self.filled + math.ceil(n / self.uses)))
            self.filled += len(grow)
            self._put(np.concatenate([spent, grow]))
        self.last_slots = np.concatenate(drawn)
        # the refills, then the next call's draws and their images, while the caller works
        writes, self._writes = self._writes, []
        filled, m = self.filled, min(self.filled, n)

        if not self._buffers or len(self._buffers[0]) != m:
            # made here, not in the job: on CUDA a buffer the caller's stream reads must come
            # from its own pool, not the side stream's (which could hand it out again early)
            self._buffers = [torch.empty_like(self.images[:m]) for _ in range(2)]

        def job() -> None:
            self._write(writes)
            self._predraw(filled, m)

        self._fence = self.lane.submit(job)
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
            "waits": self.refill.waits,
            "wait_seconds": round(self.refill.wait_seconds, 3),
        }

    def close(self) -> None:
        """Stop the refills and wait for the threads doing them."""
        self._closer()


class _Positions:
    """A replay's refill: each "image" is its position in the stream (int64 `(m, 1)`)."""

    def __init__(self) -> None:
        self.at = 0

    def take(self, m: int) -> list[torch.Tensor]:
        self.at += m
        return [torch.arange(self.at - m, self.at).view(m, 1)]


def read_images_to(source: Source, numbers: np.ndarray, images: torch.Tensor) -> None:
    """The pack's images `numbers` into `images[:len(numbers)]`, in chunks of bounded host
    memory (`buffers.read_images_into`).

    Raises:
        MixshardError: one lies in a damaged block.
    """
    m = source.manifest
    host = host_empty((min(len(numbers), 1024), 3, m.size, m.size), torch.uint8, False)
    pack = source.open_pack()
    try:
        for lo in range(0, len(numbers), 1024):
            part = numbers[lo : lo + 1024]
            damaged = f"a pool's image lies in a damaged block of {m.origin}"
            read_images_into(pack, part, host, damaged)
            images[lo : lo + len(part)].copy_(host[: len(part)])
    finally:
        pack.close()


def _by_piece(slots: np.ndarray, parts: list[torch.Tensor]) -> Iterator[tuple[np.ndarray, Any]]:
    """`(the slots it fills, piece)` for consecutive pieces that fill `slots` in order."""
    lo = 0
    for part in parts:
        yield slots[lo : lo + len(part)], part
        lo += len(part)


def _stop_pool(refill: Refill, lane: Lane) -> None:
    refill.close()  # first: a job waiting on a closed refill ends with an error
    lane.close()

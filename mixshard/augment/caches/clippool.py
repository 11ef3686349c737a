"""A pool of whole clips on the device, for clip packs too large to keep whole (`Backgrounds`).

The pool has `slots` slots of the longest clip's length each. An environment's current clip
sits in a slot from its reset until its next reset (a slot is shared by the environments that
play the same clip). Because every draw is a pure function of `(seed, environment, episode)`,
each environment's *next* clip is known as soon as it resets: the pool reads it ahead, on a
thread of its own (`ReadAhead`: sequential reads of the clip's frames, consecutive in the
pack), and puts it in a free slot at the next call, so the reset that needs it finds it there. A
reset waits for the disk only when the clip it draws is not in the pool yet: its read ahead has
not finished (two resets of one environment in quick succession), or there was no free slot to
read it into (a pool barely larger than the clips in use). `stats()` counts those waits. Free
slots are reused least recently used first, never while an environment plays their clip or
another's next episode is to play it.

The bookkeeping keeps one invariant: `slot_of[c] == s` exactly when `clip_of[s] == c`, so a clip
is in at most one slot, and every slot an environment is given holds its clip. `acquire` is all
or nothing: it gives the environments that reset their new slots and takes back their old ones
only once every new clip is in; a read that fails leaves the pool as it was (the slots it read
into hold clips nobody plays).
"""

from __future__ import annotations

import functools
import queue
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ...core.device import host_empty, move, wants_pinned
from ...core.errors import MixshardError
from ...core.jobs import Job, check_process, own
from ...reading.buffers import read_images_into
from ...reading.source import Source

Read = Callable[[int], torch.Tensor]  # a clip's frames in host memory


class ReadAhead:
    """Reads clips on a thread of its own, in the order asked: `ask(clip)`, then `take()` a
    finished read `(clip, frames or the error that read raised)`. A failed read is handed
    over like a finished one, so a clip read ahead that turns out damaged fails the reset
    that needs it, not the reader."""

    def __init__(self, read: Read) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._job = Job(_read_loop(self._requests, self._done, read), "mixshard-clip-reader")

    def ask(self, clip: int) -> None:
        self._requests.put(clip)

    def take(self, block: bool) -> tuple[int, torch.Tensor | BaseException] | None:
        """A finished read, or None when none is finished (`block`: wait for one)."""
        check_process(self._job.pid, "the clip pool's reader")
        while True:
            try:
                return self._done.get(timeout=0.1) if block else self._done.get_nowait()
            except queue.Empty:
                if not block:
                    return None
                if not self._job.alive:  # (it ends only when closed, or by a bug: say so)
                    self._job.raise_error()
                    raise MixshardError("the clip pool's reader ended") from None

    def close(self) -> None:
        self._requests.put(None)
        self._job.join()


def _read_loop(requests: queue.Queue, done: queue.Queue, read: Read) -> Callable[[], None]:
    # the thread holds these, not the pool: a pool nobody closed is still collected
    def run() -> None:
        while (clip := requests.get()) is not None:
            try:
                done.put((clip, read(clip)))
            except Exception as exc:  # noqa: BLE001 - handed to the reset that needs the clip
                done.put((clip, exc))

    return run


class ClipPool:
    """See the module docstring.

    Args:
        source: the pack (a folder or a store), resolved; or the packs of a mix.
        device: where the slots live.
        slots: clips the pool holds.
        first: each clip's first frame (pack image number); for a mix, `(first, pack)`: the
            first frame in its pack, and which pack.
        length: each clip's frame count.
    """

    def __init__(
        self,
        source: Source | list[Source],
        device: torch.device,
        slots: int,
        first: np.ndarray | tuple[np.ndarray, np.ndarray],
        length: np.ndarray,
    ) -> None:
        sources = source if isinstance(source, list) else [source]
        first, pack_of = first if isinstance(first, tuple) else (first, np.zeros_like(first))
        m = sources[0].manifest
        self.device, self.first, self.length, self.pack_of = device, first, length, pack_of
        self.span = int(length.max())  # frames per slot
        self.slots = slots
        self.frames = torch.empty(
            (slots * self.span, 3, m.size, m.size), dtype=torch.uint8, device=device
        )
        self.clip_of = np.full(slots, -1, np.int64)  # the clip in each slot
        self.slot_of = np.full(len(first), -1, np.int64)  # the slot of each clip, or -1
        self.users = np.zeros(slots, np.int64)  # environments playing each slot's clip
        self.used = np.zeros(slots, np.int64)  # when each slot was last given out
        self.clock = 0
        self.wanted = np.zeros(len(first), np.int64)  # environments whose next episode plays it
        self.loads = self.waits = self.dropped = 0
        self.wait_seconds = 0.0
        self._pin = wants_pinned(device)
        self._packs = [s.open_pack() for s in sources]
        self._asked = np.zeros(len(first), bool)  # read ahead, not yet taken
        self._pending: dict[int, int] = {}  # clips `acquire` is placing -> their environments
        self._held: dict[int, torch.Tensor] = {}  # and those of them read, with no slot yet
        self._reads = ReadAhead(self._read)
        self._closer = own(self, _close, self._reads, self._packs)

    @property
    def _read(self) -> Read:
        where = (self.first, self.length, self.pack_of)
        return functools.partial(_read_clip, self._packs, where, self._pin)

    def base(self, slots: np.ndarray) -> np.ndarray:
        """The frame number in `frames` of each slot's first frame."""
        return slots * self.span

    def acquire(self, clips: np.ndarray, release: np.ndarray | None = None) -> np.ndarray:
        """The slot of each clip (one per environment that starts playing it), read in first
        where it is missing (a wait: counted); then `release` (the slots those environments
        played) is given back. All or nothing: when a read fails, no slot is taken or given
        back and the error is raised."""
        self._drain()
        missing, counts = np.unique(clips[self.slot_of[clips] < 0], return_counts=True)
        held = self.slot_of[clips[self.slot_of[clips] >= 0]]
        np.add.at(self.users, held, 1)  # now never evicted
        self._pending = dict(zip(missing.tolist(), counts.tolist()))
        try:
            self._bring_in(missing)
        except BaseException:
            np.subtract.at(self.users, held, 1)
            for clip, count in zip(missing.tolist(), counts.tolist()):
                if clip not in self._pending:  # placed: it was counted as played
                    self.users[self.slot_of[clip]] -= count
            self._pending, self._held = {}, {}
            raise
        if release is not None:
            np.subtract.at(self.users, release, 1)
        try:
            for clip, host in self._held.items():  # no slot was free before the release
                self._place(clip, host, needed=True, count=self._pending.pop(clip))
        finally:
            self._pending, self._held = {}, {}
        slots = self.slot_of[clips]
        self.clock += 1
        self.used[slots] = self.clock
        return slots

    def _bring_in(self, missing: np.ndarray) -> None:
        """Every missing clip into a slot, waiting for its read ahead or reading it; where no
        slot is free yet, its frames are kept in `_held` for after the release."""
        for clip in missing.tolist():
            if clip not in self._pending:  # placed meanwhile, as another's read ahead came in
                continue
            self.waits += 1
            t0 = time.perf_counter()
            try:
                while clip in self._pending and self._asked[clip]:
                    self._drain(block=True)
                if clip in self._pending and clip not in self._held:
                    host = self._read(clip)
                    if self._place(clip, host, needed=True, count=None) < 0:
                        self._held[clip] = host
            finally:
                self.wait_seconds += time.perf_counter() - t0

    def want(self, clips: np.ndarray, add: int) -> None:
        """Count (`add=1`) or uncount (`-1`) clips as some environments' next clips; a clip
        newly wanted and not in the pool is read ahead."""
        np.add.at(self.wanted, clips, add)
        if add > 0:
            new = np.unique(clips[(self.slot_of[clips] < 0) & ~self._asked[clips]])
            self._asked[new] = True
            for clip in new.tolist():
                self._reads.ask(clip)

    def forget_wanted(self) -> None:
        """No clip is anyone's next any more (a state is being loaded)."""
        self.wanted[:] = 0

    def _drain(self, block: bool = False) -> None:
        """Put clips read ahead into free slots (one, waiting for it, when `block`). A clip
        `acquire` is placing goes in first; its failed read is raised."""
        while (done := self._reads.take(block)) is not None:
            block = False
            clip, host = done
            self._asked[clip] = False
            if isinstance(host, BaseException):
                if clip in self._pending:
                    raise host
                continue  # read again (and raised) by the reset that draws it, if any
            if self.slot_of[clip] >= 0:
                continue
            needed = clip in self._pending
            if self._place(clip, host, needed=needed, count=None) < 0 and needed:
                self._held[clip] = host

    def _place(self, clip: int, host: torch.Tensor, needed: bool, count: int | None) -> int:
        """Copy a clip into the least recently used free slot, counted as played by `count`
        environments (None: those `acquire` is placing it for). -1 when no slot is free: a
        clip read ahead is dropped (read again at its reset); a needed one waits for the
        release (`acquire`)."""
        unused = self.users == 0
        free = unused.copy()
        free[self.slot_of[(self.wanted > 0) & (self.slot_of >= 0)]] = False
        if not free.any() and needed:  # a clip needed now goes before one wanted later
            free = unused
        if not free.any():
            if needed and count is not None:
                # (not met with `slots >= min(num_envs, clips)`, which `Backgrounds` checks:
                # a reset frees its environments' slots before it places the last clips)
                raise MixshardError(
                    f"the clip pool is full: its {self.slots} slots all hold clips environments "
                    f"play; pass a larger pool= (at least the number of environments, or clips)"
                )
            self.dropped += not needed
            return -1
        slot = int(np.flatnonzero(free)[np.argmin(self.used[free])])
        old = int(self.clip_of[slot])
        if old >= 0:
            self.slot_of[old] = -1
        lo = slot * self.span
        self.frames[lo : lo + len(host)].copy_(move(host, self.device))
        self.clip_of[slot], self.slot_of[clip] = clip, slot
        self.users[slot] += self._pending.pop(clip, 0) if count is None else count
        self.loads += 1
        return slot

    def stats(self) -> dict[str, Any]:
        """Counters: slots, clips read in, resets that waited for the disk, reads ahead
        dropped for want of a free slot."""
        return {
            "mode": "pool",
            "slots": self.slots,
            "loads": self.loads,
            "waits": self.waits,
            "wait_seconds": round(self.wait_seconds, 3),
            "dropped": self.dropped,
        }

    def close(self) -> None:
        """Stop the reader thread and close the pack."""
        self._closer()


def _close(reads: ReadAhead, packs: list[Any]) -> None:
    reads.close()
    for pack in packs:
        pack.close()


def _read_clip(
    packs: list[Any], where: tuple[np.ndarray, np.ndarray, np.ndarray], pin: bool, clip: int
) -> torch.Tensor:
    """Clip `clip`'s frames in host memory (pinned for CUDA): consecutive pack images, so
    sequential reads (`buffers.read_images_into`). `where`: each clip's first frame, length
    and pack."""
    first, length, pack_of = where
    start, count, pack = int(first[clip]), int(length[clip]), packs[int(pack_of[clip])]
    m = pack.manifest
    host = host_empty((count, 3, m.size, m.size), torch.uint8, pin)
    damaged = f"clip {clip} of {m.origin} has frames in a damaged block"
    read_images_into(pack, np.arange(start, start + count), host, damaged)
    return host

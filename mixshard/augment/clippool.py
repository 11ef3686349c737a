"""A pool of whole clips on the device, for clip packs too large to keep whole (`Backgrounds`).

The pool has `slots` slots of the longest clip's length each. An environment's current clip
sits in a slot from its reset until its next reset (a slot is shared by the environments that
play the same clip). Because every draw is a pure function of `(seed, environment, episode)`,
each environment's *next* clip is known as soon as it resets: the pool reads it ahead, on a
thread of its own (sequential reads of the clip's frames, consecutive in the pack), and puts it
in a free slot at the next call, so the reset that needs it finds it there. A reset waits for
the disk only when the clip it draws is not in the pool yet: its read ahead has not finished
(two resets of one environment in quick succession), or there was no free slot to read it into
(a pool barely larger than the clips in use). `stats()` counts those waits. Free slots are
reused least recently used first, never while an environment plays their clip or another's next
episode is to play it.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from typing import Any

import numpy as np
import torch

from ..core.device import host_empty, move, wants_pinned
from ..core.errors import MixshardError
from ..core.jobs import Job, check_process, own
from ..reading.source import Source


def pool_slots(pool: int | None, budget: int, clip_bytes: int, envs: int, clips: int) -> int:
    """Clips a pool holds: `pool`, else as many as `budget` bytes hold, at most `clips`; an
    error when fewer than the `envs` environments may play at once."""
    slots = pool if pool is not None else budget // clip_bytes
    least = min(envs, clips)
    if slots < least:
        raise MixshardError(
            f"no room for a pool of clips: {slots} clips of {clip_bytes} bytes fit, "
            f"{envs} environments may play {least} at once; free memory, raise "
            f"cache_fraction or pass pool=N (N >= {least})"
        )
    return min(slots, clips)


class ClipPool:
    """See the module docstring.

    Args:
        source: the pack (a folder or a store), resolved.
        device: where the slots live.
        slots: clips the pool holds.
        first, length: each clip's first frame (pack image number) and frame count.
    """

    def __init__(
        self,
        source: Source,
        device: torch.device,
        slots: int,
        first: np.ndarray,
        length: np.ndarray,
    ) -> None:
        if not source.is_folder:
            raise ValueError(
                "cache='pool' reads clips by byte offset: pass a pack folder or a store URL, "
                "not shard URLs (or use cache='device')"
            )
        m = source.manifest
        self.device, self.first, self.length = device, first, length
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
        self._pack = source.open_pack()
        self._requests: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._asked = np.zeros(len(first), bool)  # read ahead, not yet put in a slot
        self._stop = threading.Event()
        self._job = Job(self._reader_loop(), "mixshard-clip-reader")
        self._closer = own(self, _stop_reader, self._stop, self._requests, self._job, self._pack)

    def _reader_loop(self) -> Any:
        # the thread holds these, not the pool: a pool nobody closed is still collected
        requests, done, stop, read = self._requests, self._done, self._stop, self._read

        def run() -> None:
            while not stop.is_set():
                clip = requests.get()
                if clip is None:
                    return
                done.put((clip, read(clip)))

        return run

    @property
    def _read(self) -> Any:
        return functools.partial(_read_clip, self._pack, self.first, self.length, self._pin)

    def base(self, slots: np.ndarray) -> np.ndarray:
        """The frame number in `frames` of each slot's first frame."""
        return slots * self.span

    def acquire(self, clips: np.ndarray) -> np.ndarray:
        """The slot of each clip (one per environment that starts playing it), read in first
        where it is missing (a wait: counted). Array operations, but a read per missing clip."""
        self._drain(block=False)
        present = self.slot_of[clips] >= 0
        np.add.at(self.users, self.slot_of[clips[present]], 1)  # now never evicted
        missing, counts = np.unique(clips[~present], return_counts=True)
        for clip, count in zip(missing.tolist(), counts.tolist()):
            self.users[self._wait_for(clip)] += count
        slots = self.slot_of[clips]
        self.clock += 1
        self.used[slots] = self.clock
        return slots

    def release(self, slots: np.ndarray) -> None:
        """Environments stop playing these slots' clips."""
        np.subtract.at(self.users, slots, 1)

    def want(self, clips: np.ndarray, add: int) -> None:
        """Count (`add=1`) or uncount (`-1`) clips as some environments' next clips; a clip
        newly wanted and not in the pool is read ahead."""
        np.add.at(self.wanted, clips, add)
        if add > 0:
            new = np.unique(clips[(self.slot_of[clips] < 0) & ~self._asked[clips]])
            self._asked[new] = True
            for clip in new.tolist():
                self._requests.put(clip)

    def forget_wanted(self) -> None:
        """No clip is anyone's next any more (a state is being loaded)."""
        self.wanted[:] = 0

    def _wait_for(self, clip: int) -> int:
        self.waits += 1
        t0 = time.perf_counter()
        try:
            while self._asked[clip]:  # being read ahead: wait for it
                self._drain(block=True)
                if self.slot_of[clip] >= 0:
                    return int(self.slot_of[clip])
            return self._place(clip, self._read(clip), needed=True)
        finally:
            self.wait_seconds += time.perf_counter() - t0

    def _drain(self, block: bool) -> None:
        """Put clips read ahead into free slots (one, waiting for it, when `block`)."""
        check_process(self._job.pid, "the clip pool's reader")
        while True:
            try:
                clip, host = self._done.get(timeout=0.1) if block else self._done.get_nowait()
            except queue.Empty:
                if block and self._job.alive:
                    continue
                if block:
                    self._job.raise_error()
                    raise MixshardError("the clip pool's reader ended") from None
                return
            self._asked[clip] = False
            if self.slot_of[clip] < 0:
                self._place(clip, host, needed=False)
            block = False

    def _place(self, clip: int, host: torch.Tensor, needed: bool) -> int:
        """Copy a clip into the least recently used free slot; -1 when none is free and it is
        only read ahead (dropped: read again at its reset)."""
        unused = self.users == 0
        free = unused.copy()
        free[self.slot_of[(self.wanted > 0) & (self.slot_of >= 0)]] = False
        if not free.any() and needed:  # a clip needed now goes before one wanted later
            free = unused
        if not free.any():
            if not needed:
                self.dropped += 1
                return -1
            # (not met with `slots >= min(num_envs, clips)`, which `Backgrounds` checks: a
            # reset frees its environments' slots before it takes new ones)
            raise MixshardError(
                f"the clip pool is full: its {self.slots} slots all hold clips environments "
                f"play; pass a larger pool= (at least the number of environments, or of clips)"
            )
        slot = int(np.flatnonzero(free)[np.argmin(self.used[free])])
        old = int(self.clip_of[slot])
        if old >= 0:
            self.slot_of[old] = -1
        lo = slot * self.span
        self.frames[lo : lo + len(host)].copy_(move(host, self.device))
        self.clip_of[slot], self.slot_of[clip] = clip, slot
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


def _stop_reader(stop: threading.Event, requests: queue.Queue, job: Job, pack: Any) -> None:
    stop.set()
    requests.put(None)
    job.join()
    pack.close()


def _read_clip(
    pack: Any, first: np.ndarray, length: np.ndarray, pin: bool, clip: int
) -> torch.Tensor:
    """Clip `clip`'s frames in host memory (pinned for CUDA): consecutive pack images, so
    sequential reads."""
    start, count = int(first[clip]), int(length[clip])
    m = pack.manifest
    host = host_empty((count, 3, m.size, m.size), torch.uint8, pin)
    bad = pack.read_images(np.arange(start, start + count), host.numpy().reshape(count, -1))
    if bad is not None and bad.any():
        raise MixshardError(f"clip {clip} of {m.origin} has frames in a damaged block")
    return host

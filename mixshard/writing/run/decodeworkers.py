"""The decode worker pool of `pack`: processes that start at once, ignore Ctrl-C (the pack
process handles it, also when it comes while they start) and end with the pack process, even
after `kill -9`.

Where the workers are forked (Linux), their pixels come back through shared memory: the pack
process maps `ResultSlots` before it forks them, each task writes its images into the slot it
was given and returns only `True` or a skip reason per image. Pickled through the pool's pipe,
the pixels would cost the pack process more CPU an image than anything else it does, and it
alone would cap a pack's rate on any number of cores. Spawned workers (elsewhere) cannot see
the mapping and return the arrays."""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.errors import RESUME, Arg, ImageDecodeError, MixshardError
from ...core.jobs import Job
from ..pixels.image import grey_pixels, load_image
from ..plan.packplan import DecodeTask
from ..sources.archive import MemberReader

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor


WORKER_DIED = (
    "a decode worker process died (out of memory, or a crash inside an image library); "
    "finished shards are kept: pack again with ", RESUME, ", and with ", Arg("workers", 1),
    " to find the file",
)  # fmt: skip


def cannot_start(workers: int, exc: OSError) -> MixshardError:
    """The error of a pool that could not fork its workers (EAGAIN, ENOMEM): not a write into
    OUT, so not a WriteError."""
    return MixshardError(
        f"cannot start {workers} decode worker processes: {exc.strerror}; "
        "pack with fewer workers (", Arg("workers", 1), " uses none)",
    )  # fmt: skip


def decode_chunk(task: DecodeTask) -> list[np.ndarray | str]:
    """Worker task: pixels (variants, 3, size, size) or a skip reason, per key of `task`; a run
    of one video's frames is decoded by `video.decode_frames` in one go, an image file by
    `load_image` (grey: `image.grey_pixels`)."""
    keys, source = task.keys, task.source
    size, crop, resample, grey = task.size, task.crop, task.resample, task.grey
    reader = MemberReader(source, "folder") if isinstance(source, str) else source
    refs = task.refs or [None] * len(keys)
    frames = task.frames or [None] * len(keys)
    out: list[np.ndarray | str] = []
    k = 0
    while k < len(keys):
        frame = frames[k]
        if frame is not None:  # this video's frames from here on, decoded in one go
            end = k
            while end < len(keys) and (f := frames[end]) is not None and f[0] == frame[0]:
                end += 1
            from ..pixels.video import decode_frames

            indices = [f[1] for f in frames[k:end] if f is not None]
            out += decode_frames(
                reader, frame[0], refs[k], indices, frame[2:], size, crop, resample, grey
            )
            k = end
            continue
        key, ref = keys[k], refs[k]
        k += 1
        try:
            path, data = reader.fetch(key, ref)
            pixels = load_image(
                path, size, crop, variants=task.variants, seed=task.seed, key=key, data=data,
                resample=resample,
            )  # fmt: skip
            out.append(grey_pixels(pixels) if grey else pixels)
        except ImageDecodeError as exc:
            out.append(exc.reason)
    return out


class ResultSlots:
    """`slots` regions of shared memory of `slot_bytes` each, made before the workers are forked
    (they inherit the mapping): a task writes its chunk's pixels into one, the pack process
    copies them out before the slot is given to another task."""

    def __init__(self, slots: int, slot_bytes: int) -> None:
        self.slots, self.slot_bytes = slots, slot_bytes
        self._map = mmap.mmap(-1, max(1, slots * slot_bytes))  # MAP_SHARED | MAP_ANONYMOUS

    def region(self, slot: int, nbytes: int) -> np.ndarray:
        """The first `nbytes` of slot `slot`, as a uint8 array over the shared memory."""
        if nbytes > self.slot_bytes:
            raise ValueError(f"{nbytes} bytes do not fit a slot of {self.slot_bytes}")
        return np.frombuffer(self._map, np.uint8, nbytes, slot * self.slot_bytes)


FORKS = sys.platform == "linux"  # whether the workers are forked (and share memory mapped before)
_SHARED: Any = None  # in a worker: what it was forked with (`start_workers`'s `shared`)


def shared() -> Any:
    """In a worker: the object `start_workers` made before forking it (None where spawned)."""
    return _SHARED


def decode_to_slot(slot: int, task: DecodeTask) -> list[bool | str]:
    """Worker task: `decode_chunk(task)`, the pixels written one image after the other into
    result slot `slot`; per key True (its pixels are in the slot) or the skip reason."""
    slots = _SHARED
    if not isinstance(slots, ResultSlots):
        raise RuntimeError("decode_to_slot runs in a worker forked with result slots")
    results = decode_chunk(task)
    pixels = [r for r in results if not isinstance(r, str)]
    if pixels:
        each = pixels[0].nbytes
        rows = slots.region(slot, each * len(pixels)).reshape(len(pixels), *pixels[0].shape)
        for row, image in zip(rows, pixels):
            row[...] = image
    return [r if isinstance(r, str) else True for r in results]


def slot_results(
    slots: ResultSlots, slot: int, flags: list[bool | str], shape: tuple[int, ...]
) -> list[np.ndarray | str]:
    """The results of a `decode_to_slot` task as `decode_chunk` gives them: the pixels copied
    out of the slot (in one copy, before it is used again), each image `shape`."""
    good = sum(1 for f in flags if not isinstance(f, str))
    nbytes = good * int(np.prod(shape))
    rows = iter(slots.region(slot, nbytes).reshape(good, *shape).copy())
    return [f if isinstance(f, str) else next(rows) for f in flags]


def _init_worker(parent: int, close_fds: tuple[int, ...], shared: Any) -> None:
    """Worker initializer: keep what it was forked with (`shared`); drop the descriptors the
    worker must not hold (the output folder's lock: a worker outliving a killed pack would keep
    it locked), and end this worker when the pack process is gone (e.g. `kill -9`), instead of
    leaving it orphaned."""
    global _SHARED
    _SHARED = shared
    # Ctrl-C is the pack process's: ignored here, then unblocked (`start_workers` forked this
    # worker with it blocked; a Ctrl-C pending since is discarded by the "ignore")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    Job(watch, "mixshard-parent-watch")


def start_workers(
    workers: int, close_fds: tuple[int, ...] = (), shared: Callable[[], Any] | None = None
) -> tuple[ProcessPoolExecutor, Any]:
    """Start every worker process at once, with Ctrl-C ignored in them and `close_fds`
    closed in them. `shared`: makes what the workers share with this process (result slots,
    a whole-shard job), called only where they are forked; returns the pool and what it made
    (None where they are spawned: they cannot see this process's memory).

    Ctrl-C reaches the whole process group; the pack process handles it (it stops, keeps the
    finished shards, and shuts the pool down), so the workers must not also print a traceback.
    SIGINT is blocked (not ignored) in this thread while they start: a child starts with it
    blocked until its initializer ignores it, and a Ctrl-C that comes meanwhile is held for
    this process, which gets it once they are all up (KeyboardInterrupt, the pool shut down).
    Ignoring it instead lost a Ctrl-C pressed then ~3 times in 40 with 8 workers.

    Raises:
        KeyboardInterrupt: Ctrl-C came while the workers started (the pool is shut down).
    """
    # fork on Linux: instant start, and no re-import of the caller's __main__ (which breaks
    # `python -` and unguarded scripts under spawn). The pool is made before any progress bar
    # thread exists. Elsewhere spawn, the platform default.
    # Imported here: `workers=1` decodes in the pack process and starts without them.
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    method = "fork" if FORKS else "spawn"
    made = shared() if shared is not None and FORKS else None
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context(method),
        initializer=_init_worker,
        initargs=(os.getpid(), tuple(close_fds), made),  # forked: never pickled
    )
    blocked = hasattr(signal, "pthread_sigmask")
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if blocked else None
    try:
        try:
            # Each submit finds no idle worker and spawns one, so `workers` tasks start them all.
            for started in [pool.submit(os.getpid) for _ in range(workers)]:
                started.result()
        finally:
            if held is not None:
                # a Ctrl-C held back while they started is raised by this call (Python runs
                # the handlers of the signals it unblocks before it returns), so in the `try`
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
    except BaseException:
        # waited for (the workers are idle): with wait=False the pool's manager thread may
        # close its wake-up pipe before the interpreter's exit hook writes to it (EBADF)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    return pool, made

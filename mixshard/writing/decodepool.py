"""The decode worker pool of `pack`: processes that start at once, ignore Ctrl-C (the pack
process handles it) and end with the pack process, even after `kill -9`."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import ImageDecodeError
from .archive import MemberReader
from .image import load_image

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor


def decode_chunk(
    source: str | MemberReader,
    keys: list[str],
    size: int,
    crop: str,
    variants: int,
    seed: int,
    refs: list[Any] | None = None,
) -> list[np.ndarray | str]:
    """Worker task: pixels (variants, 3, size, size) or a skip reason, per key. `source` is a
    folder, or the reader of an archive with each key's member reference in `refs`."""
    reader = MemberReader(source, "folder") if isinstance(source, str) else source
    out: list[np.ndarray | str] = []
    for key, ref in zip(keys, refs or [None] * len(keys)):
        try:
            path, data = reader.fetch(key, ref)
            out.append(
                load_image(path, size, crop, variants=variants, seed=seed, key=key, data=data)
            )
        except ImageDecodeError as exc:
            out.append(exc.reason)
    return out


def _init_worker(parent: int, close_fds: tuple[int, ...]) -> None:
    """Worker initializer: drop the descriptors the worker must not hold (the output folder's
    lock: a worker outliving a killed pack would keep it locked), and end this worker when the
    pack process is gone (e.g. `kill -9`), instead of leaving it orphaned."""
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def start_pool(workers: int, close_fds: tuple[int, ...] = ()) -> ProcessPoolExecutor:
    """Start every worker process at once, with Ctrl-C ignored in them and `close_fds`
    closed in them.

    Ctrl-C reaches the whole process group; the pack process handles it (it stops, keeps the
    finished shards, and shuts the pool down), so the workers must not also print a traceback.
    SIGINT set to "ignore" while they are spawned stays ignored in them.
    """
    # fork on Linux: instant start, and no re-import of the caller's __main__ (which breaks
    # `python -` and unguarded scripts under spawn). The pool is made before any progress bar
    # thread exists. Elsewhere spawn, the platform default.
    # Imported here: `workers=1` decodes in the pack process and starts without them.
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    method = "fork" if sys.platform == "linux" else "spawn"
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context(method),
        initializer=_init_worker,
        initargs=(os.getpid(), tuple(close_fds)),
    )
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    try:
        # Each submit finds no idle worker and spawns one, so `workers` tasks start them all.
        for started in [pool.submit(os.getpid) for _ in range(workers)]:
            started.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
    return pool

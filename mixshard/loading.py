"""`Loader`, what `mixshard.loader()` returns: a batch sequence with persistent workers.

(Not `loader.py`: a submodule named like the exported function `mixshard.loader` would shadow
it once imported.)
"""

from __future__ import annotations

import contextlib
import copy
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import DataLoader

from .errors import MixshardError
from .stream import ShardStream


class Loader:
    """What `loader()` returns. Its workers live for the whole run: epochs are cut from one
    endless batch sequence, so a new epoch never respawns them; `state_dict()` records how
    many batches were handed out.

    For a local pack the workers are threads of this process: the mmap gather runs at
    memory speed and releases the GIL, while handing a 5 MB batch from a DataLoader worker
    process to this one costs more than making it (measured in scripts/bench_stream.py).
    For shard URLs they are DataLoader worker processes, which also decode the tar stream.
    """

    def __init__(
        self,
        stream: ShardStream,
        num_workers: int,
        pin_memory: bool,
        prefetch_factor: int | None,
        workers: str,
    ) -> None:
        if workers not in ("auto", "thread", "process"):
            raise ValueError(f"workers must be 'auto', 'thread' or 'process', got {workers!r}")
        self.stream = stream
        self.infinite = stream.infinite
        self.num_workers = num_workers
        self.threads = workers == "thread" or (workers == "auto" and stream.is_local)
        if self.threads and not stream.is_local:
            raise ValueError("workers='thread' needs a local pack folder")
        self._pin = pin_memory and torch.cuda.is_available()
        self._prefetch_factor = prefetch_factor or 2
        self._position = 0  # next batch to hand out
        self._it: Iterator | None = None
        self._it_next = -1  # batch the live iterator makes next

    def __len__(self) -> int:
        return len(self.stream)

    @property
    def batches_per_epoch(self) -> int:
        return self.stream.batches_per_epoch

    def _thread_batches(self, start: int) -> Iterator[Any]:
        """Batches start, start + 1, ... forever, gathered ahead on a thread pool, in order."""
        stream, nb = self.stream, self.batches_per_epoch
        pool = ThreadPoolExecutor(self.num_workers) if self.num_workers else None
        ahead = self.num_workers * self._prefetch_factor if pool else 0
        pending: deque = deque()
        k = start
        try:
            while True:
                while len(pending) <= ahead:
                    index = stream._batch_index(k, nb)
                    pending.append(
                        pool.submit(stream._make_local, index, self._pin)
                        if pool
                        else stream._make_local(index, self._pin)
                    )
                    k += 1
                head = pending.popleft()
                yield head.result() if pool else head
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def _process_batches(self, start: int) -> Iterator[Any]:
        inner = copy.copy(self.stream)
        inner.infinite = True  # the workers never stop; epochs are counted here
        inner._position = start
        kwargs = {}
        if self.num_workers > 0:
            kwargs = {"prefetch_factor": self._prefetch_factor, "persistent_workers": False}
        dl = DataLoader(
            inner, batch_size=None, num_workers=self.num_workers, pin_memory=self._pin, **kwargs
        )
        return iter(dl)

    def _iterator(self) -> Iterator:
        if self._it is None or self._it_next != self._position:
            self.close()
            self.stream._open()
            make = self._thread_batches if self.threads else self._process_batches
            self._it = make(self._position)
            self._it_next = self._position
        return self._it

    def __iter__(self) -> Iterator[Any]:
        nb = self.batches_per_epoch
        end = None if self.infinite else (self._position // nb + 1) * nb
        while end is None or self._position < end:
            it = self._iterator()
            try:
                batch = next(it)
            except BaseException as exc:
                self.close()
                if isinstance(exc, RuntimeError) and "DataLoader worker" in str(exc):
                    raise MixshardError(f"a loader worker process died: {exc}") from None
                if isinstance(exc, MixshardError) and "Original Traceback" in str(exc):
                    # DataLoader re-raises with the worker's whole traceback as the message;
                    # its last line is the original one-line message.
                    last = str(exc).rstrip().splitlines()[-1]
                    raise type(exc)(last.split(": ", 1)[-1]) from None
                raise
            self._position += 1
            self._it_next += 1
            yield batch

    @property
    def epoch(self) -> int:
        return self._position // self.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Next iteration starts at the beginning of `epoch` (a no-op when it already does)."""
        self._position = epoch * self.batches_per_epoch

    def state_dict(self) -> dict[str, Any]:
        """The position of the next batch (see `ShardStream.state_dict`)."""
        self.stream._position = self._position
        return self.stream.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where `state` was taken."""
        self.stream.load_state_dict(state)
        self._position = self.stream._position

    def close(self) -> None:
        """Stop the workers."""
        it, self._it = self._it, None
        if it is None:
            return
        if hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()  # noqa: SLF001 - DataLoader has no public stop
        elif hasattr(it, "close"):
            it.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()

"""`loader()` and the `Loader` it returns: a batch sequence with persistent workers.

(Not `loader.py`: a submodule named like the exported function `mixshard.loader` would shadow
it once imported.)
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torch.utils.data import DataLoader

from ..core.checks import check_int, check_optional_int
from ..core.device import accelerator
from ..core.errors import MixshardError
from ..core.jobs import own, this_process
from .batches.packbatches import BatchReader
from .source import Source
from .stream import ShardStream


def loader(
    source: str | os.PathLike | list[str] | Source,
    batch_size: int = 256,
    *,
    num_workers: int = 4,
    pin_memory: bool = True,
    prefetch_factor: int | None = None,
    workers: str = "auto",
    **stream_kw: Any,
) -> Loader:
    """A ready-to-train loader of uint8 batches from a pack.

    Args:
        source: a pack folder or a pack's URL (see `ShardStream`).
        batch_size: images per batch.
        num_workers: workers preparing batches ahead (0: made on demand in this process).
            They start on the first iteration and live until `close()`; epochs do not
            respawn them. The batches are the same whatever the number,
            except with `nw > 1` process workers in the shuffled block order, where each
            worker reads its own blocks (`roles.py`): the batches then depend on `nw`.
        pin_memory: pin batches for fast copies to CUDA (ignored without CUDA).
        prefetch_factor: batches each worker prepares ahead (default 2).
        workers: `"auto"` (threads: every pack is read by offset), `"thread"` or
            `"process"` (DataLoader worker processes).
        **stream_kw: `ShardStream` options (shuffle, infinite, seed, rank, world_size, labels,
            on_error, manifest, order, window, run).

    Returns:
        A `Loader`: iterate it (one epoch per `for`, or forever with `infinite=True`);
        `state_dict()` / `load_state_dict()` resume mid-epoch.

    Example:
        >>> for images in mixshard.loader("data/coco", 256, num_workers=4, infinite=True):
        ...     ...
    """
    stream = ShardStream(source, batch_size, **stream_kw)
    return Loader(stream, num_workers, pin_memory, prefetch_factor, workers)


class Loader:
    """What `loader()` returns. Epochs are cut from one endless batch sequence (`state_dict()`
    records how many batches were handed out), so its workers read ahead across an epoch's end
    as within one: a loader closed there has read the first batches of the next epoch (in the
    block order, their window: about `window` blocks a process worker) for nothing.

    Unless `workers="process"` the workers are threads (`ReadPlan.threads`): handing a batch
    from a DataLoader worker process to this one costs more than making it. With the block
    order the reader's own threads read whole blocks ahead into the batches, and `num_workers`
    adds nothing.
    """

    def __init__(
        self,
        stream: ShardStream,
        num_workers: int,
        pin_memory: bool,
        prefetch_factor: int | None,
        workers: str,
    ) -> None:
        check_int("num_workers", num_workers, 0)
        check_optional_int("prefetch_factor", prefetch_factor, 1)
        self.stream = stream
        self.infinite = stream.infinite
        self.num_workers = num_workers
        self.threads = stream.plan.threads(workers)
        self._pin = pin_memory and accelerator()
        self._prefetch_factor = prefetch_factor or 2
        self.position = 0  # next batch to hand out
        self._it: Iterator | None = None
        self._it_next = -1  # batch the live iterator makes next
        self._generation = 0  # close() ends the iterations started before it
        self._owned()

    def __len__(self) -> int:
        return len(self.stream)

    @property
    def batches_per_epoch(self) -> int:
        return self.stream.batches_per_epoch

    def _thread_batches(self, start: int) -> Iterator[Any]:
        """Batches start, start + 1, ... forever, made ahead on a thread pool, in order."""
        reader = self.stream.reader(range(start, 1 << 62), self._pin)
        # the block order reads ahead on its own threads: a pool would only pass batches on
        workers = 0 if reader.reads_ahead else self.num_workers
        pool = ThreadPoolExecutor(workers, thread_name_prefix="mixshard-load") if workers else None
        self._stop[:] = [reader, pool]
        if pool is None:
            yield from map(reader.get, itertools.count(start))
            return
        ahead = workers * self._prefetch_factor
        pending = deque(pool.submit(reader.get, k) for k in range(start, start + ahead))
        for k in itertools.count(start + ahead):
            pending.append(pool.submit(reader.get, k))
            yield pending.popleft().result()

    def _process_batches(self, start: int) -> Iterator[Any]:
        inner = copy.copy(self.stream)
        inner.infinite = True  # the workers never stop; epochs are counted here
        inner.position = start
        dl = DataLoader(
            inner,
            batch_size=None,
            num_workers=self.num_workers,
            pin_memory=self._pin,
            prefetch_factor=self._prefetch_factor if self.num_workers else None,
        )
        it = iter(dl)
        self._stop[:] = [it]
        return it

    def _owned(self) -> None:
        """A fresh list of what close() must stop (a reader, a thread pool, a DataLoader
        iterator), stopped also when the loader is collected or at interpreter exit."""
        self._pid = this_process()
        self._stop: list[Any] = []
        self._closer = own(self, _shutdown, self._stop)

    def _forget_parent(self) -> None:
        """In a forked child: drop the parent's workers (not there) to start new ones."""
        if self._pid != this_process():
            self._it = None
            self._owned()

    def _iterator(self) -> Iterator:
        self._forget_parent()
        if self._it is None or self._it_next != self.position:
            self._shutdown()
            make = self._thread_batches if self.threads else self._process_batches
            self._it = make(self.position)
            self._it_next = self.position
        return self._it

    def __iter__(self) -> Iterator[Any]:
        nb = self.batches_per_epoch
        end = None if self.infinite else (self.position // nb + 1) * nb
        generation = self._generation
        while (end is None or self.position < end) and generation == self._generation:
            it = self._iterator()
            try:
                batch = next(it)
            except BaseException as exc:
                if generation != self._generation:
                    return  # closed meanwhile: the workers' errors are the closing's
                self.close()
                raise _clean(exc, processes=not self.threads) from None
            self.position += 1
            self._it_next += 1
            yield batch

    @property
    def epoch(self) -> int:
        return self.position // self.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Next iteration starts at the beginning of `epoch` (a no-op when it already does)."""
        self.position = epoch * self.batches_per_epoch

    def state_dict(self) -> dict[str, Any]:
        """The position of the next batch (see `ShardStream.state_dict`)."""
        self.stream.position = self.position
        return self.stream.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where `state` was taken."""
        self.stream.load_state_dict(state)
        self.position = self.stream.position

    def close(self) -> None:
        """Stop the workers. An iteration in progress ends; a new one starts them again."""
        self._generation += 1
        self._shutdown()

    def _shutdown(self) -> None:
        self._forget_parent()
        self._it = None
        _shutdown(self._stop)


def _shutdown(things: list[Any]) -> None:
    """Stop the workers in `things` (and forget them)."""
    stop, things[:] = things[:], []
    for thing in stop:
        if isinstance(thing, BatchReader):
            thing.close()
        elif isinstance(thing, ThreadPoolExecutor):
            thing.shutdown(wait=True, cancel_futures=True)
        elif hasattr(thing, "_shutdown_workers"):
            with contextlib.suppress(RuntimeError):  # a worker already dead says so again
                thing._shutdown_workers()  # DataLoader has no public stop


def _clean(exc: BaseException, processes: bool) -> BaseException:
    """A worker's failure as the error to raise: DataLoader wraps worker errors with the
    whole traceback as the message; give the original one-line message instead. A worker
    killed while a batch was on its way breaks the connection instead."""
    died = isinstance(exc, RuntimeError) and "DataLoader worker" in str(exc)
    if died or (processes and isinstance(exc, (ConnectionError, EOFError))):
        return MixshardError(f"a loader worker process died: {type(exc).__name__}: {exc}")
    if isinstance(exc, MixshardError) and "Original Traceback" in str(exc):
        last = str(exc).rstrip().splitlines()[-1]
        return type(exc)(last.split(": ", 1)[-1])
    return exc

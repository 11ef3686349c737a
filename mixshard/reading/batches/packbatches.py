"""The batches of a stream over a pack (a folder or a store's cache): single images copied out of
mappings of its shards or read one by one (`mapped.py`, either order), or whole blocks read
ahead (block order, `blockfeed.py`), as the read plan chooses once per reader (`plan.py`).
Batch `k` is the same whoever makes it (`order.py`), in any thread or process.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ...core import locks
from ...core.device import pinned
from ...core.errors import MixshardError
from ...core.jobs import Job, check_process, own, this_process
from ..pack.reader import PackReader
from . import order, plan
from .blockfeed import BlockFeed
from .recycle import Recycler
from .roles import role_batches

RECYCLED = 32  # global order: batch buffers remembered, to be used again once dropped


class PackBatches:
    """The batches of a pack (`(images, labels)` with `labels`), read as `read_plan` says."""

    def __init__(
        self,
        pack: PackReader,
        epochs: order.EpochOrder,
        batch_size: int,
        labels: bool,
        read_plan: plan.ReadPlan,
    ) -> None:
        self.pack, self.epochs, self.plan = pack, epochs, read_plan
        self.batch_size, self.labels = batch_size, labels

    def batch_index(self, k: int, nb: int, rank: int) -> np.ndarray:
        """The image numbers that make batch `k` of `rank` (`nb` batches per epoch)."""
        epoch, first = order.batch_span(k, nb, rank, self.batch_size)
        return self.epochs.sequence(epoch)[first : first + self.batch_size]

    def reader(self, batches: range, nb: int, rank: int, pin: bool = False) -> BatchReader:
        """A `BatchReader` of the batches `batches` (an increasing range)."""
        return BatchReader(self, batches, nb, rank, pin)

    def batches(
        self, start: int, end: int | None, wid: int, nw: int, nb: int, rank: int, world: int
    ) -> Iterator[tuple[int, Any]]:
        """`(k, batch)` for the batches worker `wid` of `nw` makes from `start` (to `end`); in
        the shuffled block order with several workers, each reads its own blocks (`roles.py`)."""
        if self.epochs.kind == "block" and self.epochs.shuffle and nw > 1:
            yield from role_batches(self, start, end, wid, nw, nb, rank, world)
            return
        ks = order.worker_batches(start, end, wid, nw)
        with contextlib.closing(self.reader(ks, nb, rank)) as reader:
            for k in ks:
                yield k, reader.get(k)


class BatchReader:
    """Makes the batches `batches` of a `PackBatches`, from any number of threads, in pinned
    memory if asked; close it when done."""

    def __init__(
        self, batches_of: PackBatches, batches: range, nb: int, rank: int, pin: bool = False
    ) -> None:
        self.source = batches_of
        self.pack = batches_of.pack
        self._nb, self._rank, self._pin = nb, rank, pin
        self._stop = threading.Event()
        self._pid = this_process()
        self.feed: BlockFeed | None = None  # the block order's feed (its counters), or None
        self._warm: Job | None = None
        self._warm_lock = locks.Lock()
        epochs, read_plan = batches_of.epochs, batches_of.plan
        self.way = read_plan.choose(self.pack)
        if self.way == "feed":
            window_images = int(np.sort(self.pack.block_count)[-epochs.window :].sum())
            self.feed = BlockFeed(
                self.pack,
                epochs.with_inverse,
                nb,
                rank,
                batches_of.batch_size,
                batches,
                ahead=max(2, window_images // batches_of.batch_size // 2),
                drop_cache=read_plan.drop_cache,
                pin=pin,
                run=epochs.run,
            )
        else:
            if self.way == "pread":
                # sequential reads warm a cold pack once the first batch is read (it would
                # queue behind them; docs/design.md), then it is mapped if the plan allows
                then_map = plan.maps_after_warm(read_plan.read, self.pack.manifest.total_bytes)
                warm = functools.partial(self.pack.warm, self._stop, then_map)
                self._warm = Job(warm, "mixshard-warm", False)
            image_bytes = self.pack.manifest.image_bytes
            self._recycler = Recycler(batches_of.batch_size, image_bytes, keep=RECYCLED)
        # stopped by close(), when collected, or at interpreter exit (`core/jobs.py`)
        self._closer = own(self, _close_reader, self._stop, self.feed, self._warm)

    @property
    def reads_ahead(self) -> bool:
        """True when batches are read ahead on the reader's own threads (the plan `"feed"`)."""
        return self.feed is not None

    def get(self, k: int) -> Any:
        """Batch `k` as a tensor (or `(images, labels)`), pinned if the reader was opened so."""
        pin = self._pin
        if self.feed is not None:
            check_process(self._pid, "a block-order batch reader")
            index, images, bad = self.feed.take(k)
            images = pinned(images) if pin else images
        else:
            size = self.pack.manifest.size
            shape = (self.source.batch_size, 3, size, size)
            images, buffer = self._recycler.images(shape, pin)
            index = self.source.batch_index(k, self._nb, self._rank)
            bad = self.pack.read_images(index, images.numpy())
            if buffer is not None:
                self._recycler.lend(buffer)
            if self._warm is not None and not self._warm.started:
                with self._warm_lock:
                    if not self._warm.started and not self._stop.is_set():
                        self._warm.start()
        if bad is not None:
            index = _substitute(k, index, images.numpy(), bad)
        if not self.source.labels:
            return images
        labels = torch.from_numpy(self.pack.labels(index))
        return images, (pinned(labels) if pin else labels)

    def close(self) -> None:
        """Stop the reads ahead and wait for their threads."""
        with self._warm_lock:  # no warm pass starts after this
            self._closer()


def _close_reader(stop: threading.Event, feed: BlockFeed | None, warm: Job | None) -> None:
    stop.set()
    if feed is not None:
        feed.close()
    if warm is not None:
        warm.join()


def _substitute(k: int, index: np.ndarray, out: np.ndarray, bad: np.ndarray) -> np.ndarray:
    """Fill the images of bad blocks with the batch's good ones (cyclically), so the batch
    keeps its size; returns the image numbers now in the batch."""
    good = np.flatnonzero(~bad)
    if len(good) == 0:
        raise MixshardError(
            f"no batch could be made: every image of batch {k} is in a bad block; "
            "run `mixshard verify` on the pack and repack it"
        )
    holes = np.flatnonzero(bad)
    donors = good[np.arange(len(holes)) % len(good)]
    out[holes] = out[donors]
    index = index.copy()
    index[holes] = index[donors]
    return index

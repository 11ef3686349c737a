"""`ShardStream`: full, shuffled uint8 batches from a pack folder or a pack on a store.

The stream composes an order (`order.py`: which images make batch `k`, whoever makes it, so
`state_dict()` resumes exactly) with the read plan's reader (`packbatches.py`); a store's pack
is read the same way, through its block cache.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from ..core.checks import check_int, check_optional_int
from ..core.env import available_memory, rank_world
from ..core.errors import MixshardError
from ..core.manifest import Manifest
from .batches import order as order_mod
from .batches.packbatches import BatchReader, PackBatches
from .batches.plan import WINDOW, ReadPlan, make_plan
from .pack.reader import PackReader
from .source import Source, resolve_source

_STATE_VERSION = 4  # 3: block order runs; 4: records shuffle


class ShardStream(IterableDataset):
    """Full, shuffled uint8 batches from a mixshard pack.

    Args:
        source: a pack folder, or a pack's URL (`s3://bucket/prefix`, `gs://...`,
            `https://host/prefix`: read like a folder, its blocks fetched with ranged reads
            into a bounded local cache), or a `Source`.
        batch_size: images per batch; every batch is full.
        shuffle: a fresh order per (seed, epoch); False keeps the stored order.
        infinite: never stop (no epoch boundary, no worker respawn): what an RL run wants.
        seed: seed of every permutation.
        rank, world_size: this process's share; default from `torch.distributed` when it is
            initialised, else 0 and 1.
        labels: yield `(images, labels)` with int64 labels.
        on_error: `"raise"` (default) or `"skip"`: skip a bad shard or block with one warning
            (a batch keeps its size: images of a bad block are replaced by others of the batch).
        manifest: the `Manifest` already read, not read again.
        order: `"global"` (a per-image permutation: for packs in the page cache),
            `"block"` (whole blocks in a random order, shuffled within windows: sequential
            I/O for packs larger than memory) or `"auto"`: block when one window holds the
            whole pack (its shuffle is then a full permutation), else global when the pack
            takes at most half the available memory, else block.
        window: block order: blocks whose images are shuffled together. Memory is about
            1.5 windows of images in batch buffers (1.5 x 64 x 5.4 MB at 84 px).
        run: block order: consecutive blocks kept together in the order and read with one
            request (4 x 5.4 MB at 84 px): large sequential reads are what a cold disk
            serves fastest. A default pack is shuffled when written, so neighbouring blocks
            are independent samples (the window is rounded up to whole runs).
        shuffle_blocks: deprecated, ignored (it sized the shuffle buffer of shard URLs).
        read: how images are read: `"auto"` (the default: the read plan chooses, `plan.py`,
            and `stats()["explain"]` says what and why), or `"mapped"`, `"feed"` (block order)
            or `"pread"`. The batches are the same whichever is used.
        cache_dir: store URLs: the block cache's folder (default `~/.cache/mixshard`, or
            `$XDG_CACHE_HOME/mixshard`); its files are keyed by the pack's identity.
        cache_limit: store URLs: bytes the cache takes on disk at most, each block counted
            by the file-system pages it touches (default: the whole pack, or half the free
            disk space there if less); DataLoader worker processes split it.
            Once full, the block whose next use is furthest away is dropped.

    Yields:
        `torch.uint8` tensors `(batch_size, 3, size, size)`, contiguous (or `(images, labels)`).

    Each epoch gives each rank `N // (world_size * batch_size)` batches of distinct images; the
    few left over differ each epoch.
    """

    def __init__(
        self,
        source: str | os.PathLike | list[str] | Source,
        batch_size: int = 256,
        *,
        shuffle: bool = True,
        infinite: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        labels: bool = False,
        on_error: str = "raise",
        manifest: Manifest | None = None,
        order: str = "auto",
        window: int = WINDOW,
        run: int = 4,
        shuffle_blocks: int | None = None,
        read: str = "auto",
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | None = None,
    ) -> None:
        check_int("batch_size", batch_size, 1)
        check_int("window", window, 1)
        check_optional_int("rank", rank)
        check_optional_int("world_size", world_size, 1)
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if rank is not None:  # against torch.distributed's world size when it is read
            _check_rank(rank, world_size)
        check_int("seed", seed, 0)
        if shuffle_blocks is not None:
            warnings.warn(
                "shuffle_blocks is deprecated and ignored: shard URLs are no longer streamed",
                DeprecationWarning,
                stacklevel=2,
            )
        check_int("run", run, 1)
        self.batch_size, self.shuffle, self.infinite = batch_size, shuffle, infinite
        self.seed, self.labels, self.on_error = seed, labels, on_error
        self.window, self.run = window, run
        self._rank, self._world = rank, world_size
        self.position = 0  # global number of the next batch to make
        self.source = resolve_source(source, manifest, cache_dir=cache_dir, cache_limit=cache_limit)
        self.manifest = self.source.manifest
        self.pack: PackReader = self.source.open_pack(on_error)
        self.count = self.pack.count
        self.plan: ReadPlan = make_plan(
            order,
            read,
            blocks=len(self.pack.block_count),
            window=window,
            pack_bytes=self.manifest.total_bytes,
            memory=available_memory(),
            fits=self.pack.files.fits(),
            need=self.pack.files.need,
            store=self.source.kind == "store",
        )
        self.order = self.plan.order
        self.larger_than_memory = self.plan.drop_cache
        epochs = order_mod.EpochOrder(self.order, self.pack.block_count, seed, window, shuffle, run)
        self._batches_of = PackBatches(self.pack, epochs, batch_size, labels, self.plan)

    def stats(self) -> dict[str, Any]:
        """The read plan: `order`, `read` (as asked), `drop_cache`, and `explain`, what was
        chosen and why (one line each)."""
        p = self.plan
        return dict(order=p.order, read=p.read, drop_cache=p.drop_cache, explain=p.explain())

    # ------------------------------------------------------------------ geometry and state
    @property
    def is_local(self) -> bool:
        """Deprecated: every pack is read by byte offset now (it was False for shard URLs)."""
        warnings.warn(
            "ShardStream.is_local is deprecated: every pack is read by byte offset; use "
            "stream.source.kind to tell a folder from a store",
            DeprecationWarning,
            stacklevel=2,
        )
        return True

    @property
    def rank_world(self) -> tuple[int, int]:
        """`(rank, world_size)`: explicit arguments, else `torch.distributed`, else `(0, 1)`."""
        if self._world is not None:
            rank, world = (self._rank or 0), self._world
        else:
            rank, world = rank_world()
            rank = self._rank if self._rank is not None else rank
        _check_rank(rank, world, "" if self._world is not None else _DIST_WORLD)
        return rank, world

    @property
    def batches_per_epoch(self) -> int:
        """Batches each rank gets per epoch: `N // (world_size * batch_size)`."""
        world = self.rank_world[1]
        nb = order_mod.batches_per_rank(self.count, world, self.batch_size)
        if nb == 0:
            raise MixshardError(
                f"the pack has {self.count} images, fewer than world_size x batch_size = "
                f"{world} x {self.batch_size}; use a smaller batch_size"
            )
        return nb

    def __len__(self) -> int:
        if self.infinite:
            raise TypeError("an infinite ShardStream has no length")
        return self.batches_per_epoch

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self.position // self.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of `epoch` (needed with a plain DataLoader
        over a finite stream; `mixshard.loader` does it by itself)."""
        self.position = epoch * self.batches_per_epoch

    def state_dict(self) -> dict[str, Any]:
        """Where the stream is: restore with `load_state_dict` to continue with exactly the
        batches an uninterrupted run would have made (same seed, world size, batch size)."""
        nb = self.batches_per_epoch
        return {
            "version": _STATE_VERSION,
            "epoch": self.position // nb,
            "batch": self.position % nb,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_size": self.batch_size,
            "world_size": self.rank_world[1],
            "count": self.count,
            "order": self.order,
            "window": self.window if self.order == "block" else None,
            "run": self.run if self.order == "block" else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict()`.

        Raises:
            TypeError: `state` is not a dict.
            ValueError: naming the field: the state comes from a stream that makes other
                batches (shuffle, order, window, seed, batch size, world size, pack count),
                a key is missing, or a counter is negative or out of range.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state).__name__}")
        mine = self.state_dict()
        missing = [key for key in mine if key not in state]
        if missing:
            raise ValueError(
                f"state_dict is missing {', '.join(missing)}: not a state of this stream"
            )
        for key in [k for k in mine if k not in ("epoch", "batch")]:  # what sets the batches
            if state[key] != mine[key]:
                raise ValueError(
                    f"state_dict was saved with {key}={state[key]!r}, this "
                    f"stream has {key}={mine[key]!r}: the batches would differ"
                )
        nb = self.batches_per_epoch
        for key, top in (("epoch", None), ("batch", nb)):
            value = state[key]
            if type(value) is not int or value < 0 or (top is not None and value >= top):
                bound = f"an int in [0, {top})" if top is not None else "an int >= 0"
                raise ValueError(f"state_dict {key} must be {bound}, got {value!r}")
        self.position = state["epoch"] * nb + state["batch"]

    # ------------------------------------------------------------------ batches
    def batch_index(self, k: int) -> np.ndarray:
        """The image numbers that make batch `k`, in batch order."""
        return self._batches_of.batch_index(k, self.batches_per_epoch, self.rank_world[0])

    def reader(self, batches: range, pin: bool = False) -> BatchReader:
        """A reader that makes the batches `batches` (an increasing range) from any
        number of threads, in pinned memory if asked; close it when done."""
        return self._batches_of.reader(batches, self.batches_per_epoch, self.rank_world[0], pin)

    def __iter__(self) -> Iterator[Any]:
        nb = self.batches_per_epoch
        start = self.position
        end = None if self.infinite else (start // nb + 1) * nb
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, world = self.rank_world
        for k, batch in self._batches_of.batches(start, end, wid, nw, nb, rank, world):
            if info is None:
                self.position = k + 1
            yield batch
        if info is None and end is not None:
            self.position = end


_DIST_WORLD = " (torch.distributed's, or 1 without it)"


def _check_rank(rank: int, world: int | None, where: str = "") -> None:
    """Raise ValueError unless `0 <= rank < world` (None: no world size known yet); `where`
    says where the world size came from."""
    if not 0 <= rank < (world or 1 << 30):
        raise ValueError(
            f"rank must be in [0, world_size), got rank={rank}, world_size={world}{where}"
        )

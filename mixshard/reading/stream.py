"""`ShardStream`: full, shuffled uint8 batches from a pack folder or from shard URLs.

The stream composes an order (`order.py`: which images make batch `k`) with a reader: for a
local pack, single-image reads (global order) or whole blocks read ahead (block order,
`blockfeed.py`); for URLs, shards streamed in a per-epoch order through a shuffle buffer.
Batch `k` of a local pack is the same whoever makes it, so batches do not depend on the number
of workers and `state_dict()` resumes exactly.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..core.env import available_memory, rank_world
from ..core.errors import MixshardError
from ..core.manifest import Manifest
from ..core.packpath import pack_dir
from . import order
from .blockfeed import BlockFeed
from .local import LocalPack
from .remote import is_folder, resolve_urls
from .urlstream import remote_batches

_STATE_VERSION = 2
ORDER_CHOICES = ("auto", *order.ORDERS)


class ShardStream(IterableDataset):
    """Full, shuffled uint8 batches from a mixshard pack.

    Args:
        source: a pack folder (local fast path), or shard URLs as webdataset takes them (brace
            patterns, `http(s)://`, `pipe:` commands, lists) whose manifest is
            `<base>/index.json`.
        batch_size: images per batch; every batch is full.
        shuffle: a fresh order per (seed, epoch); False keeps the stored order.
        infinite: never stop (no epoch boundary, no worker respawn): what an RL run wants.
        seed: seed of every permutation.
        rank, world_size: this process's share; default from `torch.distributed` when it is
            initialised, else 0 and 1.
        labels: yield `(images, labels)` with int64 labels.
        on_error: `"raise"` (default) or `"skip"`: skip a bad shard or block with one warning
            (a batch keeps its size: images of a bad block are replaced by others of the batch).
        manifest: where the manifest is, when it is not `<base>/index.json` of the URLs; or
            the `Manifest` already read (of the folder or of the URLs), not read again.
        order: local packs: `"global"` (a per-image permutation: for packs in the page cache),
            `"block"` (whole blocks in a random order, shuffled within windows: sequential
            I/O for packs larger than memory) or `"auto"`: block when one window holds the
            whole pack (its shuffle is then a full permutation, and whole blocks are read
            faster than single images), else global when the pack takes at most half the
            available memory, else block.
        window: block order: blocks whose images are shuffled together. Memory is about
            1.5 windows of images in batch buffers (1.5 x 64 x 5.4 MB at 84 px).
        shuffle_blocks: URLs only: blocks held in the shuffle buffer.

    Yields:
        `torch.uint8` tensors `(batch_size, 3, size, size)`, contiguous (or `(images, labels)`).

    Each epoch gives each rank `N // (world_size * batch_size)` batches of distinct images; the
    few left over differ each epoch.
    """

    def __init__(
        self,
        source: str | os.PathLike | list[str],
        batch_size: int = 256,
        *,
        shuffle: bool = True,
        infinite: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        labels: bool = False,
        on_error: str = "raise",
        manifest: str | Manifest | None = None,
        order: str = "auto",
        window: int = 64,
        shuffle_blocks: int = 8,
    ) -> None:
        _check_args(batch_size, on_error, order, window, rank, world_size)
        self.batch_size, self.shuffle, self.infinite = batch_size, shuffle, infinite
        self.seed, self.labels, self.on_error = seed, labels, on_error
        self.window, self.shuffle_blocks = window, max(1, shuffle_blocks)
        self._rank, self._world = rank, world_size
        self.position = 0  # global number of the next batch to make
        self._sequences: dict[int, list] = {}  # epoch -> [sequence, its inverse or None]
        self._lock = threading.Lock()
        self.pack: LocalPack | None = None
        if is_folder(source) and not isinstance(source, list):
            self.source: Any = os.fspath(pack_dir(source))
            if isinstance(manifest, Manifest):
                self.manifest = manifest
            else:
                self.manifest = Manifest.load(self.source)
            self.pack = LocalPack(self.source, self.manifest, on_error)
            self.count = self.pack.count
            self.urls = None
        else:
            self.source = source
            self.manifest, self.urls = resolve_urls(_urls(source), manifest)
            self.count = sum(s.count for _, s in self.urls)
        # blocks read from a pack this large are dropped from the page cache again
        self.larger_than_memory = self.pack is not None and (
            self.manifest.total_bytes > available_memory() // 2
        )
        self.order = self._resolve_order(order)

    def _resolve_order(self, wanted: str) -> str:
        if self.pack is None:  # URLs: shards in a per-epoch order through a shuffle buffer
            if wanted != "auto":
                raise ValueError(f"order={wanted!r} applies to local pack folders, not URLs")
            return "shards"
        if wanted != "auto":
            return wanted
        if len(self.pack.block_count) <= self.window:
            return "block"  # one window is the whole pack: a full permutation, read in blocks
        return "block" if self.larger_than_memory else "global"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_sequences"], state["_lock"] = {}, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ geometry and state
    @property
    def is_local(self) -> bool:
        """True for a pack folder, False for shard URLs."""
        return self.pack is not None

    @property
    def rank_world(self) -> tuple[int, int]:
        """`(rank, world_size)`: explicit arguments, else `torch.distributed`, else `(0, 1)`."""
        if self._world is not None:
            rank, world = (self._rank or 0), self._world
        else:
            rank, world = rank_world()
            rank = self._rank if self._rank is not None else rank
        if not 0 <= rank < world:
            raise ValueError(f"rank must be in [0, world_size), got {rank} of {world}")
        return rank, world

    @property
    def batches_per_epoch(self) -> int:
        """Batches each rank gets per epoch: `N // (world_size * batch_size)`."""
        world = self.rank_world[1]
        nb = order.batches_per_rank(self.count, world, self.batch_size)
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
            "batch_size": self.batch_size,
            "world_size": self.rank_world[1],
            "count": self.count,
            "order": self.order,
            "window": self.window if self.order == "block" else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict()`.

        Raises:
            ValueError: the state comes from a stream that makes other batches.
        """
        mine = self.state_dict()
        for key in ("version", "seed", "batch_size", "world_size", "count", "order", "window"):
            if state.get(key) != mine[key]:
                raise ValueError(
                    f"state_dict was saved with {key}={state.get(key)!r}, this "
                    f"stream has {key}={mine[key]!r}: the batches would differ"
                )
        self.position = int(state["epoch"]) * self.batches_per_epoch + int(state["batch"])

    # ------------------------------------------------------------------ local batches
    def _epoch_sequence(self, epoch: int, inverse: bool = False) -> np.ndarray:
        """Epoch `epoch`'s sequence, or with `inverse` each image's position in it."""
        # Two epochs are kept: around an epoch's end, workers make batches of both.
        with self._lock:
            kept = self._sequences.get(epoch)
            if kept is None:
                if self.order == "block" and self.pack is not None:
                    seq = order.block_sequence(
                        self.pack.block_count, self.seed, epoch, self.window, self.shuffle
                    )
                else:
                    seq = order.global_sequence(self.count, self.seed, epoch, self.shuffle)
                self._sequences = {e: s for e, s in self._sequences.items() if e > epoch - 2}
                kept = self._sequences[epoch] = [seq, None]
            if inverse and kept[1] is None:
                kept[1] = order.inverse(kept[0])
            return kept[1] if inverse else kept[0]

    def batch_index(self, k: int) -> np.ndarray:
        """The image numbers that make batch `k` (local packs), in batch order."""
        if self.pack is None:
            raise TypeError("batch_index needs a local pack folder")
        epoch, first = order.batch_span(
            k, self.batches_per_epoch, self.rank_world[0], self.batch_size
        )
        return self._epoch_sequence(epoch)[first : first + self.batch_size]

    def reader(self, batches: range, pin: bool = False) -> BatchReader:
        """A reader that makes the local batches `batches` (an increasing range) from any
        number of threads, in pinned memory if asked; close it when done."""
        if self.pack is None:
            raise TypeError("reader needs a local pack folder")
        return BatchReader(self, batches, pin)

    def __iter__(self) -> Iterator[Any]:
        nb = self.batches_per_epoch
        start = self.position
        end = None if self.infinite else (start // nb + 1) * nb
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        if self.pack is None:
            made = remote_batches(self, start, end, wid, nw, nb)
        else:
            made = self._local_batches(order.worker_batches(start, end, wid, nw))
        for k, batch in made:
            if info is None:
                self.position = k + 1
            yield batch
        if info is None and end is not None:
            self.position = end

    def _local_batches(self, ks: range) -> Iterator[tuple[int, Any]]:
        reader = self.reader(ks)
        try:
            for k in ks:
                yield k, reader.get(k)
        finally:
            reader.close()


class BatchReader:
    """Makes a stream's local batches (see `ShardStream.reader`)."""

    def __init__(self, stream: ShardStream, batches: range, pin: bool = False) -> None:
        self.stream = stream
        self.pack: LocalPack = stream.pack  # type: ignore[assignment]
        self._pin = pin
        self._stop = threading.Event()
        self._feed: BlockFeed | None = None
        self._warm: threading.Thread | None = None
        if stream.order == "block":
            window_images = int(np.sort(self.pack.block_count)[-stream.window :].sum())
            self._feed = BlockFeed(
                self.pack,
                lambda e: (stream._epoch_sequence(e), stream._epoch_sequence(e, inverse=True)),
                stream.batches_per_epoch,
                stream.rank_world[0],
                stream.batch_size,
                batches,
                ahead=max(2, window_images // stream.batch_size // 2),
                drop_cache=stream.larger_than_memory,
                pin=pin,
            )
        else:
            # Warm a cold pack with sequential reads, so the first epoch is not a seek storm;
            # started once the first batch is read, which would otherwise queue behind it
            self._warm = threading.Thread(
                target=self.pack.warm, args=(self._stop,), daemon=True, name="mixshard-warm"
            )
            self._warm_lock = threading.Lock()

    @property
    def reads_ahead(self) -> bool:
        """True when batches are read ahead on the reader's own threads (block order)."""
        return self._feed is not None

    def get(self, k: int, pin: bool | None = None) -> Any:
        """Batch `k` as a tensor (or `(images, labels)`), pinned if asked (default: as the
        reader was opened)."""
        pin = self._pin if pin is None else pin
        if self._feed is not None:
            index, images, bad = self._feed.take(k)
            if pin and not images.is_pinned():
                images = images.pin_memory()
        else:
            size = self.pack.manifest.size
            shape = (self.stream.batch_size, 3, size, size)
            images = torch.empty(shape, dtype=torch.uint8, pin_memory=pin)
            index = self.stream.batch_index(k)
            bad = self.pack.read_images(index, images.numpy())
            self._start_warming()
        if bad is not None:
            index = _substitute(k, index, images.numpy(), bad)
        if not self.stream.labels:
            return images
        labels = torch.from_numpy(self.pack.labels(index))
        return images, (labels.pin_memory() if pin else labels)

    def _start_warming(self) -> None:
        assert self._warm is not None
        if self._warm.ident is None:
            with self._warm_lock:
                if self._warm.ident is None and not self._stop.is_set():
                    self._warm.start()

    def close(self) -> None:
        self._stop.set()
        if self._feed is not None:
            self._feed.close()
        if self._warm is not None:
            with self._warm_lock:
                if self._warm.ident is not None:
                    self._warm.join(timeout=10)


def _urls(source: str | os.PathLike | list[str]) -> str | list[str]:
    return source if isinstance(source, list) else os.fspath(source)


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


def _check_args(
    batch_size: int,
    on_error: str,
    wanted: str,
    window: int,
    rank: int | None,
    world_size: int | None,
) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if wanted not in ORDER_CHOICES:
        raise ValueError(f"order must be one of {', '.join(ORDER_CHOICES)}, got {wanted!r}")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if world_size is not None and world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if rank is not None and not 0 <= rank < (world_size or 1 << 30):
        raise ValueError(
            f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}"
        )

"""Shards -> shuffled uint8 batches: `ShardStream` and `loader()`.

Batches are numbered by a global position `k` (0, 1, 2, ... over epochs; epoch `k // nb`,
`nb` batches per rank and epoch). Batch `k` is always the same images for the same seed, world
size and (remote sources only) worker count, whichever process makes it: DataLoader worker
`w` of `n` makes the batches with `k % n == (w + start) % n` and the DataLoader's round robin
hands them out in order. That is what makes resumption exact and the local path's batches
independent of the worker count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .errors import MixshardError, ShardError
from .format import Manifest, ShardInfo
from .sources import LocalPack, is_folder, read_blocks, resolve_urls, warn_bad_shard

_STATE_VERSION = 1


def dist_rank_world() -> tuple[int, int]:
    """`(rank, world_size)` from `torch.distributed` when it is initialised, else `(0, 1)`."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class ShardStream(IterableDataset):
    """Full, shuffled uint8 batches from a mixshard pack.

    Args:
        source: a pack folder (local fast path: mmap + gather), or shard URLs as webdataset
            takes them (brace patterns, `http(s)://`, `pipe:` commands, lists) whose manifest is
            `<base>/index.json`.
        batch_size: images per batch; every batch is full.
        shuffle: a fresh permutation per (seed, epoch); False keeps the stored order.
        infinite: never stop (no epoch boundary, no worker respawn) — what an RL run wants.
        seed: seed of every permutation.
        rank, world_size: this process's share; default from `torch.distributed` when it is
            initialised, else 0 and 1.
        labels: yield `(images, labels)` with int64 labels.
        on_error: `"raise"` (default) or `"skip"`: skip a bad shard with one warning.
        manifest: where the manifest is, when it is not `<base>/index.json` of the URLs.
        shuffle_blocks: remote sources only: blocks held in the shuffle buffer.

    Yields:
        `torch.uint8` tensors `(batch_size, 3, size, size)`, contiguous (or `(images, labels)`).

    Each epoch gives each rank `N // (world_size * batch_size)` batches of distinct images; the
    few left over are the tail of that epoch's permutation, so different ones each epoch.
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
        manifest: str | None = None,
        shuffle_blocks: int = 8,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.batch_size, self.shuffle, self.infinite = batch_size, shuffle, infinite
        self.seed, self.labels, self.on_error = seed, labels, on_error
        self.shuffle_blocks = max(1, shuffle_blocks)
        self._rank, self._world = rank, world_size
        self._position = 0  # global index of the next batch to make
        self._local: LocalPack | None = None
        if is_folder(source):
            self.source: Any = os.fspath(source)
            self.manifest = Manifest.load(self.source)
            self._urls: list[tuple[str, ShardInfo]] | None = None
            self.count = None  # known once the shards are opened (bad ones may be skipped)
        else:
            self.source = source
            self.manifest, self._urls = resolve_urls(source, manifest)
            self.count = sum(s.count for _, s in self._urls)

    # ----------------------------------------------------------------- geometry and state
    def _open(self) -> None:
        if self._urls is None and self._local is None:
            self._local = LocalPack.open(self.source, self.on_error, self.manifest)
            self.count = self._local.count

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_local"] = None  # mmaps are reopened in each worker process
        state.pop("_order", None)
        state.pop("_order_epoch", None)
        return state

    @property
    def rank_world(self) -> tuple[int, int]:
        """`(rank, world_size)`: explicit arguments, else `torch.distributed`, else `(0, 1)`."""
        if self._world is not None:
            return (self._rank or 0), self._world
        rank, world = dist_rank_world()
        return (self._rank if self._rank is not None else rank), world

    @property
    def batches_per_epoch(self) -> int:
        """Batches each rank gets per epoch: `N // (world_size * batch_size)`."""
        self._open()
        _, world = self.rank_world
        nb = self.count // (world * self.batch_size)
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
        return self._position // self.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of `epoch` (needed with a plain DataLoader
        over a finite stream; `mixshard.loader` does it by itself)."""
        self._position = epoch * self.batches_per_epoch

    def state_dict(self) -> dict[str, Any]:
        """Where the stream is: restore with `load_state_dict` to continue with exactly the
        batches an uninterrupted run would have made (same seed, world size, batch size)."""
        nb = self.batches_per_epoch
        return {
            "version": _STATE_VERSION,
            "epoch": self._position // nb,
            "batch": self._position % nb,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "world_size": self.rank_world[1],
            "count": self.count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict()`."""
        mine = self.state_dict()
        for key in ("version", "seed", "batch_size", "world_size", "count"):
            if state.get(key) != mine[key]:
                raise ValueError(
                    f"state_dict was saved with {key}={state.get(key)!r}, this "
                    f"stream has {key}={mine[key]!r}: the batches would differ"
                )
        self._position = int(state["epoch"]) * self.batches_per_epoch + int(state["batch"])

    # ------------------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[Any]:
        self._open()
        nb = self.batches_per_epoch
        start = self._position
        end = None if self.infinite else (start // nb + 1) * nb
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        batches = self._local_batches if self.is_local else self._remote_batches
        for k, batch in batches(start, end, wid, nw, nb):
            if info is None:
                self._position = k + 1
            yield batch
        if info is None and end is not None:
            self._position = end

    @property
    def is_local(self) -> bool:
        """True for a pack folder (mmap + gather), False for shard URLs."""
        return self._urls is None

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.count, dtype=np.int64)
        return np.random.default_rng([self.seed, epoch]).permutation(self.count)

    def _batch_index(self, k: int, nb: int) -> np.ndarray:
        """Local path: the images of batch k, slice j of epoch e's permutation for this rank."""
        epoch, j = divmod(k, nb)
        if getattr(self, "_order_epoch", None) != epoch:
            self._order, self._order_epoch = self._epoch_order(epoch), epoch
        first = (self.rank_world[0] * nb + j) * self.batch_size
        return self._order[first : first + self.batch_size]

    def _make_local(self, index: np.ndarray, pin: bool = False) -> Any:
        images = torch.from_numpy(self._local.gather(index))
        if pin:
            images = images.pin_memory()
        if not self.labels:
            return images
        labels = torch.from_numpy(self._local.labels(index))
        return images, (labels.pin_memory() if pin else labels)

    def _local_batches(self, start, end, wid, nw, nb):
        k = start + wid
        while end is None or k < end:
            yield k, self._make_local(self._batch_index(k, nb))
            k += nw

    # Remote: the rank's share of an epoch is a contiguous run of the epoch's shard sequence;
    # worker role r (batches with k % nw == r) reads its own contiguous part of that run.
    def _role_counts(self, epoch: int, nb: int, nw: int) -> list[int]:
        first = epoch * nb
        return [len(range(first + (r - first) % nw, first + nb, nw)) for r in range(nw)]

    def _remote_batches(self, start, end, wid, nw, nb):
        rank, _ = self.rank_world
        k = start + wid
        role = k % nw
        epoch = k // nb
        while end is None or k < end:
            counts = self._role_counts(epoch, nb, nw)
            first = rank * nb * self.batch_size + sum(counts[:role]) * self.batch_size
            mine = range(epoch * nb + (role - epoch * nb) % nw, (epoch + 1) * nb, nw)
            failures: list[str] = []
            produced = self._remote_role(
                epoch, role, nw, first, counts[role] * self.batch_size, failures
            )
            made = 0
            for kk, batch in zip(mine, produced):
                made += 1
                if kk >= k and (end is None or kk < end):
                    yield kk, batch
            produced.close()
            if failures and not made and len(mine):
                # Without this, an endless stream over only bad shards would wait forever.
                raise MixshardError(
                    f"no batch could be made: every shard read was bad "
                    f"({len(failures)}, first: {failures[0]})"
                )
            epoch += 1
            k = max(k, epoch * nb + (role - epoch * nb) % nw)

    def _remote_role(self, epoch, role, nw, first, length, failures):
        """Batches from images [first, first + length) of the epoch's shard sequence."""
        shards = list(self._urls)
        if self.shuffle:
            perm = np.random.default_rng([self.seed, epoch, 7]).permutation(len(shards))
            shards = [shards[i] for i in perm]
        rank, world = self.rank_world
        rng = np.random.default_rng([self.seed, epoch, rank, world, role, nw])
        size, batch = self.manifest.size, self.batch_size
        cap = max(batch, self.shuffle_blocks * self.manifest.block_size) if self.shuffle else batch
        pool = np.empty((cap + self.manifest.block_size, 3, size, size), np.uint8)
        pool_labels = np.empty(len(pool), np.int64)
        n = 0
        pos = 0  # index of the shard's first image in the epoch sequence
        for url, shard in shards:
            if pos >= first + length:
                break
            if pos + shard.count <= first:
                pos += shard.count
                continue
            shard_end = pos + shard.count
            try:
                for images, labels in read_blocks(url, shard, size):
                    lo, hi = max(first - pos, 0), min(first + length - pos, len(images))
                    pos += len(images)
                    if lo < hi:
                        m = hi - lo
                        pool[n : n + m], pool_labels[n : n + m] = images[lo:hi], labels[lo:hi]
                        n += m
                        while n >= cap:
                            yield self._draw(pool, pool_labels, n, rng)
                            n -= batch
                    if first + length <= pos < shard_end:
                        break  # the rest of this shard belongs to the next worker
            except ShardError as exc:
                if self.on_error != "skip":
                    raise
                warn_bad_shard(str(exc))
                failures.append(str(exc))
            pos = shard_end
        while n >= batch:
            yield self._draw(pool, pool_labels, n, rng)
            n -= batch

    def _draw(self, pool, pool_labels, n, rng):
        """Take one batch out of the first `n` pool images: random ones when shuffling, and
        move the pool's tail into the holes (at most one batch of copies)."""
        batch = self.batch_size
        images = torch.empty((batch,) + pool.shape[1:], dtype=torch.uint8)
        if not self.shuffle:  # first in, first out
            images.numpy()[:] = pool[:batch]
            labels = torch.from_numpy(pool_labels[:batch].copy()) if self.labels else None
            pool[: n - batch], pool_labels[: n - batch] = pool[batch:n], pool_labels[batch:n]
            return (images, labels) if self.labels else images
        pick = rng.choice(n, batch, replace=False)
        np.take(pool, pick, axis=0, out=images.numpy())
        labels = torch.from_numpy(pool_labels[pick]) if self.labels else None
        tail = np.arange(n - batch, n)
        holes = np.sort(pick[pick < n - batch])
        movers = np.setdiff1d(tail, pick, assume_unique=True)
        pool[holes], pool_labels[holes] = pool[movers], pool_labels[movers]
        return (images, labels) if self.labels else images


def loader(
    source: str | os.PathLike | list[str],
    batch_size: int = 256,
    *,
    num_workers: int = 4,
    pin_memory: bool = True,
    prefetch_factor: int | None = None,
    workers: str = "auto",
    **stream_kw: Any,
) -> Any:
    """A ready-to-train loader of uint8 batches from a pack.

    Args:
        source: pack folder or shard URLs (see `ShardStream`).
        batch_size: images per batch.
        num_workers: workers preparing batches ahead (0: made on demand in this process).
            They start on the first iteration and live until `close()`; epochs do not
            respawn them. The batches are the same whatever the number (local packs).
        pin_memory: pin batches for fast copies to CUDA (ignored without CUDA).
        prefetch_factor: batches each worker prepares ahead (default 2).
        workers: `"auto"` (threads for a local pack, DataLoader processes for URLs),
            `"thread"` or `"process"`.
        **stream_kw: `ShardStream` options (shuffle, infinite, seed, rank, world_size, labels,
            on_error, manifest).

    Returns:
        A `Loader`: iterate it (one epoch per `for`, or forever with `infinite=True`);
        `state_dict()` / `load_state_dict()` resume mid-epoch.

    Example:
        >>> for images in mixshard.loader("data/coco", 256, num_workers=4, infinite=True):
        ...     ...
    """
    from .loading import Loader

    stream = ShardStream(source, batch_size, **stream_kw)
    return Loader(stream, num_workers, pin_memory, prefetch_factor, workers)

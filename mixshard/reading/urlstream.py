"""Batches from shard URLs: shards streamed in a per-epoch order through a shuffle buffer.

A rank's share of an epoch is a contiguous run of the epoch's shard sequence; worker role `r`
(the batches with `k % workers == r`) reads its own contiguous part of that run. A shard
whose images fall to several roles is streamed by each of them, from its start: the bytes of
most shards are fetched once per epoch, of shards at the seams between roles more than once.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..core.errors import MixshardError, ShardError
from . import order
from .local import warn_bad
from .remote import read_blocks

if TYPE_CHECKING:
    from .stream import ShardStream


def remote_batches(
    stream: ShardStream, start: int, end: int | None, wid: int, nw: int, nb: int
) -> Iterator[tuple[int, Any]]:
    """`(k, batch)` for the batches worker `wid` of `nw` makes, from batch `start` on."""
    rank, _ = stream.rank_world
    k = start + wid
    role = k % nw
    epoch = k // nb
    while end is None or k < end:
        counts = order.role_counts(epoch, nb, nw)
        first = (rank * nb + sum(counts[:role])) * stream.batch_size
        mine = order.role_batches(epoch, nb, role, nw)
        failures: list[str] = []
        produced = _role_batches(
            stream, epoch, role, nw, first, counts[role] * stream.batch_size, failures
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
        k = max(k, order.role_batches(epoch, nb, role, nw).start)


def _role_batches(
    stream: ShardStream, epoch: int, role: int, nw: int, first: int, length: int, failures: list
) -> Generator[Any, None, None]:
    """Batches from images [first, first + length) of the epoch's shard sequence."""
    shards = list(stream.urls or [])
    if stream.shuffle:
        perm = np.random.default_rng([stream.seed, epoch, 7]).permutation(len(shards))
        shards = [shards[i] for i in perm]
    rank, world = stream.rank_world
    rng = np.random.default_rng([stream.seed, epoch, rank, world, role, nw])
    pool = _Pool(stream, rng)
    pos = 0  # number of the shard's first image in the epoch sequence
    for url, shard in shards:
        if pos >= first + length:
            break
        shard_end = pos + shard.count
        if shard_end <= first:
            pos = shard_end
            continue
        try:
            for images, labels in read_blocks(url, shard, stream.manifest.size):
                lo, hi = max(first - pos, 0), min(first + length - pos, len(images))
                pos += len(images)
                if lo < hi:
                    yield from pool.add(images[lo:hi], labels[lo:hi])
                if first + length <= pos < shard_end:
                    break  # the rest of this shard belongs to the next worker
        except ShardError as exc:
            if stream.on_error != "skip":
                raise
            warn_bad("shard", str(exc))
            failures.append(str(exc))
        pos = shard_end
    yield from pool.drain()


class _Pool:
    """The shuffle buffer of a remote reader: batches are drawn from it at random (or first in,
    first out without shuffling); at most `shuffle_blocks` blocks are held."""

    def __init__(self, stream: ShardStream, rng: np.random.Generator) -> None:
        self.stream, self.rng = stream, rng
        m = stream.manifest
        batch = stream.batch_size
        self.cap = max(batch, stream.shuffle_blocks * m.block_size) if stream.shuffle else batch
        self.images = np.empty((self.cap + m.block_size, 3, m.size, m.size), np.uint8)
        self.labels = np.empty(len(self.images), np.int64)
        self.n = 0

    def add(self, images: np.ndarray, labels: np.ndarray) -> Iterator[Any]:
        m = len(images)
        self.images[self.n : self.n + m], self.labels[self.n : self.n + m] = images, labels
        self.n += m
        while self.n >= self.cap:
            yield self._draw()

    def drain(self) -> Iterator[Any]:
        while self.n >= self.stream.batch_size:
            yield self._draw()

    def _draw(self) -> Any:
        """Take one batch out of the pool: random images when shuffling, and move the pool's
        tail into the holes (at most one batch of copies)."""
        batch, n = self.stream.batch_size, self.n
        images = torch.empty((batch,) + self.images.shape[1:], dtype=torch.uint8)
        if not self.stream.shuffle:  # first in, first out: keep the stored order
            images.numpy()[:] = self.images[:batch]
            labels = torch.from_numpy(self.labels[:batch].copy())
            self.images[: n - batch] = self.images[batch:n]
            self.labels[: n - batch] = self.labels[batch:n]
        else:
            pick = self.rng.choice(n, batch, replace=False)
            np.take(self.images, pick, axis=0, out=images.numpy())
            labels = torch.from_numpy(self.labels[pick])
            holes = np.sort(pick[pick < n - batch])
            movers = np.setdiff1d(np.arange(n - batch, n), pick, assume_unique=True)
            self.images[holes], self.labels[holes] = self.images[movers], self.labels[movers]
        self.n -= batch
        return (images, labels) if self.stream.labels else images

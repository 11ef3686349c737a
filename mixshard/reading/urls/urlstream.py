"""Batches from shard URLs: shards streamed in a per-epoch order through a shuffle buffer.

A rank's share of an epoch is a contiguous run of the epoch's shard sequence; worker role `r`
(the batches with `k % workers == r`) reads its own contiguous part of that run. A shard
whose images fall to several roles is streamed by each of them, from its start: the bytes of
most shards are fetched once per epoch, of shards at the seams between roles more than once.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...core.errors import MixshardError, ShardError
from ...core.manifest import ShardInfo
from ..batches import order
from ..pack.shardfiles import warn_bad
from .remote import read_blocks


@dataclass(frozen=True)
class UrlBatches:
    """The batches of a stream over shard URLs (`(url, shard)` pairs, in the order given); the
    other fields as `ShardStream` has them (`size`: image side, `block_size`: images a block).
    """

    urls: tuple[tuple[str, ShardInfo], ...]
    size: int
    block_size: int
    batch_size: int
    shuffle: bool
    seed: int
    labels: bool
    on_error: str
    shuffle_blocks: int

    def batches(
        self, start: int, end: int | None, wid: int, nw: int, nb: int, rank: int, world: int
    ) -> Iterator[tuple[int, Any]]:
        """`(k, batch)` for the batches worker `wid` of `nw` makes from `start` (to `end`)."""
        k = start + wid
        role = k % nw
        epoch = k // nb
        while end is None or k < end:
            first, length = order.role_span(epoch, nb, rank, role, nw, self.batch_size)
            mine = order.role_batches(epoch, nb, role, nw)
            failures: list[str] = []
            rng = np.random.default_rng([self.seed, epoch, rank, world, role, nw])
            produced = self._span(epoch, rng, first, length, failures)
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

    def _span(
        self, epoch: int, rng: np.random.Generator, first: int, length: int, failures: list
    ) -> Generator[Any, None, None]:
        """Batches from images [first, first + length) of the epoch's shard sequence."""
        shards = [
            self.urls[i]
            for i in order.shard_sequence(len(self.urls), self.seed, epoch, self.shuffle)
        ]
        pool = _Pool(self, rng)
        pos = 0  # number of the shard's first image in the epoch sequence
        for url, shard in shards:
            if pos >= first + length:
                break
            shard_end = pos + shard.count
            if shard_end <= first:
                pos = shard_end
                continue
            try:
                for images, labels in read_blocks(url, shard, self.size):
                    lo, hi = max(first - pos, 0), min(first + length - pos, len(images))
                    pos += len(images)
                    if lo < hi:
                        yield from pool.add(images[lo:hi], labels[lo:hi])
                    if first + length <= pos < shard_end:
                        break  # the rest of this shard belongs to the next worker
            except ShardError as exc:
                if self.on_error != "skip":
                    raise
                warn_bad("shard", str(exc))
                failures.append(str(exc))
            pos = shard_end
        yield from pool.drain()


class _Pool:
    """The shuffle buffer of a remote reader: batches are drawn from it at random (or first in,
    first out without shuffling); at most `shuffle_blocks` blocks are held."""

    def __init__(self, stream: UrlBatches, rng: np.random.Generator) -> None:
        self.stream, self.rng = stream, rng
        batch, block = stream.batch_size, stream.block_size
        self.cap = max(batch, stream.shuffle_blocks * block) if stream.shuffle else batch
        self.images = np.empty((self.cap + block, 3, stream.size, stream.size), np.uint8)
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

"""The block order split between process workers: each block is read by one worker.

A DataLoader takes its workers' batches round robin (role `r` yields the positions
`k % nw == r`), and nearly every batch of a block-order window takes images of every block of
it, so each worker would read the whole pack. Here role `r` makes a contiguous part of the epoch
instead (`order.role_counts` batches), from an epoch sequence whose windows never cross the
parts, and reads only its own images of a block two parts meet in (`blockfeed.py`). So with
`nw > 1` process workers the batches depend on `nw` (fixed for a given `nw`: resumption is exact).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import order


class RoleOrder(order.EpochOrder):
    """`order.EpochOrder` of the block order whose epoch sequence has no window across the
    parts of the `nw` worker roles (of every rank)."""

    def __init__(self, base: order.EpochOrder, nb: int, world: int, nw: int, batch: int):
        super().__init__("block", base.block_counts, base.seed, base.window, True, base.run)
        self.nb, self.world, self.nw, self.batch = nb, world, nw, batch

    def _make(self, epoch: int) -> np.ndarray:
        counts = self.block_counts
        stored = np.concatenate(order.run_images(counts, self.seed, epoch, self.run))
        per_role = order.role_counts(epoch, self.nb, self.nw)
        cuts = [0]
        for _ in range(self.world):
            for n in per_role:
                cuts.append(cuts[-1] + n * self.batch)
        cuts.append(len(stored))  # the images left over
        per_window = max(1, self.window * int(round(float(counts.mean()))))
        parts = []
        for s, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
            for w, a in enumerate(range(lo, hi, per_window)):
                piece = stored[a : min(hi, a + per_window)]
                parts.append(np.random.default_rng([self.seed, epoch, 3, s, w]).permutation(piece))
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def role_batches(
    batches_of: Any, start: int, end: int | None, wid: int, nw: int, nb: int, rank: int, world: int
) -> Iterator[tuple[int, Any]]:
    """`(position, batch)` for worker `wid` of `nw` (a `PackBatches` in the block order):
    the positions `start + wid`, `+ nw`, ..., each made from its role's part of the epoch."""
    mine = copy.copy(batches_of)  # the same batches, from the roles' epoch sequences
    mine.epochs = RoleOrder(batches_of.epochs, nb, world, nw, batches_of.batch_size)
    p = start + wid
    role = p % nw
    while end is None or p < end:
        epoch = p // nb
        ks = order.role_batches(epoch, nb, role, nw)
        last = ks.stop if end is None else min(ks.stop, end)
        first_i, stop_i = (p - ks.start) // nw, len(range(ks.start, last, nw))
        base = epoch * nb + sum(order.role_counts(epoch, nb, nw)[:role])
        content = range(base + first_i, base + stop_i)  # consecutive batches of the epoch
        with contextlib.closing(mine.reader(content, nb, rank)) as reader:
            for k in content:
                yield p, reader.get(k)
                p += nw

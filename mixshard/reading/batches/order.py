"""Which images make which batch: pure functions of (seed, epoch, rank, ...), no I/O.

Images are numbered `0 .. count-1` in stored order. Per epoch an *epoch sequence* orders them
all (`"global"`: a permutation; `"block"`: runs of whole blocks in windows; docs/design.md).
Batch `k` is batch `j = k % nb` of epoch `k // nb` (`nb` batches per rank and epoch), and rank
`r` takes the positions `[(r * nb + j) * batch, ... + batch)` of the epoch sequence: so batch
`k` does not depend on who makes it, which is what makes resumption exact.
"""

from __future__ import annotations

import numpy as np

from ...core import locks


def batches_per_rank(count: int, world_size: int, batch_size: int) -> int:
    return count // (world_size * batch_size)


def global_sequence(count: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """Epoch sequence of the global order: a permutation of `range(count)` per (seed, epoch)."""
    if not shuffle:
        return np.arange(count, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(count)


def block_sequence(
    block_counts: np.ndarray,
    seed: int,
    epoch: int,
    window: int,
    shuffle: bool = True,
    run: int = 1,
) -> np.ndarray:
    """Epoch sequence of the block order: runs of `run` consecutive blocks (read with one
    request) in a per-epoch permutation, cut into windows of `window` blocks (rounded up to
    whole runs) whose images are shuffled among themselves. `block_counts`: images per block."""
    counts = np.asarray(block_counts, dtype=np.int64)
    if not shuffle:
        return np.arange(int(counts.sum()), dtype=np.int64)
    runs = run_images(counts, seed, epoch, run)
    per_window = -(-window // run)  # runs in a window
    parts = []
    for w, lo in enumerate(range(0, len(runs), per_window)):
        images = np.concatenate(runs[lo : lo + per_window])
        parts.append(np.random.default_rng([seed, epoch, 2, w]).permutation(images))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def run_images(counts: np.ndarray, seed: int, epoch: int, run: int) -> list[np.ndarray]:
    """Epoch `epoch`'s permutation of the runs of `run` consecutive blocks (`counts`: images
    per block), each run as its image numbers."""
    ends, n = np.concatenate([[0], np.cumsum(counts)]), len(counts)
    runs = np.random.default_rng([seed, epoch, 1]).permutation(-(-n // run))
    return [np.arange(ends[r * run], ends[min(n, (r + 1) * run)]) for r in runs.tolist()]


def run_of(r: int, run: int, blocks: int) -> range:
    """The blocks of run `r`: `run` consecutive ones (the last run may be shorter)."""
    return range(r * run, min((r + 1) * run, blocks))


def batch_span(k: int, nb: int, rank: int, batch_size: int) -> tuple[int, int]:
    """`(epoch, first position)` of batch `k` of `rank` in its epoch sequence."""
    epoch, j = divmod(k, nb)
    return epoch, (rank * nb + j) * batch_size


def inverse(sequence: np.ndarray) -> np.ndarray:
    """Position of each image in an epoch sequence: `inverse(seq)[seq[p]] == p`."""
    where = np.empty(len(sequence), np.int64)
    where[sequence] = np.arange(len(sequence), dtype=np.int64)
    return where


def batch_places(
    positions: np.ndarray, epoch: int, nb: int, rank: int, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Where images at `positions` of epoch `epoch`'s sequence go for `rank`: `(batch k, row)`
    each, the inverse of `batch_span`; `k` is -1 for images of other ranks and those left over.
    """
    rel = np.asarray(positions, dtype=np.int64) - rank * nb * batch_size
    mine = (rel >= 0) & (rel < nb * batch_size)
    k = np.where(mine, epoch * nb + rel // batch_size, -1)
    return k, np.where(mine, rel % batch_size, -1)


def worker_batches(start: int, end: int | None, worker: int, workers: int) -> range:
    """The batches worker `worker` of `workers` makes, from `start` on: every `workers`-th one,
    so that a round robin over the workers hands them out in order."""
    first = start + worker
    stop = end if end is not None else 1 << 62
    return range(first, max(first, stop), workers)


def role_counts(epoch: int, nb: int, workers: int) -> list[int]:
    """How many of epoch `epoch`'s batches each worker role `r` makes (`k % workers == r`)."""
    return [len(role_batches(epoch, nb, r, workers)) for r in range(workers)]


def role_batches(epoch: int, nb: int, role: int, workers: int) -> range:
    """The batch positions of `epoch` that worker role `role` makes."""
    first = epoch * nb
    return range(first + (role - first) % workers, first + nb, workers)


class EpochOrder:
    """The epoch sequences of one local stream, each computed once, with its inverse on demand.
    Two epochs are kept: around an epoch's end, workers make batches of both. Thread-safe;
    pickled without its cache."""

    def __init__(
        self,
        kind: str,
        block_counts: np.ndarray,
        seed: int,
        window: int,
        shuffle: bool,
        run: int = 1,
    ) -> None:
        self.kind, self.block_counts = kind, np.asarray(block_counts, np.int64)
        self.seed, self.window, self.shuffle, self.run = seed, window, shuffle, run
        self.count = int(self.block_counts.sum())
        self._kept: dict[int, list] = {}  # epoch -> [sequence, its inverse or None]
        self._lock = locks.Lock()

    def _make(self, epoch: int) -> np.ndarray:
        if self.kind == "block":
            return block_sequence(
                self.block_counts, self.seed, epoch, self.window, self.shuffle, self.run
            )
        return global_sequence(self.count, self.seed, epoch, self.shuffle)

    def _entry(self, epoch: int, with_inverse: bool) -> list:
        with self._lock:
            kept = self._kept.get(epoch)
            if kept is None:
                self._kept = {e: s for e, s in self._kept.items() if e > epoch - 2}
                kept = self._kept[epoch] = [self._make(epoch), None]
            if with_inverse and kept[1] is None:
                kept[1] = inverse(kept[0])
            return kept

    def sequence(self, epoch: int) -> np.ndarray:
        return self._entry(epoch, False)[0]

    def with_inverse(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        kept = self._entry(epoch, True)
        return kept[0], kept[1]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_kept": {}, "_lock": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = locks.Lock()

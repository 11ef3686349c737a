"""The pure ordering functions: which images make which batch, without reading any file."""

from __future__ import annotations

import numpy as np
import pytest

from mixshard.reading.batches import order

# Blocks of a pack with two shards of 20 images in blocks of 8: 8, 8, 4, 8, 8, 4.
COUNTS = np.array([8, 8, 4, 8, 8, 4])
N = int(COUNTS.sum())


def sequence(kind: str, epoch: int, seed: int = 0, window: int = 2) -> np.ndarray:
    if kind == "global":
        return order.global_sequence(N, seed, epoch)
    return order.block_sequence(COUNTS, seed, epoch, window)


def rank_batches(kind: str, epoch: int, rank: int, world: int, batch: int) -> list[list[int]]:
    nb = order.batches_per_rank(N, world, batch)
    out = []
    for k in range(epoch * nb, (epoch + 1) * nb):
        e, first = order.batch_span(k, nb, rank, batch)
        assert e == epoch
        out.append(sequence(kind, e)[first : first + batch].tolist())
    return out


@pytest.mark.parametrize("kind", ["global", "block"])
def test_each_image_once_per_epoch(kind):
    for epoch in range(3):
        seq = sequence(kind, epoch)
        assert sorted(seq.tolist()) == list(range(N))


@pytest.mark.parametrize("kind", ["global", "block"])
def test_new_order_per_epoch_and_the_same_for_a_seed(kind):
    assert sequence(kind, 0).tolist() != sequence(kind, 1).tolist()
    assert sequence(kind, 1).tolist() == sequence(kind, 1).tolist()
    assert sequence(kind, 0, seed=1).tolist() != sequence(kind, 0).tolist()


@pytest.mark.parametrize("kind", ["global", "block"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_get_equal_full_batches_of_disjoint_images(kind, world):
    batch = 4
    per_rank = [rank_batches(kind, 0, r, world, batch) for r in range(world)]
    assert {len(b) for b in per_rank} == {N // (world * batch)}
    assert all(len(b) == batch for batches in per_rank for b in batches)
    seen = [i for batches in per_rank for b in batches for i in b]
    assert len(seen) == len(set(seen)) == (N // (world * batch)) * world * batch


def test_block_order_keeps_a_window_of_blocks_together():
    window = 2
    starts = np.concatenate([[0], np.cumsum(COUNTS)[:-1]])
    block_of = np.searchsorted(starts, np.arange(N), side="right") - 1
    seq = order.block_sequence(COUNTS, 5, 0, window)
    blocks = block_of[seq]
    # consecutive runs of two blocks: the images of a run come from those blocks only
    pos = 0
    runs = []
    while pos < N:
        first = blocks[pos]
        run_blocks = {int(first)}
        end = pos
        while end < N and (blocks[end] in run_blocks or len(run_blocks) < window):
            run_blocks.add(int(blocks[end]))
            end += 1
        runs.append(run_blocks)
        pos = end
    assert len(runs) == 3 and sorted(b for r in runs for b in r) == list(range(6))
    # within a window the images are shuffled, not block after block
    assert blocks[:12].tolist() != sorted(blocks[:12].tolist())


def test_unshuffled_sequences_are_the_stored_order():
    assert order.global_sequence(N, 0, 3, shuffle=False).tolist() == list(range(N))
    assert order.block_sequence(COUNTS, 0, 3, 2, shuffle=False).tolist() == list(range(N))


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_workers_split_batches_round_robin(workers):
    start, end = 5, 23
    made = {w: list(order.worker_batches(start, end, w, workers)) for w in range(workers)}
    merged = []
    for i in range(end - start):
        w = i % workers
        merged.append(made[w][i // workers])
    assert merged == list(range(start, end))
    assert list(order.worker_batches(0, None, 1, 2)[:3]) == [1, 3, 5]


def test_resuming_at_batch_k_gives_the_same_batches():
    nb = order.batches_per_rank(N, 1, 4)
    ks = range(0, 3 * nb)
    full = [order.batch_span(k, nb, 0, 4) for k in ks]
    resumed = [order.batch_span(k, nb, 0, 4) for k in range(7, 3 * nb)]
    assert resumed == full[7:]


def test_role_counts_cover_an_epoch():
    for workers in (1, 2, 5):
        for epoch in range(3):
            counts = order.role_counts(epoch, 7, workers)
            assert sum(counts) == 7
            ks = sorted(k for r in range(workers) for k in order.role_batches(epoch, 7, r, workers))
            assert ks == list(range(epoch * 7, epoch * 7 + 7))


def distinct_per_batch(labels: np.ndarray, seq: np.ndarray, batch: int) -> float:
    batches = labels[seq[: len(seq) // batch * batch]].reshape(-1, batch)
    return float(np.mean([len(np.unique(b)) for b in batches]))


def test_block_order_on_a_shuffled_pack_mixes_classes_like_a_uniform_draw():
    classes, per_class, block = 365, 100, 256
    items = np.repeat(np.arange(classes), per_class)  # sorted by class, as scanned
    labels = items[np.random.default_rng([0, 1]).permutation(len(items))]  # packed shuffled
    counts = np.full(len(labels) // block, block)
    counts = np.append(counts, len(labels) - counts.sum())
    counts = counts[counts > 0]
    uniform = distinct_per_batch(labels, order.global_sequence(len(labels), 3, 0), block)
    blocked = distinct_per_batch(labels, order.block_sequence(counts, 3, 0, 64), block)
    single = distinct_per_batch(labels, order.block_sequence(counts, 3, 0, 1), block)
    runs = distinct_per_batch(labels, order.block_sequence(counts, 3, 0, 64, run=4), block)
    assert abs(blocked - uniform) / uniform < 0.03
    assert abs(single - uniform) / uniform < 0.03
    assert abs(runs - uniform) / uniform < 0.03  # runs of 4 consecutive blocks read together
    # an unshuffled pack is where windows are needed: whole blocks alone hold few classes
    sorted_blocks = distinct_per_batch(items, order.block_sequence(counts, 3, 0, 1), block)
    assert sorted_blocks < 0.1 * uniform


def test_runs_of_blocks_stay_together_in_one_window():
    counts = np.full(22, 4)
    starts = np.arange(22) * 4
    seq = order.block_sequence(counts, 7, 2, window=5, run=3)  # window: 2 runs = 6 blocks
    assert sorted(seq.tolist()) == list(range(88))
    blocks = np.searchsorted(starts, seq, side="right") - 1
    windows = [set(blocks[lo : lo + 24].tolist()) for lo in range(0, 88, 24)]
    for r in range(8):  # every run (the last: blocks 21 alone) lies in one window
        members = set(order.run_of(r, 3, 22))
        assert sum(bool(members & w) for w in windows) == 1, r
    assert order.run_of(7, 3, 22) == range(21, 22)
    assert (
        order.block_sequence(counts, 7, 2, 5, run=1).tolist()
        == order.block_sequence(counts, 7, 2, 5).tolist()
    )


def test_inverse_gives_each_image_its_position():
    seq = order.block_sequence(COUNTS, 3, 1, 2)
    where = order.inverse(seq)
    assert where[seq].tolist() == list(range(N))


@pytest.mark.parametrize("world", [1, 2, 3])
def test_batch_places_is_the_inverse_of_batch_span(world):
    """Every image of a rank's batches is placed at its batch and row; the others nowhere."""
    batch, epoch = 4, 2
    nb = order.batches_per_rank(N, world, batch)
    seq = sequence("block", epoch)
    for rank in range(world):
        k, row = order.batch_places(order.inverse(seq), epoch, nb, rank, batch)
        placed = {}
        for j in range(epoch * nb, (epoch + 1) * nb):
            _, first = order.batch_span(j, nb, rank, batch)
            for r, image in enumerate(seq[first : first + batch].tolist()):
                placed[image] = (j, r)
        assert {i: (int(k[i]), int(row[i])) for i in placed} == placed
        others = np.setdiff1d(np.arange(N), list(placed))
        assert (k[others] == -1).all() and (row[others] == -1).all()

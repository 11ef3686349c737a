"""The block cache's choices as pure functions: which block goes, what a policy fetches."""

from __future__ import annotations

import belady
import numpy as np
import pytest

from mixshard.core.manifest import Manifest
from mixshard.reading.batches import order
from mixshard.reading.batches.blockfeed import BlockFeed
from mixshard.reading.pack.reader import PackReader
from mixshard.reading.pack.shardfiles import FolderFiles
from mixshard.reading.store import eviction
from mixshard.reading.store.eviction import NEVER, STRIDE, Schedule


def test_belady_drops_the_block_needed_furthest_away():
    nxt = {1: 10, 2: 40, 3: 25}
    assert belady.furthest_victim([1, 2, 3], nxt, {}) == 2
    # a block never needed again goes first; among those, the least recently used
    assert belady.furthest_victim([1, 2, 3, 4, 5], nxt, {4: 7, 5: 3}) == 5
    assert belady.furthest_victim([], nxt, {}) is None


def test_lru_drops_the_least_recently_used():
    assert belady.lru_victim([1, 2, 3], {1: 5, 2: 2, 3: 9}) == 2
    assert belady.lru_victim([1, 2, 3], {1: 5, 3: 9}) == 2  # never used: first
    assert belady.lru_victim([], {}) is None


def test_simulated_fetches_of_a_cyclic_order():
    # four blocks of 10 bytes read 0 1 2 3 0 1 2 3, a cache of 20 bytes
    uses, sizes = [0, 1, 2, 3] * 2, [10] * 4
    assert belady.simulate(uses, sizes, 20, "lru") == [10] * 8  # LRU misses every read
    # Belady keeps 0 and 1 (needed before 2 and 3 come again): two hits
    assert belady.simulate(uses, sizes, 20, "future") == [10] * 4 + [0, 0, 10, 10]
    assert belady.simulate(uses, sizes, 40, "future") == [10] * 4 + [0] * 4
    assert belady.simulate([0, 0], [50], 20) == [50, 50]  # larger than the cache: not kept
    with pytest.raises(ValueError, match="policy must be one of future, lru"):
        belady.simulate(uses, sizes, 20, "fifo")


def test_at_half_the_pack_a_second_shuffled_epoch_fetches_about_half_with_belady():
    rng = np.random.default_rng(0)
    blocks = 200
    uses = np.concatenate([rng.permutation(blocks) for _ in range(3)])
    sizes = np.full(blocks, 100)
    per_epoch = {}
    for policy in belady.POLICIES:
        fetched = belady.simulate(uses.tolist(), sizes, blocks * 100 // 2, policy)
        per_epoch[policy] = [
            sum(fetched[e * blocks : (e + 1) * blocks]) / (blocks * 100) for e in range(3)
        ]
    assert per_epoch["future"][0] == per_epoch["lru"][0] == 1.0
    assert per_epoch["future"][1] <= 0.6 and per_epoch["future"][2] <= 0.6
    assert per_epoch["lru"][1] >= 0.85


def test_a_schedule_follows_its_reader_across_epochs():
    orders = {0: np.array([2, 0, 1]), 1: np.array([1, 2, 0]), 2: np.array([0, 1, 2])}
    s = Schedule(lambda e: orders[e], 3)
    assert s.next_uses().tolist() == [1, 2, 0]
    assert list(s.upcoming())[:3] == [(0, 2), (1, 0), (2, 1)]
    s.take(2)
    assert s.next_uses()[2] == STRIDE + 1  # its use in epoch 1
    s.take(1)  # read before block 0 (reader threads): still epoch 0's use
    assert s.next_uses()[1] == STRIDE and s.next_uses()[0] == 1
    assert [b for _, b in s.upcoming()][:3] == [0, 1, 2]
    s.take(0)
    assert s.now == 2 and s.next_uses()[0] == STRIDE + 2
    s.take(1)  # epoch 1 begins: epoch 2 becomes known
    assert s.next_uses()[1] == 2 * STRIDE + 1


def test_without_a_schedule_nothing_is_known():
    s = Schedule(None, 4)
    s.take(3)
    assert s.next_uses()[3] == NEVER and list(s.upcoming()) == []


def test_a_schedule_knows_uses_from_any_time_and_says_which_it_took():
    orders = {0: np.array([2, 0, 1]), 1: np.array([1, 2, 0]), 2: np.array([0, 1, 2])}
    s = Schedule(lambda e: orders[e], 3)
    assert s.next_use_from(2, 0) == 0 and s.next_use_from(2, 1) == STRIDE + 1
    assert s.next_use_from(0, STRIDE + 3) == NEVER  # epoch 2 is not known yet
    assert s.take(0) == 1 and s.take(0) == STRIDE + 2
    assert Schedule(None, 2).take(1) == 0  # a read not foreseen: now


class Planned(FolderFiles):
    """A folder's backend that keeps the plan a store's cache gets (`StoreFiles.expect`)."""

    def expect(self, feed) -> None:
        self.uses_of = eviction.future_uses(feed)


class Recording(PackReader):
    """A local pack that records the blocks its feed reads, in order."""

    read: list[int] = []

    def scatter_run(self, blocks, addresses, drop_cache=False):
        self.read = self.read + list(blocks)
        return super().scatter_run(blocks, addresses, drop_cache)


@pytest.mark.parametrize(("window", "run"), [(64, 4), (64, 1), (2, 2)])
def test_the_plan_is_the_order_the_block_feed_reads_in(pack96, window, run):
    # the cache evicts by this plan: when it listed a batch's blocks in the order the batch
    # first touched them (the feed reads them in block order), a pack of one window was a
    # cyclic scan planned as a shuffled one, and half the pack cached fetched 75-100% of it
    files = Planned(pack96)
    pack = Recording(pack96, Manifest.load(pack96), files=files)  # 12 blocks of 8 in 4 shards
    epochs = order.EpochOrder("block", pack.block_count, 5, window, True, run)
    nb = 96 // 8
    feed = BlockFeed(pack, epochs.with_inverse, nb, 0, 8, range(0, 3 * nb), ahead=2, threads=1)
    try:
        for k in range(2 * nb):
            feed.take(k)
    finally:
        feed.close()
    want = np.concatenate([files.uses_of(0), files.uses_of(1)]).tolist()
    assert sorted(files.uses_of(0).tolist()) == list(range(12))
    assert pack.read[:24] == want


def test_a_worker_roles_next_epoch_is_its_part_of_it():
    # roles.py: with 2 process workers and 9 batches an epoch, role 0 makes batches 9-12 of
    # epoch 1 and 18-22 of epoch 2, role 1 13-17 and 23-26, one feed per epoch: the cache
    # knows the next epoch only through this (it evicted by LRU before: 76% of the pack an
    # epoch, with half of it cached)
    assert eviction.feed_batches(range(13, 18), 9, 2, workers=2) == range(23, 27)
    assert eviction.feed_batches(range(10, 13), 9, 2, workers=2) == range(18, 23)  # resumed
    assert eviction.feed_batches(range(13, 18), 9, 1, workers=2) == range(13, 18)
    assert eviction.feed_batches(range(13, 18), 9, 0, workers=2) == range(13, 13)
    # one process, or workers taking every other batch: the range itself, cut to the epoch
    assert eviction.feed_batches(range(13, 18), 9, 2) == range(18, 18)
    assert eviction.feed_batches(range(1, 1 << 62, 2), 9, 1, workers=2) == range(9, 18, 2)
    assert eviction.feed_batches(range(0, 1 << 62), 9, 2) == range(18, 27)

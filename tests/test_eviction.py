"""The block cache's choices as pure functions: which block goes, what a policy fetches."""

from __future__ import annotations

import numpy as np
import pytest

from mixshard.reading.store import eviction
from mixshard.reading.store.eviction import NEVER, STRIDE, Schedule


def test_belady_drops_the_block_needed_furthest_away():
    nxt = {1: 10, 2: 40, 3: 25}
    assert eviction.furthest_victim([1, 2, 3], nxt, {}) == 2
    # a block never needed again goes first; among those, the least recently used
    assert eviction.furthest_victim([1, 2, 3, 4, 5], nxt, {4: 7, 5: 3}) == 5
    assert eviction.furthest_victim([], nxt, {}) is None


def test_lru_drops_the_least_recently_used():
    assert eviction.lru_victim([1, 2, 3], {1: 5, 2: 2, 3: 9}) == 2
    assert eviction.lru_victim([1, 2, 3], {1: 5, 3: 9}) == 2  # never used: first
    assert eviction.lru_victim([], {}) is None


def test_simulated_fetches_of_a_cyclic_order():
    # four blocks of 10 bytes read 0 1 2 3 0 1 2 3, a cache of 20 bytes
    uses, sizes = [0, 1, 2, 3] * 2, [10] * 4
    assert eviction.simulate(uses, sizes, 20, "lru") == [10] * 8  # LRU misses every read
    # Belady keeps 0 and 1 (needed before 2 and 3 come again): two hits
    assert eviction.simulate(uses, sizes, 20, "future") == [10] * 4 + [0, 0, 10, 10]
    assert eviction.simulate(uses, sizes, 40, "future") == [10] * 4 + [0] * 4
    assert eviction.simulate([0, 0], [50], 20) == [50, 50]  # larger than the cache: not kept
    with pytest.raises(ValueError, match="policy must be one of future, lru"):
        eviction.simulate(uses, sizes, 20, "fifo")


def test_at_half_the_pack_a_second_shuffled_epoch_fetches_about_half_with_belady():
    rng = np.random.default_rng(0)
    blocks = 200
    uses = np.concatenate([rng.permutation(blocks) for _ in range(3)])
    sizes = np.full(blocks, 100)
    per_epoch = {}
    for policy in eviction.POLICIES:
        fetched = eviction.simulate(uses.tolist(), sizes, blocks * 100 // 2, policy)
        per_epoch[policy] = [
            sum(fetched[e * blocks : (e + 1) * blocks]) / (blocks * 100) for e in range(3)
        ]
    assert per_epoch["future"][0] == per_epoch["lru"][0] == 1.0
    assert per_epoch["future"][1] <= 0.6 and per_epoch["future"][2] <= 0.6
    assert per_epoch["lru"][1] >= 0.85


def test_a_schedule_follows_its_reader_across_epochs():
    orders = {0: np.array([2, 0, 1]), 1: np.array([1, 2, 0]), 2: np.array([0, 1, 2])}
    s = Schedule(lambda e: orders[e], 3)
    assert [s.next_use(b) for b in range(3)] == [1, 2, 0]
    assert list(s.upcoming())[:3] == [(0, 2), (1, 0), (2, 1)]
    s.take(2)
    assert s.next_use(2) == STRIDE + 1  # its use in epoch 1
    s.take(1)  # read before block 0 (reader threads): still epoch 0's use
    assert s.next_use(1) == STRIDE and s.next_use(0) == 1
    assert [b for _, b in s.upcoming()][:3] == [0, 1, 2]
    s.take(0)
    assert s.now == 2 and s.next_use(0) == STRIDE + 2
    s.take(1)  # epoch 1 begins: epoch 2 becomes known
    assert s.next_use(1) == 2 * STRIDE + 1


def test_without_a_schedule_nothing_is_known():
    s = Schedule(None, 4)
    s.take(3)
    assert s.next_use(3) == NEVER and list(s.upcoming()) == []

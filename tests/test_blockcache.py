"""The block cache under contention: reads that wait for room, fetches ahead, many threads.

A store of bytes in memory stands in for the bucket (the cache's own logic is what is tested;
`test_store_reading.py` runs the same cache against moto's S3 server)."""

from __future__ import annotations

import hashlib
import threading
import time

import belady
import numpy as np
import pytest

from mixshard.reading.store.blockcache import BlockCache
from mixshard.reading.store.cachefiles import claim_part

BLOCK = 4096
BLOCKS = 16


class MemoryStore:
    """`Store`'s reading side over one shard held in memory; counts the ranged reads."""

    def __init__(self, data: bytes, delay: float = 0.0) -> None:
        self.url, self.data, self.delay = "mem://pack", data, delay
        self.reads: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def object_url(self, name: str) -> str:
        return f"{self.url}/{name}"

    def read(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        time.sleep(self.delay)
        with self._lock:
            self.reads.append((start or 0, end or len(self.data)))
        return self.data[start:end]


@pytest.fixture
def shard() -> bytes:
    return np.random.default_rng(5).integers(0, 256, BLOCK * BLOCKS, np.uint8).tobytes()


def make_cache(
    tmp_path, shard: bytes, limit_blocks: int, delay: float = 0.0, policy: str = "future"
) -> BlockCache:
    spans = np.array([(0, i * BLOCK, (i + 1) * BLOCK) for i in range(BLOCKS)], np.int64)
    digests = [hashlib.sha256(shard[s:e]).hexdigest() for _, s, e in spans.tolist()]
    folder, fd = claim_part(tmp_path / "cache")
    store = MemoryStore(shard, delay)
    cache = BlockCache(
        store, [("s.tar", len(shard))], spans, digests, folder, limit_blocks * BLOCK, policy, fd
    )  # type: ignore[arg-type]
    return cache


def held_bytes(cache: BlockCache, blocks: list[int]) -> list[bytes]:
    with open(cache.folder / "s.tar", "rb") as f:
        data = f.read()
    return [data[b * BLOCK : (b + 1) * BLOCK] for b in blocks]


def test_a_read_waiting_for_room_keeps_its_own_blocks(tmp_path, shard):
    # 5 blocks of room; another read holds 2 of them for a while, so a read of 4 blocks gets
    # 3 at once and must wait for the 4th. It used to drop its own fetched blocks to make
    # room for the others, fetching in a circle until the other read let go.
    cache = make_cache(tmp_path, shard, 5)
    try:
        cache.hold([10, 11])
        threading.Timer(0.5, cache.release, ([10, 11],)).start()
        cache.hold([0, 1, 2, 3])
        assert held_bytes(cache, [0, 1, 2, 3]) == [
            shard[b * BLOCK : (b + 1) * BLOCK] for b in range(4)
        ]
        assert cache.fetches == 6  # each block once: no block fetched twice
        assert sorted(cache.store.reads) == sorted(  # type: ignore[attr-defined]
            (b * BLOCK, (b + 1) * BLOCK) for b in (0, 1, 2, 3, 10, 11)
        )
        cache.release([0, 1, 2, 3])
        assert cache.peak <= 5 * BLOCK
    finally:
        cache.close()


def test_a_block_listed_twice_in_one_read_is_pinned_and_released_once(tmp_path, shard):
    cache = make_cache(tmp_path, shard, 4)
    try:
        cache.hold([2, 3, 2])
        assert cache.pins[[2, 3]].tolist() == [1, 1] and cache.fetches == 2
        cache.release([2, 3, 2])
        assert cache.pins.tolist() == [0] * BLOCKS
    finally:
        cache.close()


def test_many_reader_threads_over_a_small_cache_all_finish(tmp_path, shard):
    # 8 threads, each reading runs of 4 blocks, over a cache of 8 blocks with fetches ahead
    # planned in the order they read: every read finishes and gets its own bytes.
    cache = make_cache(tmp_path, shard, 8, delay=0.002)
    rng = np.random.default_rng(1)
    epochs = [rng.permutation(BLOCKS) for _ in range(3)]
    cache.schedule(lambda e: epochs[e] if e < len(epochs) else np.zeros(0, np.int64), 0)
    runs = [epochs[e][i : i + 4].tolist() for e in range(3) for i in range(0, BLOCKS, 4)]
    errors: list[BaseException] = []
    bad: list[list[int]] = []
    queue = list(reversed(runs))
    lock = threading.Lock()

    def reader() -> None:
        while True:
            with lock:
                if not queue:
                    return
                blocks = queue.pop()
            try:
                cache.hold(blocks)
                got = held_bytes(cache, blocks)
                if got != [shard[b * BLOCK : (b + 1) * BLOCK] for b in blocks]:
                    bad.append(blocks)
                cache.release(blocks)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "a read never got its blocks"
        assert errors == [] and bad == []
        assert cache.peak <= 8 * BLOCK
        # 48 reads of 4 blocks: a cache of half the pack fetches far fewer than one per read
        assert BLOCKS <= cache.fetches < 48 * 4
    finally:
        cache.close()


def settled(cache: BlockCache) -> None:
    """Wait until no fetch is under way (those ahead each start the next one they allow)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with cache._cond:
            if not cache._inflight:
                return
        time.sleep(0.001)
    raise AssertionError("fetches never settled")


@pytest.mark.parametrize("kind", ["cyclic", "shuffled"])
def test_fetching_ahead_costs_no_fetch_belady_would_not_make(tmp_path, shard, kind):
    # Half the pack cached, blocks read one at a time in the planned order. Fetching ahead
    # used to drop, for a block needed at t, a block needed later than t, but sooner than the
    # blocks read before t would be needed again (they were kept, it was fetched again): 16
    # of 16 blocks an epoch in a cyclic order, 13-15 shuffled. Now an epoch after the first
    # fetches what Belady's rule does with no reads ahead: 8, the least any cache of 8 can.
    rng = np.random.default_rng(3)
    orders = (
        [np.arange(BLOCKS)] * 3 if kind == "cyclic" else [rng.permutation(BLOCKS) for _ in range(3)]
    )
    cache = make_cache(tmp_path, shard, BLOCKS // 2)
    try:
        cache.schedule(lambda e: orders[e] if e < 3 else np.zeros(0, np.int64), 0)
        for e in range(3):
            for b in orders[e].tolist():
                cache.hold([b])
                assert held_bytes(cache, [b]) == [shard[b * BLOCK : (b + 1) * BLOCK]]
                cache.release([b])
                settled(cache)
        best = belady.simulate(np.concatenate(orders).tolist(), [BLOCK] * BLOCKS, 8 * BLOCK)
        assert [sum(best[e * BLOCKS : (e + 1) * BLOCKS]) // BLOCK for e in range(3)] == [16, 8, 8]
        assert {e: n // BLOCK for e, n in cache.fetched_for.items()} == {0: 16, 1: 8, 2: 8}
        assert cache.fetches == 32 and cache.peak <= 8 * BLOCK
    finally:
        cache.close()


@pytest.mark.parametrize(("policy", "kept"), [("future", [1, 2]), ("lru", [0, 2])])
def test_the_cache_drops_by_its_policy(tmp_path, shard, policy, kept):
    # two blocks of room, reads 0 1 0 2 then 1: block 2 takes the place of the block needed
    # furthest away (0, never again) or, for the benchmark's comparison, of the least
    # recently used one (1)
    cache = make_cache(tmp_path, shard, 2, policy=policy)
    try:
        cache.schedule(lambda e: np.array([0, 1, 0, 2, 1]) if e == 0 else np.zeros(0, np.int64), 0)
        for b in (0, 1, 0, 2):
            cache.hold([b])
            cache.release([b])
            settled(cache)
        assert np.flatnonzero(cache.present).tolist() == kept
    finally:
        cache.close()


def test_one_checked_fetch_names_the_object_the_block_and_the_fix(shard):
    from mixshard.core.errors import ShardError
    from mixshard.reading.store.blockcache import fetch_block

    store = MemoryStore(shard[: BLOCK * 2 + 100])
    digest = hashlib.sha256(shard[BLOCK : 2 * BLOCK]).hexdigest()
    assert fetch_block(store, "s.tar", (BLOCK, 2 * BLOCK), digest, 1) == shard[BLOCK : 2 * BLOCK]
    assert fetch_block(store, "s.tar", (0, BLOCK), None, 0) == shard[:BLOCK]  # size only
    fix = (
        "; the pack changed after its index.json was read, or is damaged: run `mixshard verify "
        "mem://pack` and open the pack again (repack it or restore the object if verify fails)"
    )
    with pytest.raises(ShardError) as err:
        fetch_block(store, "s.tar", (0, BLOCK), digest, 0)
    assert str(err.value) == (
        f"mem://pack/s.tar: block 0 (bytes 0-{BLOCK}) is not as its sha256 in index.json says{fix}"
    )
    with pytest.raises(ShardError) as err:
        fetch_block(store, "s.tar", (2 * BLOCK, 3 * BLOCK), None, 2)
    assert str(err.value) == (
        f"mem://pack/s.tar: block 2 (bytes {2 * BLOCK}-{3 * BLOCK}) came back as 100 bytes (the "
        f"object is shorter than index.json says){fix}"
    )
    assert store.reads == [(BLOCK, 2 * BLOCK), (0, BLOCK), (0, BLOCK), (2 * BLOCK, 3 * BLOCK)]

"""The device pool of `Overlay` (cache="pool"): exact uses per image, one entry per image and
pass, distinct images per call, determinism, waits for a slow disk."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import make_tree, read_pack

import mixshard
from mixshard import MixshardError, Overlay
from mixshard.augment.caches.imagepool import ImagePool
from mixshard.augment.caches.refill import Refill
from mixshard.reading.pack.reader import PackReader
from mixshard.reading.source import resolve_source

M = 40  # images in the pack
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pool")
    make_tree(root / "src", classes=("a", "b"), per_class=M // 2)
    mixshard.pack(root / "src", root / "pack", size=12, shard_size=16, block_size=4, workers=1)
    return root / "pack"


def ids_of(images: torch.Tensor) -> list[bytes]:
    return [bytes(i.numpy()) for i in images]


def test_each_image_is_drawn_exactly_uses_times_and_enters_once_per_pass(pack_dir):
    size, uses, n = 16, 3, 8
    pool = ImagePool(resolve_source(str(pack_dir)), CPU, size, uses, seed=4)
    content: dict[int, bytes] = {}  # slot -> the image it holds
    count: dict[int, int] = {}  # slot -> draws of that image so far
    entries: list[bytes] = []
    filled = 0
    for _ in range(60):
        got = ids_of(pool.take(n))
        pool.wait()  # refills are written between calls: wait for them to look
        slots = pool.last_slots.tolist()
        assert len(slots) == n and len(set(slots)) == n  # distinct slots in a call
        first = list(range(filled, max(filled, n)))  # the first call fills n slots
        for s in first:
            content[s], count[s] = bytes(pool.images[s].numpy()), 0
        entries += [content[s] for s in first]
        for s, image in zip(slots, got):
            assert image == content[s]  # a slot's image stays until it is used up
            count[s] += 1
            assert count[s] <= uses
        spent = [s for s in slots if count[s] == uses]
        grown = list(range(max(filled, n), pool.filled))
        for s in spent + grown:  # refilled in this order from the feed
            content[s], count[s] = bytes(pool.images[s].numpy()), 0
            entries.append(content[s])
        filled = pool.filled
        assert pool.left[:filled].tolist() == [uses - count[s] for s in range(filled)]
    stats = pool.stats()
    assert stats["draws"] == 60 * n and stats["entered"] == len(entries)
    assert stats["retired"] == stats["entered"] - filled
    # entries follow the refill: block order over the whole pack, each image once a pass
    feed = Refill(resolve_source(str(pack_dir)), 4, False)
    expected = ids_of(torch.cat(feed.take(len(entries))))
    feed.close()
    assert entries == expected
    assert len(entries) >= 3 * M
    pack = set(ids_of(torch.from_numpy(read_pack(pack_dir)[0])))
    for p in range(len(entries) // M):
        assert set(entries[p * M : (p + 1) * M]) == pack
    pool.close()


def test_realised_uses_per_retired_image(pack_dir):
    """Counting draws per image over whole passes: every image that left the pool was drawn
    exactly `uses` times."""
    uses = 4
    pool = ImagePool(resolve_source(str(pack_dir)), CPU, 16, uses, seed=1)
    counts: Counter[bytes] = Counter()
    for _ in range(100):
        counts.update(ids_of(pool.take(8)))
    pool.wait()
    in_pool = Counter(ids_of(pool.images[: pool.filled]))
    left = Counter()
    for s in range(pool.filled):
        left[bytes(pool.images[s].numpy())] += int(pool.left[s])
    stats = pool.stats()
    # draws of every image = uses x its entries - what its pooled copies have left
    feed = Refill(resolve_source(str(pack_dir)), 1, False)
    entries = Counter(ids_of(torch.cat(feed.take(stats["entered"]))))
    feed.close()
    for image, entered in entries.items():
        assert counts[image] == uses * entered - left[image], image
    assert sum(in_pool.values()) == pool.filled == 16
    assert stats["retired"] == stats["entered"] - pool.filled
    assert stats["draws"] == uses * stats["retired"] + sum(uses - int(v) for v in pool.left)
    pool.close()


def test_refill_feed_pieces_follow_the_stream_across_batches(pack_dir):
    """`take` hands out pieces of the refill's batches (no copy): whatever the request sizes,
    the pieces hold m images each time and join up into the stream taken in one go."""
    feed = Refill(resolve_source(str(pack_dir)), 2, False)
    pieces = [feed.take(m) for m in (3, 7, 1, 16, 5, 30)]
    feed.close()
    assert [sum(len(p) for p in ps) for ps in pieces] == [3, 7, 1, 16, 5, 30]
    assert max(len(ps) for ps in pieces) > 1  # some request spans batches
    whole = Refill(resolve_source(str(pack_dir)), 2, False)
    expected = ids_of(torch.cat(whole.take(62)))
    whole.close()
    assert ids_of(torch.cat([p for ps in pieces for p in ps])) == expected


def test_draws_are_deterministic_and_start_small(pack_dir):
    runs = []
    for _ in range(2):
        pool = ImagePool(resolve_source(str(pack_dir)), CPU, 32, 4, seed=9)
        first = pool.take(8)
        assert pool.filled == 8 + 2  # n images to start, then ceil(n / uses) per call
        runs.append(torch.cat([first] + [pool.take(n) for n in (5, 8, 13, 1)]))
        pool.close()
    assert torch.equal(runs[0], runs[1])


def test_calls_larger_than_the_pool(pack_dir):
    pool = ImagePool(resolve_source(str(pack_dir)), CPU, 6, 2, seed=0)
    got = pool.take(15)
    assert got.shape == (15, 3, 12, 12) and len(pool.last_slots) == 15
    for lo in range(0, 15, 6):  # drawn in rounds of at most the pool size: distinct per round
        part = pool.last_slots[lo : lo + 6].tolist()
        assert len(set(part)) == len(part)
    pool.close()


def test_a_slow_disk_makes_calls_wait_and_is_counted(pack_dir, monkeypatch, block_feed):
    scatter_run = PackReader.scatter_run

    def slow(self, blocks, addresses, drop_cache=False):
        time.sleep(0.05 * len(blocks))
        return scatter_run(self, blocks, addresses, drop_cache)

    monkeypatch.setattr(PackReader, "scatter_run", slow)
    pool = ImagePool(resolve_source(str(pack_dir)), CPU, 40, 1, seed=0)
    for _ in range(6):
        pool.take(8)
    stats = pool.stats()
    assert stats["waits"] >= 1 and stats["wait_seconds"] > 0.04
    pool.close()


def test_overlay_pool_mode_blends_pack_images(pack_dir):
    pack = set(ids_of(torch.from_numpy(read_pack(pack_dir)[0])))
    ov = Overlay(pack_dir, cache="pool", pool=12, uses=2, flip=False, seed=3)
    obs = torch.rand(10, 9, 12, 12) * 255
    out = ov(obs)
    imgs = (2 * out[:, :3] - obs[:, :3]).round().to(torch.uint8)
    assert set(ids_of(imgs)) <= pack
    assert ov.modes == {"cpu": "pool"}
    stats = ov.stats()["cpu"]
    assert (stats["mode"], stats["pool"], stats["uses"], stats["draws"]) == ("pool", 12, 2, 10)
    ov.close()


def test_auto_takes_the_pool_when_the_pack_does_not_fit(pack_dir):
    ov = Overlay(pack_dir)
    ov(torch.rand(2, 9, 12, 12) * 255)
    assert ov.modes == {"cpu": "device"}
    tiny = Overlay(pack_dir, cache_fraction=1e-12, pool=8)
    tiny(torch.rand(2, 9, 12, 12) * 255)
    assert tiny.modes == {"cpu": "pool"} and tiny.stats()["cpu"]["pool"] == 8
    tiny.close()
    with pytest.raises(MixshardError, match="no room for a pool: 0 bytes free for it, one image"):
        Overlay(pack_dir, cache_fraction=1e-12)(torch.rand(2, 9, 12, 12) * 255)
    with pytest.raises(ValueError, match="uses must be >= 1, got 0"):
        Overlay(pack_dir, uses=0)
    with pytest.raises(ValueError, match="pool must be >= 1 images, got 0"):
        Overlay(pack_dir, pool=0)


@pytest.mark.cuda
def test_cuda_pool(pack_dir):
    pack = set(ids_of(torch.from_numpy(read_pack(pack_dir)[0])))
    ov = Overlay(pack_dir, cache="pool", pool=16, uses=2, flip=False)
    drawn = torch.cat([ov.sample(n, "cuda") for n in (8, 8, 8, 8, 8)])
    assert drawn.is_cuda and set(ids_of(drawn.cpu())) <= pack
    assert ov.stats()["cuda:0"]["draws"] == 40
    ov.close()


def test_each_rank_refills_from_its_share_of_the_stream(pack_dir, monkeypatch):
    """Under DDP the draws differ by rank, but the refill stream takes the seed every rank
    shares, so the stream's own split by rank gives each rank disjoint images."""
    from mixshard.augment import overlay
    from mixshard.augment.caches import refill
    from mixshard.reading import stream

    seen = []
    for rank in (0, 1):
        for module in (overlay, refill, stream):  # as torch.distributed would say
            monkeypatch.setattr(module, "rank_world", lambda r=rank: (r, 2))
        ov = Overlay(pack_dir, cache="pool", pool=8, uses=1, flip=False, alpha=1.0, seed=5)
        obs = torch.zeros(8, 3, 12, 12)
        got = [set(ids_of(ov(obs).round().to(torch.uint8))) for _ in range(2)]  # 16 = a pass
        ov.close()
        feed = Refill(resolve_source(str(pack_dir)), 5, False)  # the shared seed, this rank's share
        expected = ids_of(torch.cat(feed.take(16)))
        feed.close()
        assert got == [set(expected[:8]), set(expected[8:])]
        seen.append(got[0] | got[1])
    assert not seen[0] & seen[1] and len(seen[0]) == len(seen[1]) == 16


def test_a_failed_refill_stream_fails_every_later_call(pack_dir, monkeypatch):
    from mixshard.reading import loading

    def broken(*args, **kwargs):
        class Broken:
            def __iter__(self):
                yield torch.zeros(4, 3, 12, 12, dtype=torch.uint8)
                raise mixshard.ShardError("shard-000001.tar: damaged")

            def close(self):
                pass

        return Broken()

    monkeypatch.setattr(loading, "loader", broken)
    feed = Refill(resolve_source(str(pack_dir)), 0, False)
    assert torch.cat(feed.take(4)).shape == (4, 3, 12, 12)
    for _ in range(2):  # the reader thread has ended: raised again, never a wait
        with pytest.raises(mixshard.ShardError, match="shard-000001.tar: damaged"):
            feed.take(4)
    feed.close()


def test_a_refill_failing_between_calls_fails_the_next_call_and_every_later_one(
    pack_dir, monkeypatch
):
    """On CPU refills are written between calls: a failure surfaces at the next call, and no
    later call draws from slots that were never written."""
    from mixshard.reading import loading

    def broken(*args, **kwargs):
        class Broken:
            def __iter__(self):
                yield torch.zeros(10, 3, 12, 12, dtype=torch.uint8)  # the first fill and 2
                raise mixshard.ShardError("shard-000001.tar: damaged")

            def close(self):
                pass

        return Broken()

    monkeypatch.setattr(loading, "loader", broken)
    pool = ImagePool(resolve_source(str(pack_dir)), CPU, 16, 1, seed=0)
    assert pool.take(8).shape == (8, 3, 12, 12)  # refills 8 + 8 slots after it: fails there
    for _ in range(3):
        with pytest.raises(mixshard.ShardError, match="shard-000001.tar: damaged"):
            pool.take(8)
    pool.close()


def test_a_take_waiting_on_a_feed_that_is_closed_ends_with_an_error(pack_dir, monkeypatch):
    """The CPU pool's writer thread may be waiting for images when the pool is closed: the
    wait ends with an error, not never."""
    import threading

    from mixshard.reading import loading

    gate = threading.Event()

    def silent(*args, **kwargs):
        class Silent:
            def __iter__(self):
                gate.wait()
                return
                yield

            def close(self):
                gate.set()

        return Silent()

    monkeypatch.setattr(loading, "loader", silent)
    feed = Refill(resolve_source(str(pack_dir)), 0, False)
    got: list[BaseException] = []

    def take() -> None:
        try:
            feed.take(4)
        except MixshardError as exc:
            got.append(exc)

    waiting = threading.Thread(target=take)
    waiting.start()
    time.sleep(0.2)
    feed.close()
    waiting.join(timeout=2)
    assert not waiting.is_alive()
    assert [str(e) for e in got] == ["the refill stream of the pool was closed"]


def test_a_list_of_shard_files_names_the_pack_folder_instead(pack_dir):
    shard = sorted(pack_dir.glob("shard-*.tar"))[0]
    with pytest.raises(MixshardError, match="^lists of shard URLs are no longer read: give the"):
        Overlay([str(shard)], cache="device")
    with pytest.raises(MixshardError, match=f"no longer read; give {pack_dir} "):
        Overlay(str(shard), cache="device")


def test_a_pool_closed_right_after_its_calls_exits_cleanly(pack_dir):
    """The CPU pool writes refills on a thread after each call: `close()` waits for it, or a
    write still inside torch when the interpreter exits aborts the process ("terminate called
    without an active exception": 3 runs in 5 before the wait)."""
    import subprocess
    import sys

    code = (
        "import sys, torch, mixshard\n"
        "torch.set_num_threads(1)\n"
        "ov = mixshard.Overlay(sys.argv[1], cache='pool', pool=16, uses=1, flip=False)\n"
        "for _ in range(20):\n"
        "    ov(torch.rand(8, 9, 12, 12) * 255)\n"
        "ov.close()\n"
    )
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", code, str(pack_dir)], capture_output=True, text=True, timeout=120
        )
        assert (done.returncode, done.stderr) == (0, "")


def test_a_pool_nobody_closed_is_closed_at_exit(pack_dir):
    """`compat.random_overlay` keeps its Overlays for the life of the process: their refill
    threads must be stopped at exit, not left inside torch while the interpreter goes."""
    import subprocess
    import sys

    code = (
        "import atexit, sys, threading\n"
        "def report():  # registered first: runs after every other exit hook\n"
        "    names = ('mixshard-refill', 'mixshard-pool-write')\n"
        "    alive = [t.name for t in threading.enumerate() if t.name in names]\n"
        "    print('alive after exit:', alive)\n"
        "atexit.register(report)\n"
        "import torch, mixshard\n"
        "ov = mixshard.Overlay(sys.argv[1], cache='pool', pool=8, uses=1)\n"
        "ov(torch.zeros(8, 3, 12, 12))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(pack_dir)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "alive after exit: []\n"


def test_a_full_pool_draws_every_slot_once_before_any_twice(pack_dir):
    """Once full, the pool's draws are consecutive pieces of a permutation of its slots: each
    call a set of distinct slots, and every slot once per size / n calls."""
    pool = ImagePool(resolve_source(str(pack_dir)), CPU, 16, 4, seed=2)
    while pool.filled < 16:
        pool.take(4)
    for _ in range(3):
        drawn = []
        for _ in range(4):
            pool.take(4)
            drawn += pool.last_slots.tolist()
        assert sorted(drawn) == list(range(16))
    pool.close()


@pytest.mark.parametrize(("side", "word"), [(5, torch.uint8), (6, torch.int32)])
def test_refills_of_any_image_size_are_the_pack_images(tmp_path, side, word):
    """Refills are written as words of the widest integer type dividing an image (75 bytes:
    bytes, 108: int32, the 432 of the other tests: int64): every image in the pool after
    several passes of refills is one of the pack's, byte for byte."""
    make_tree(tmp_path / "src", classes=("a",), per_class=12)
    mixshard.pack(tmp_path / "src", tmp_path / "pack", size=side, shard_size=8, block_size=4)
    pack = set(ids_of(torch.from_numpy(read_pack(tmp_path / "pack")[0])))
    pool = ImagePool(resolve_source(str(tmp_path / "pack")), CPU, 8, 1, seed=0)
    assert pool.word == word
    for _ in range(12):  # the first 8, then 8 refills a call: 8 passes over the 12 images
        assert set(ids_of(pool.take(8))) <= pack
    pool.wait()
    assert set(ids_of(pool.images)) <= pack and pool.stats()["entered"] == 8 + 12 * 8
    pool.close()


def test_images_a_call_owns_are_not_overwritten_by_later_calls(pack_dir):
    """On CPU a call's images are gathered ahead into one of two buffers: a caller that did
    not ask to own them gets the buffer (used again by the call after next), one that did
    gets a copy."""
    pool = ImagePool(resolve_source(str(pack_dir)), CPU, 16, 4, seed=3)
    while pool.filled < 16:
        pool.take(8)
    owned = pool.take(8)
    kept = owned.clone()
    lent = [pool.take(8, own=False) for _ in range(3)]
    assert lent[0].data_ptr() == lent[2].data_ptr() != lent[1].data_ptr()
    assert owned.data_ptr() not in {t.data_ptr() for t in lent}
    for _ in range(4):
        pool.take(8, own=False)
    assert torch.equal(owned, kept)
    pool.close()

"""The pack reader off its happy path: descriptor eviction, pickling, unreadable shards, runs
that cross a shard, bad buffers; and the block feed's own refusals."""

from __future__ import annotations

import errno
import pickle
import shutil

import numpy as np
import pytest
import torch

import mixshard
from mixshard.core import layout
from mixshard.reading.batches import order
from mixshard.reading.batches.blockfeed import BlockFeed
from mixshard.reading.pack import reader as pack_reader
from mixshard.reading.pack import shardfiles
from mixshard.reading.pack.reader import PackReader
from mixshard.reading.source import resolve_source
from mixshard.reading.stream import ShardStream


@pytest.fixture(scope="module")
def pack_dir(pack96):
    return pack96


@pytest.fixture()
def pack(pack_dir):
    return PackReader(pack_dir, mixshard.Manifest.load(pack_dir))


def expected(pack_dir, index):
    from helpers import read_pack

    return read_pack(pack_dir)[0][index]


def test_only_the_allowed_descriptors_stay_open(pack_dir, pack, monkeypatch):
    monkeypatch.setattr(shardfiles, "MAX_OPEN_SHARDS", 1)
    index = np.array([0, 30, 60, 90, 5])  # four shards
    out = np.empty((5, 3, 8, 8), np.uint8)
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, expected(pack_dir, index))
    assert pack.open_shards == 1


def test_a_pickled_pack_reads_in_the_new_process_state(pack_dir, pack):
    pack.gather(np.arange(3))
    copy = pickle.loads(pickle.dumps(pack))
    assert np.array_equal(copy.gather(np.array([40, 41])), expected(pack_dir, [40, 41]))


def test_a_read_error_names_the_shard(pack, monkeypatch):
    def broken(fd, iov, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(pack_reader, "read_iov", broken)
    with pytest.raises(mixshard.ShardError, match=r"cannot read shard .*shard-000000.tar: Input/o"):
        pack.read_block(0, np.empty((8, 192), np.uint8))


def test_a_run_must_lie_in_one_shard_and_outs_must_fit(pack):
    with pytest.raises(ValueError, match="a run of blocks must lie in one shard"):
        pack.scatter_run([2, 3], [np.zeros(8, np.uint64)] * 2)
    with pytest.raises(ValueError, match="out must be C-contiguous with room for 4 images"):
        pack.read_images(np.arange(4), np.empty((3, 3, 8, 8), np.uint8))


def test_dropping_read_blocks_from_the_page_cache_keeps_the_data(pack_dir, pack):
    out = np.empty((8, 192), np.uint8)
    addresses = out.ctypes.data + np.arange(8, dtype=np.uint64) * np.uint64(192)
    assert pack.scatter_run([4], [addresses], drop_cache=True) == [True]
    assert np.array_equal(out.reshape(8, 3, 8, 8), expected(pack_dir, np.arange(32, 40)))


def damaged_copy(pack_dir, tmp_path):
    """A copy of the pack whose first block's images header is overwritten, and its manifest."""
    bad = tmp_path / "pack"
    shutil.copytree(pack_dir, bad)
    m = mixshard.Manifest.load(bad)
    block = m.shards[0].blocks[0]
    with open(bad / m.shards[0].name, "r+b") as f:
        f.seek(block.offset - layout.images_header_len(block.count, m.size))
        f.write(b"XXXX")
    return bad, m


def test_a_damaged_block_read_alone_or_gathered_is_an_error(pack_dir, tmp_path):
    bad, m = damaged_copy(pack_dir, tmp_path)
    with pytest.raises(mixshard.ShardError, match="block 00000000"):
        PackReader(bad, m).read_block(0, np.empty((8, 192), np.uint8))
    skipping = PackReader(bad, m, on_error="skip")
    with pytest.warns(RuntimeWarning, match="skipping a bad block"):
        mask = skipping.read_images(np.array([1, 9]), np.empty((2, 3, 8, 8), np.uint8))
    assert mask.tolist() == [True, False]
    with pytest.raises(mixshard.ShardError, match="come from bad blocks"):
        skipping.gather(np.array([1]))


def test_the_block_feed_refuses_what_it_cannot_plan(pack):
    epochs = order.EpochOrder("block", pack.block_count, 0, 4, True)
    with pytest.raises(TypeError, match="increasing range"):
        BlockFeed(pack, epochs.with_inverse, 12, 0, 8, [0, 1], ahead=2)

    def broken(epoch):
        raise RuntimeError("no sequence")

    feed = BlockFeed(pack, broken, 12, 0, 8, range(0, 12), ahead=2)
    with pytest.raises(RuntimeError, match="no sequence"):  # the planner's error, in the caller
        feed.take(0)
    feed.close()


def test_a_pinned_feed_without_cuda_gives_plain_batches(pack_dir, block_feed):
    stream = ShardStream(pack_dir, 8, order="block", labels=True)
    reader = stream.reader(range(0, 4), pin=True)
    images, labels = reader.get(0)
    assert images.is_pinned() == torch.cuda.is_available()
    assert np.array_equal(images.numpy(), expected(pack_dir, stream.batch_index(0)))
    reader.close()


def test_sources_say_what_they_are(pack_dir):
    source = resolve_source(pack_dir / "index.json")
    assert (source.kind, source.folder, source.count) == ("folder", str(pack_dir), 96)
    assert resolve_source(source) is source
    with pytest.raises(TypeError, match="a pack is a folder or a URL, got int"):
        resolve_source(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="run must be >= 1, got 0"):
        ShardStream(pack_dir, 8, run=0)


def test_an_epoch_order_pickles_without_its_cache(pack):
    epochs = order.EpochOrder("block", pack.block_count, 3, 4, True, run=2)
    first = epochs.sequence(1).copy()
    copy = pickle.loads(pickle.dumps(epochs))
    assert np.array_equal(copy.sequence(1), first)
    seq, where = copy.with_inverse(1)
    assert np.array_equal(where[seq], np.arange(len(seq)))


def test_draws_refuse_more_distinct_items_than_there_are():
    from mixshard.augment.caches.pieces import PermutationWalk

    walk = PermutationWalk(3, lambda: np.arange(3), distinct=True)
    with pytest.raises(ValueError, match="cannot draw 4 distinct items of 3"):
        walk.take(4)
    assert [p.tolist() for p in PermutationWalk(3, lambda: np.arange(3), False).take(4)] == [
        [0, 1, 2],
        [0],
    ]


def test_a_carry_takes_a_batch_only_once_the_last_piece_is_done():
    """`pieces` asks for the next batch only when the caller asks for the next piece; with
    `keep=False` a batch's rest is carried as it is (a view), else through `keep`."""
    from mixshard.augment.caches.pieces import Carry

    batches = [np.arange(b, b + 4) for b in range(0, 40, 4)]
    fetched: list[np.ndarray] = []

    def next_batch() -> np.ndarray:
        fetched.append(batches[len(fetched)])
        return fetched[-1]

    carry = Carry(next_batch, np.copy)
    pieces = carry.pieces(6, keep=False)
    assert next(pieces).tolist() == [0, 1, 2, 3] and len(fetched) == 1
    assert next(pieces).tolist() == [4, 5] and len(fetched) == 2
    assert next(pieces, None) is None and carry.left == 2
    rest = carry.take(3)
    assert [p.tolist() for p in rest] == [[6, 7], [8]]
    assert np.shares_memory(rest[0], batches[1])  # carried as it was
    assert carry.take(2)[0].tolist() == [9, 10] and carry.left == 1
    assert [p.tolist() for p in carry.take(1)] == [[11]]  # (kept: a copy)
    assert [p.tolist() for p in carry.pieces(3)] == [[12, 13, 14]]
    assert not np.shares_memory(carry.take(1)[0], batches[3])


def test_a_pool_without_room_for_one_image_says_so(pack):
    from mixshard.augment.caches.plan import plan_cache

    image = pack.manifest.image_bytes
    cpu = torch.device("cpu")
    with pytest.raises(mixshard.MixshardError, match="no room for a pool: 100 bytes free"):
        plan_cache("pool", cpu, 1.0, need=image, item_bytes=image, free=100)
    assert plan_cache("pool", cpu, 1.0, need=image, item_bytes=image, free=10 * image).size == 10


def test_stream_arguments_are_checked(pack_dir):
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        ShardStream(pack_dir, 8, window=0)


def test_a_stream_cache_counts_its_draws(pack_dir):
    ov = mixshard.Overlay(pack_dir, cache="stream", num_workers=0, batch_size=8, flip=False)
    for n in (5, 6):
        ov(torch.full((n, 3, 8, 8), 100.0))
    assert ov.stats() == {"cpu": {"mode": "stream", "draws": 11}}
    ov.close()


def test_the_whole_pack_is_read_into_a_buffer_with_the_plans_page_cache_rule(pack_dir, monkeypatch):
    from mixshard.reading import buffers
    from mixshard.reading.batches import plan

    source = resolve_source(pack_dir)
    drops: list[bool] = []
    real = PackReader.read_block

    def read_block(self, b, out, drop_cache=False):
        drops.append(drop_cache)
        return real(self, b, out, drop_cache)

    monkeypatch.setattr(PackReader, "read_block", read_block)
    out = torch.zeros((source.count, 3, 8, 8), dtype=torch.uint8)
    buffers.read_pack_into(source, out)
    assert np.array_equal(out.numpy(), expected(pack_dir, np.arange(source.count)))
    assert len(drops) == 12 and not any(drops)  # 96 images in blocks of 8, in the page cache
    monkeypatch.setattr(plan, "available_memory", lambda: source.manifest.total_bytes)
    assert plan.default_plan(source.manifest, False).why[3].startswith("whole pack (a device")
    drops.clear()
    buffers.read_pack_into(source, out)
    assert len(drops) == 12 and all(drops)  # larger than half the memory: dropped again


def test_chosen_images_are_read_into_a_buffer_and_a_damaged_one_is_named(pack_dir, tmp_path):
    from mixshard.reading.buffers import read_images_into

    pack = PackReader(pack_dir, mixshard.Manifest.load(pack_dir))
    out = torch.zeros((4, 3, 8, 8), dtype=torch.uint8)
    read_images_into(pack, np.array([3, 50, 2]), out, "never")
    assert np.array_equal(out[:3].numpy(), expected(pack_dir, [3, 50, 2]))
    assert not out[3].any()
    bad, m = damaged_copy(pack_dir, tmp_path)
    skipping = PackReader(bad, m, on_error="skip")
    with pytest.warns(RuntimeWarning), pytest.raises(mixshard.MixshardError, match="^clip 0 !$"):
        read_images_into(skipping, np.array([9, 1]), np.empty((2, 192), np.uint8), "clip 0 !")

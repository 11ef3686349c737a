"""The block order's reader: one scattered `preadv` per block, recycled batch buffers,
batches that stay intact while held, closing with reads queued."""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import threading
import time

import numpy as np
import pytest
from helpers import make_tree

import mixshard
from mixshard import MixshardError, ShardStream
from mixshard.reading.batches.recycle import Recycler
from mixshard.reading.pack import rawio
from mixshard.reading.pack.reader import PackReader

# the test packs are in the page cache: without this the block order copies out of mappings
pytestmark = pytest.mark.usefixtures("block_feed")


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory):
    """160 distinct 8 px images in shards of 40, blocks of 8 (20 blocks)."""
    root = tmp_path_factory.mktemp("feed")
    make_tree(root / "src", classes=("a", "b"), per_class=80)
    mixshard.pack(root / "src", root / "pack", size=8, shard_size=40, block_size=8, workers=1)
    return root / "pack"


# ---------------------------------------------------------------- rawio


@pytest.fixture
def records(tmp_path):
    """A file of 40 records of 12 bytes, record i filled with byte i."""
    path = tmp_path / "records"
    path.write_bytes(b"".join(bytes([i]) * 12 for i in range(40)))
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def scatter_into(fd, order, count, offset=0):
    out = np.zeros((count, 12), np.uint8)
    iov = np.full((count, 2), 12, np.uint64)  # struct iovec {void *base; size_t len;}
    iov[:, 0] = out.ctypes.data + np.asarray(order, np.uint64) * 12
    return rawio.read_iov(fd, iov, offset), out


def test_scatter_read_puts_each_record_at_its_address(records):
    order = np.random.default_rng(0).permutation(40)
    got, out = scatter_into(records, order, 40)
    assert got == 480
    assert (out[order] == np.arange(40, dtype=np.uint8)[:, None]).all()


def test_scatter_read_in_parts_of_iov_max(records, monkeypatch):
    monkeypatch.setattr(rawio, "IOV_MAX", 16)
    got, out = scatter_into(records, range(39, -1, -1), 40)
    assert got == 480 and out[:, 0].tolist() == list(range(39, -1, -1))


def test_scatter_read_stops_at_the_end_of_the_file(records):
    got, out = scatter_into(records, range(10), 10, offset=12 * 35)
    assert got == 60 and out[:5, 0].tolist() == [35, 36, 37, 38, 39]
    assert not out[5:].any()


def test_scatter_read_resumes_a_call_cut_short(records, monkeypatch):
    """A `preadv` that returns early (a signal) is finished record by record; EINTR with
    nothing read is retried."""
    real = rawio._PREADV
    calls = []

    def flaky(fd, iov, count, offset):
        calls.append(count)
        if len(calls) == 1:
            ctypes.set_errno(errno.EINTR)
            return -1
        if len(calls) == 2:  # the first 2.5 records only
            first = np.ctypeslib.as_array((ctypes.c_uint64 * 2).from_address(iov))
            os.preadv(fd, [(ctypes.c_char * 30).from_address(int(first[0]))], offset)
            return 30
        return real(fd, iov, count, offset)

    monkeypatch.setattr(rawio, "_PREADV", flaky)
    got, out = scatter_into(records, range(40), 40)
    assert got == 480 and len(calls) == 2
    assert (out == np.arange(40, dtype=np.uint8)[:, None]).all()


def test_scatter_read_without_libc_preadv(records, monkeypatch):
    monkeypatch.setattr(rawio, "_PREADV", None)
    order = np.random.default_rng(1).permutation(40)
    got, out = scatter_into(records, order, 40)
    assert got == 480 and (out[order][:, 0] == np.arange(40)).all()


def test_scatter_read_errors_are_oserrors(records):
    out = np.zeros(12, np.uint8)
    with pytest.raises(OSError) as err:
        rawio.read_iov(-1, np.array([[out.ctypes.data, 12]], np.uint64), 0)
    assert err.value.errno == errno.EBADF


# ---------------------------------------------------------------- recycle


def test_a_dropped_buffer_is_used_again_and_a_held_one_never():
    recycler = Recycler(2, 3, keep=8)
    first = recycler.get()
    recycler.lend(first)
    view = first[1:]  # a view keeps it
    del first
    second = recycler.get()
    assert recycler.made == 2 and second.base is None and view.base is not second
    recycler.lend(second)
    del view
    third = recycler.get()  # the first one, free again
    assert recycler.made == 2 and third is not second


def test_a_tensor_over_a_buffer_keeps_it():
    import torch

    recycler = Recycler(2, 3, keep=8)
    buffer = recycler.get()
    images = torch.from_numpy(buffer).view(2, 3)[1:]
    recycler.lend(buffer)
    del buffer
    assert recycler.get() is not None and recycler.made == 2
    del images
    gc.collect()
    recycler.get()
    assert recycler.made == 2


def test_a_recycler_forgets_beyond_keep():
    recycler = Recycler(1, 1, keep=2)
    held = [recycler.get() for _ in range(4)]
    for buffer in held:
        recycler.lend(buffer)
    assert recycler.remembered == 2


# ---------------------------------------------------------------- the feed


def test_batches_held_are_never_overwritten_and_dropped_ones_are_reused(pack_dir):
    stream = ShardStream(pack_dir, 8, order="block", window=2, infinite=True)
    pack = PackReader(pack_dir, stream.manifest)
    reader = stream.reader(range(0, 200))
    kept = {}
    for k in range(200):
        images = reader.get(k)
        if k % 7 == 0:
            kept[k] = images[2:5]  # a view: it must keep the whole batch
        del images
    made = reader.feed.stats()["buffers_made"]
    reader.close()
    for k, view in kept.items():
        assert np.array_equal(view.numpy(), pack.gather(stream.batch_index(k))[2:5])
    assert made < 200 // 2  # most batches were made in a buffer used before


def test_closing_with_reads_queued_ends_the_waiters(pack_dir, monkeypatch):
    """Every batch someone waits for when the reader closes is either made (right) or an
    error: planned ones whose reads were still queued, and ones not planned yet."""
    scatter = PackReader.scatter_run

    def slow(self, b, addresses, drop_cache=False):
        time.sleep(0.2)
        return scatter(self, b, addresses, drop_cache)

    monkeypatch.setattr(PackReader, "scatter_run", slow)
    stream = ShardStream(pack_dir, 8, order="block", window=20, run=1)
    nb = stream.batches_per_epoch
    reader = stream.reader(range(0, nb))
    made: dict[int, object] = {}

    def take(k):
        try:
            made[k] = reader.get(k)
        except MixshardError as exc:
            made[k] = str(exc)

    waiters = [threading.Thread(target=take, args=(k,)) for k in range(nb)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    reader.close()
    for waiter in waiters:
        waiter.join(timeout=10)
    assert not any(w.is_alive() for w in waiters) and time.perf_counter() - t0 < 5
    counts = reader.feed.stats()
    # every read has ended: done or failed
    assert counts["blocks_done"] + counts["blocks_failed"] == len(reader.pack.block_count)
    errors = [k for k, v in made.items() if isinstance(v, str)]
    assert made[nb - 1] == "the block reader was closed"  # never planned
    assert {made[k] for k in errors} == {"the block reader was closed"}
    pack = PackReader(pack_dir, stream.manifest)
    for k in set(made) - set(errors):
        assert np.array_equal(made[k].numpy(), pack.gather(stream.batch_index(k)))


def test_batches_sharing_an_address_slot_get_their_own_rows(pack_dir, monkeypatch):
    """Batch addresses are cached in `k % ADDRESS_SLOTS`; with tiny batches one block feeds
    batches that share a slot, and each image must still go to its own batch."""
    from mixshard.reading.batches import blockfeed

    monkeypatch.setattr(blockfeed, "ADDRESS_SLOTS", 4)
    stream = ShardStream(pack_dir, 2, order="block", window=4)
    pack = PackReader(pack_dir, stream.manifest)
    got = list(stream)
    assert len(got) == 80
    for k, images in enumerate(got):
        assert np.array_equal(images.numpy(), pack.gather(stream.batch_index(k)))


def test_read_block_refuses_an_out_too_small_or_not_contiguous(pack_dir):
    """`read_block` writes by address now: a buffer without room is refused, not overrun."""
    pack = PackReader(pack_dir, mixshard.Manifest.load(pack_dir))
    size = pack.manifest.image_bytes
    message = f"out must be C-contiguous with room for 8 images of {size} B"
    with pytest.raises(ValueError, match=message):
        pack.read_block(0, np.zeros((7, size), np.uint8))
    with pytest.raises(ValueError, match=message):
        pack.read_block(0, np.zeros((16, size), np.uint8)[::2])
    out = np.zeros((9, size), np.uint8)
    assert pack.read_block(0, out)
    assert np.array_equal(out[:8].reshape(8, 3, 8, 8), pack.gather(np.arange(8)))
    assert not out[8].any()


# ---------------------------------------------------------------- runs of blocks


def test_a_run_plan_covers_its_span_once_in_file_order():
    from mixshard.core import layout
    from mixshard.reading.pack.blockrun import RunLayout

    size, counts = 8, [8, 8, 5]
    offsets = [640, 640 + 8000, 640 + 16000]
    plan = RunLayout.of(offsets, counts, size)
    assert plan.start == 640 - layout.images_header_len(8, size)
    last_labels = layout.labels_offset_for(offsets[-1], 5, size) + 4 * 5
    assert plan.length == last_labels - plan.start
    assert sum(n for _, _, n in plan.segments) == plan.length
    images = [(j, n) for kind, j, n in plan.segments if kind == "images"]
    assert images == [(0, 8 * 192), (1, 8 * 192), (2, 5 * 192)]
    addresses = [
        np.arange(c, dtype=np.uint64) * 1000 + 10**6 * (j + 1) for j, c in enumerate(counts)
    ]
    iov = plan.iov(addresses, scratch=7, image_bytes=192)
    assert int(iov[:, 1].sum()) == plan.length
    assert iov[iov[:, 1] == 192, 0].tolist() == np.concatenate(addresses).tolist()
    with pytest.raises(ValueError, match="overlap or decrease"):
        RunLayout.of([8640, 640], [8, 8], size)


def test_runs_are_read_whole_in_one_request_each_and_give_exact_batches(pack_dir, monkeypatch):
    calls = []
    scatter = PackReader.scatter_run

    def counted(self, blocks, addresses, drop_cache=False):
        calls.append(list(blocks))
        return scatter(self, blocks, addresses, drop_cache)

    monkeypatch.setattr(PackReader, "scatter_run", counted)
    stream = ShardStream(pack_dir, 8, order="block", window=8, run=4, labels=True)
    pack = PackReader(pack_dir, stream.manifest)
    got = list(stream)
    assert len(got) == 20
    for k, (images, labels) in enumerate(got):
        index = stream.batch_index(k)
        assert np.array_equal(images.numpy(), pack.gather(index))
        assert labels.tolist() == pack.labels(index).tolist()
    # 20 blocks in shards of 5: runs 0-3, 4, 5-7 | 8, 9 ... split where a shard ends
    assert sorted(calls) == sorted(
        [[0, 1, 2, 3], [4], [5, 6, 7], [8, 9], [10, 11], [12, 13, 14], [15], [16, 17, 18, 19]]
    )
    assert sorted(b for c in calls for b in c) == list(range(20))


def test_a_bad_block_inside_a_run_is_skipped_alone(pack_dir, tmp_path):
    import shutil

    from mixshard.core import layout

    bad = tmp_path / "pack"
    shutil.copytree(pack_dir, bad)
    m = mixshard.Manifest.load(bad)
    block = m.shards[0].blocks[1]
    with open(bad / m.shards[0].name, "r+b") as f:  # damage block 1's images header
        f.seek(block.offset - layout.images_header_len(block.count, m.size))
        f.write(b"XXXXXX")
    with pytest.warns(RuntimeWarning, match="skipping a bad block"):
        stream = ShardStream(bad, 8, order="block", window=8, run=4, on_error="skip")
        got = list(stream)
    good = PackReader(pack_dir, m)
    bad_ids = set(range(8, 16))
    for k, images in enumerate(got):
        index = stream.batch_index(k)
        keep = ~np.isin(index, list(bad_ids))
        assert np.array_equal(images.numpy()[keep], good.gather(index[keep]))
    with pytest.raises(mixshard.ShardError, match="block 00000001"):
        list(ShardStream(bad, 8, order="block", window=8, run=4))

"""The read plan (`reading/batches/plan.py`): whichever way a reader reads a pack folder (copied
out of mappings, one `pread` per image, whole blocks read ahead), the same batches, the same
errors.
The behaviours once pinned for the deleted in-memory copy and io_uring paths run here against
the paths that replaced them."""

from __future__ import annotations

import os
import pickle
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import copy_pack, read_pack, small_pack

import mixshard
from mixshard import MixshardError, ShardError, ShardStream
from mixshard.reading.batches import plan
from mixshard.reading.pack import mapped
from mixshard.reading.pack import reader as pack_reader
from mixshard.reading.pack.reader import PackReader

N = 96
READS = ["mapped", "pread"]
needs_mapping = pytest.mark.skipif(mapped._mapped is None, reason="_mapped.c was not built")


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    """96 distinct images in 5 shards of 8-image blocks, 3 classes."""
    root = tmp_path_factory.mktemp("readplan")
    return small_pack(root, N // 3, shard_size=20, block_size=8, classes=("a", "b", "c"))


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b)
    )


def two_epochs(stream: ShardStream) -> list:
    return list(stream) + list(stream)


@needs_mapping
def test_mapped_batches_equal_the_preads_across_ranks_resume_and_workers(pack_dir):
    kw = {"order": "global", "labels": True, "seed": 3}
    reads = ShardStream(pack_dir, 8, read="pread", **kw)
    copied = ShardStream(pack_dir, 8, read="mapped", **kw)
    assert same(two_epochs(reads), two_epochs(copied))
    assert (reads.pack.mapped_shards, copied.pack.mapped_shards) == (0, 5)
    for rank in (0, 1):
        a = ShardStream(pack_dir, 8, rank=rank, world_size=2, read="pread", **kw)
        b = ShardStream(pack_dir, 8, rank=rank, world_size=2, read="mapped", **kw)
        assert same(list(a), list(b))
    resumed = ShardStream(pack_dir, 8, read="mapped", **kw)
    resumed.load_state_dict({**reads.state_dict(), "epoch": 1, "batch": 5})
    fresh = ShardStream(pack_dir, 8, read="pread", **kw)
    assert same(list(resumed), two_epochs(fresh)[12 + 5 :])
    reads.set_epoch(0)
    for workers in ("thread", "process"):
        loader = mixshard.loader(pack_dir, 8, num_workers=2, workers=workers, read="mapped", **kw)
        assert same(list(loader), list(reads))
        loader.close()
        reads.set_epoch(0)
    clone = pickle.loads(pickle.dumps(copied))  # unpickled: no mappings until its reader maps
    assert clone.pack.mapped_shards == 0
    clone.set_epoch(0)
    assert same(list(clone), list(reads))


@pytest.mark.parametrize("read", READS)
def test_a_batch_reads_the_stored_images_either_way(pack_dir, read):
    if read == "mapped" and mapped._mapped is None:
        pytest.skip("_mapped.c was not built")
    images = read_pack(pack_dir)[0]
    pack = PackReader(pack_dir, mixshard.Manifest.load(pack_dir))
    assert pack.map_all() == (read == "mapped") or read == "pread"
    if read == "pread":
        pack.close()
    index = np.random.default_rng(3).permutation(N)[:52]
    out = np.empty((len(index), 3, 8, 8), np.uint8)
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, images[index])
    many = np.random.default_rng(4).integers(0, N, 700)  # repeats, every shard
    out = np.empty((700, 3, 8, 8), np.uint8)
    assert pack.read_images(many, out) is None
    assert np.array_equal(out, images[many])
    assert pack.read_images(np.zeros(0, np.int64), out) is None
    assert pack.mapped_shards == (5 if read == "mapped" else 0)
    pack.close()


@pytest.mark.parametrize("read", READS)
def test_a_shard_cut_short_or_copied_over_is_named_either_way(pack_dir, tmp_path, read):
    if read == "mapped" and mapped._mapped is None:
        pytest.skip("_mapped.c was not built")
    folder = copy_pack(pack_dir, tmp_path / "pack")
    stream = ShardStream(folder, 8, order="global", read=read, infinite=True)
    it = iter(stream)
    next(it)
    backup = tmp_path / "backup.tar"
    shutil.copyfile(folder / "shard-000002.tar", backup)
    shutil.copyfile(backup, folder / "shard-000002.tar")  # the same bytes, a new mtime
    with pytest.raises(ShardError, match="shard-000002.tar changed after the pack was opened"):
        for _ in range(12):  # every image within an epoch
            next(it)
    pack = PackReader(folder, mixshard.Manifest.load(folder))
    if read == "mapped":
        assert pack.map_all()
    pack.read_images(np.arange(N), np.empty((N, 3, 8, 8), np.uint8))  # every block checked
    shard = folder / pack.shards[4].name
    shard.write_bytes(shard.read_bytes()[: int(pack.block_offset[-1]) + 10])  # a new file
    with pytest.raises(ShardError) as err:
        pack.read_images(np.array([1, 95]), np.empty((2, 3, 8, 8), np.uint8))
    assert str(shard) in str(err.value)
    assert any(w in str(err.value) for w in ("ends early", "changed after the pack was opened"))
    pack.close()


@needs_mapping
def test_a_skipped_bad_block_gives_the_same_batches_mapped_or_read(tmp_path, pack_dir):
    bad = copy_pack(pack_dir, tmp_path / "bad")
    data = bytearray((bad / "shard-000001.tar").read_bytes())
    data[512:518] = b"XXXXXX"  # the first block's .npy header
    (bad / "shard-000001.tar").write_bytes(bytes(data))
    kw = {"order": "global", "labels": True, "on_error": "skip"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copied = list(ShardStream(bad, 8, read="mapped", **kw))
        reads = list(ShardStream(bad, 8, read="pread", **kw))
    assert same(copied, reads) and len(reads) == 12
    good = read_pack(pack_dir)[0]
    bad_rows = {bytes(x) for x in good[20:28]}  # shard 1's first block: never in a batch
    seen = {bytes(x) for images, _ in reads for x in images.numpy()}
    assert not seen & bad_rows


@needs_mapping
def test_the_global_order_maps_a_cold_pack_once_its_warm_pass_ends(pack_dir, monkeypatch):
    cold = lambda open_shard, sizes, share: False  # noqa: E731 (cold at open)
    monkeypatch.setattr(pack_reader, "resident", cold)
    stream = ShardStream(pack_dir, 8, order="global")
    reader = stream.reader(range(0, 12))
    assert (reader.way, stream.pack.mapped_shards) == ("pread", 0)
    first = reader.get(0).clone()
    reader._warm.join()
    assert stream.pack.mapped_shards == 5  # whole, once the pass has read it in
    assert torch.equal(reader.get(0), first)
    reader.close()
    assert not [t for t in threading.enumerate() if t.name == "mixshard-warm"]
    reads = ShardStream(pack_dir, 8, order="global", read="pread")  # named: never mapped
    reader = reads.reader(range(0, 12))
    assert torch.equal(reader.get(0), first)
    reader._warm.join()
    assert reads.pack.mapped_shards == 0
    reader.close()


def test_mapped_when_it_cannot_be_is_one_clear_error_and_auto_reads(pack_dir, monkeypatch):
    monkeypatch.setattr(plan, "available_memory", lambda: 1000)  # the pack: more than half
    with pytest.raises(MixshardError, match="read='mapped': the pack cannot be mapped here"):
        ShardStream(pack_dir, 8, order="global", read="mapped").reader(range(0, 1))
    reader = ShardStream(pack_dir, 8, order="global").reader(range(0, 1))
    assert reader.way == "pread"
    reader.close()

    def no_descriptor() -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(plan, "available_memory", no_descriptor)
    assert not plan.can_map(1)
    monkeypatch.setattr(plan, "mapping_built", lambda: False)  # no C compiler at install
    assert not plan.can_map(1) and not plan.maps_allowed(1)


@needs_mapping
def test_a_batch_of_preads_reads_rows_out_of_the_page_cache_as_well(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 64 << 10, np.uint8).tobytes()
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # (kept where the file system must)
        rows, offsets = np.arange(16)[::-1].copy(), np.arange(16) * 4096 + 100
        out = np.zeros((16, 1000), np.uint8)
        assert mapped.read_rows(out, rows, np.full(16, fd, np.int64), offsets, 1000) == 16
        for row, at in zip(rows, offsets):
            assert out[row].tobytes() == data[at : at + 1000]
    finally:
        os.close(fd)


@needs_mapping
def test_a_batch_of_preads_in_one_call_stops_at_the_first_it_cannot_read(tmp_path):
    data = bytes(range(256)) * 4  # 1,024 bytes: rows of 16
    path = tmp_path / "f"
    path.write_bytes(data)
    out = np.zeros((4, 16), np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        fds = np.full(4, fd, np.int64)
        got = mapped.read_rows(out, np.array([3, 0, 2, 1]), fds, np.array([0, 16, 1020, 32]), 16)
        assert got == 2  # the third ends past the file's end: short
        assert out[3].tobytes() == data[:16] and out[0].tobytes() == data[16:32]
        assert out[2, :4].tobytes() == data[1020:]  # short (rows after it may have been read)
        bad = np.array([fd, -1], np.int64)
        assert mapped.read_rows(out, np.array([0, 1]), bad, np.array([0, 0]), 16) == 1
        with pytest.raises(ValueError, match="read_rows: arrays do not match"):
            mapped._mapped.read_rows(out, np.array([4]), fds[:1], np.array([0]), 16)
        frozen = out.copy()
        frozen.flags.writeable = False
        with pytest.raises((BufferError, ValueError), match="read-only|not writable"):
            mapped._mapped.read_rows(frozen, np.array([0]), fds[:1], np.array([0]), 16)
    finally:
        os.close(fd)


MB = 1 << 20
WHY_MAPPED = (
    "mapped when the pack is in the page cache (at most 1% of a sample of its bytes out, those "
    "asked for ahead) and fits in half the memory, else "
)
WHOLE_LINE = (
    "whole pack (a device cache): every block once, in stored order, through one host buffer "
    "(`buffers.read_pack_into`), the page cache as above"
)
WORKERS_LINE = "workers: threads unless workers='process' (every pack is read by offset)"


def plan_of(pack_mb: int, blocks: int = 200, **kw) -> plan.ReadPlan:
    given = {"order": "auto", "read": "auto", "fits": True, "need": 0, "store": False, **kw}
    order, read = given.pop("order"), given.pop("read")
    return plan.make_plan(
        order, read, blocks=blocks, window=64, pack_bytes=pack_mb * MB, memory=1000 * MB, **given
    )


def test_a_read_plan_says_what_it_chose_and_why(monkeypatch):
    monkeypatch.delenv("MIXSHARD_MMAP", raising=False)
    big = plan_of(600)
    assert (big.order, big.read, big.drop_cache, big.store) == ("block", "auto", True, False)
    assert big.explain().splitlines() == [
        "order: block (the pack is larger than half the memory: sequential reads)",
        f"read: auto ({WHY_MAPPED}runs of blocks read ahead)",
        "page cache: blocks read are dropped again (the pack is larger than half the memory: "
        "600 MB of 1000 MB available)",
        WHOLE_LINE,
        WORKERS_LINE,
    ]
    small = plan_of(100)
    assert small.why[:3] == (
        "order: global (the pack fits in half the memory: a per-image permutation)",
        f"read: auto ({WHY_MAPPED}one pread per image, mapped once the warm pass has read it in)",
        "page cache: kept (100 MB of 1000 MB available)",
    )
    assert plan_of(100, blocks=14).why[0] == (
        "order: block (one window of 64 blocks holds the whole pack (14))"
    )
    store = plan_of(100, fits=False, need=5, store=True)
    assert store.why[:2] == (
        "order: block (the store's cache cannot hold the whole pack)",
        "read: auto (runs of blocks through the block cache (a store's pack is never mapped))",
    )
    asked = plan_of(100, order="block", read="pread")
    assert asked.why[:2] == ("order: block (asked)", "read: pread (asked)")
    monkeypatch.setenv("MIXSHARD_MMAP", "0")
    assert (
        plan_of(600).why[1]
        == "read: auto (MIXSHARD_MMAP=0: no mappings; runs of blocks read ahead)"
    )


def test_a_read_plan_refuses_what_the_pack_cannot_use_and_picks_the_workers():
    with pytest.raises(ValueError, match="^order must be one of auto, global, block, got 'x'$"):
        plan_of(100, order="x")
    with pytest.raises(ValueError, match=r"^order='global' .* give cache_limit >= 5 bytes"):
        plan_of(100, order="global", fits=False, need=5, store=True)
    with pytest.raises(ValueError, match="read='mapped' applies to pack folders"):
        plan_of(100, order="block", read="mapped", store=True)
    p = plan_of(100)
    assert p.threads("auto") and p.threads("thread") and not p.threads("process")
    with pytest.raises(ValueError, match="workers must be 'auto', 'thread' or 'process', got 'x'"):
        p.threads("x")


def test_the_stream_and_inspect_show_the_plan(tmp_path):
    from helpers import run

    pack = small_pack(tmp_path, 8, shard_size=8, block_size=4)
    stream = ShardStream(pack, 4, order="global", read="pread")
    stats = stream.stats()
    assert (stats["order"], stats["read"], stats["drop_cache"]) == ("global", "pread", False)
    assert stats["explain"] == stream.plan.explain()
    assert stats["explain"].splitlines()[:2] == ["order: global (asked)", "read: pread (asked)"]
    plain = run("inspect", pack).output
    assert "reading:" not in plain
    shown = [ln for ln in run("inspect", pack, "--plan").output.splitlines() if "reading:" in ln]
    assert shown[0] == "reading:  order: block (one window of 64 blocks holds the whole pack (4))"
    assert shown[-1] == f"reading:  {WORKERS_LINE}"

"""The global order's copy of a pack in memory (`reading/inmemory.py`): the same batches as
one `pread` per image, the memory bound, pickling and forks, a shard changed under it."""

from __future__ import annotations

import gc
import pickle
import shutil
import threading
import time
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import copy_pack, make_tree

import mixshard
from mixshard import ShardError, ShardStream
from mixshard.reading import inmemory

N = 96


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    """96 distinct images in 5 shards of 8-image blocks, 3 classes."""
    root = tmp_path_factory.mktemp("inmemory")
    make_tree(root / "src", classes=("a", "b", "c"), per_class=N // 3)
    mixshard.pack(root / "src", root / "pack", size=8, shard_size=20, block_size=8, workers=1)
    return root / "pack"


def filled(stream: ShardStream) -> inmemory.MemoryCopy:
    """The stream's copy, filled now (as its background job would)."""
    copy = stream.memory_copy
    assert copy is not None
    copy.load(threading.Event())
    assert copy.complete
    return copy


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b)
    )


def two_epochs(stream: ShardStream) -> list:
    return list(stream) + list(stream)


def test_batches_from_the_copy_equal_the_preads(pack_dir):
    kw = {"order": "global", "labels": True, "seed": 3}
    reads = ShardStream(pack_dir, 8, in_memory=False, **kw)
    assert reads.memory_copy is None
    copied = ShardStream(pack_dir, 8, in_memory=True, **kw)
    copy = filled(copied)
    assert same(two_epochs(reads), two_epochs(copied))
    assert copy.stats() == {
        "bytes": N * 3 * 8 * 8,
        "blocks_copied": 14,
        "blocks": 14,
        "complete": True,
        "from_memory": 2 * N,
        "from_preads": 0,
    }
    # ranks, resume and the loader's worker threads: the same batches as the preads give
    for rank in (0, 1):
        a = ShardStream(pack_dir, 8, rank=rank, world_size=2, in_memory=False, **kw)
        b = ShardStream(pack_dir, 8, rank=rank, world_size=2, in_memory=True, **kw)
        filled(b)
        assert same(list(a), list(b))
    resumed = ShardStream(pack_dir, 8, in_memory=True, **kw)
    filled(resumed)
    resumed.load_state_dict({**reads.state_dict(), "epoch": 1, "batch": 5})
    fresh = ShardStream(pack_dir, 8, in_memory=False, **kw)
    assert same(list(resumed), two_epochs(fresh)[12 + 5 :])
    reads.set_epoch(0)
    loader = mixshard.loader(pack_dir, 8, num_workers=2, in_memory=True, **kw)
    filled(loader.stream)
    assert same(list(loader), list(reads))
    loader.close()


def test_the_copy_is_filled_after_the_first_epoch(pack_dir):
    stream = ShardStream(pack_dir, 8, order="global", in_memory=True, infinite=True)
    copy = stream.memory_copy
    assert copy is not None
    reader = stream.reader(range(0, 1 << 40))
    nb = stream.batches_per_epoch
    for k in range(nb):  # the first epoch: read with pread, nothing copied
        reader.get(k)
    assert copy.stats()["blocks_copied"] == 0 and copy.from_preads == N
    reader.get(nb)  # the first batch after it starts the fill
    for _ in range(600):  # wait for the background job (a condition, not a time)
        if copy.complete:
            break
        time.sleep(0.1)
    assert copy.complete
    reader.get(nb + 1)
    assert copy.from_memory == 8
    reader.close()


def test_until_complete_batches_are_read_with_pread(pack_dir):
    copied = ShardStream(pack_dir, 8, order="global", in_memory=True)
    reader = copied.reader(range(0, 1 << 40))
    first = reader.get(0)  # starts the filling job
    reader.close()  # stops it, whether done or not
    copy = copied.memory_copy
    assert copy is not None and copy.from_preads == 8 and copy.from_memory == 0
    reads = ShardStream(pack_dir, 8, order="global", in_memory=False)
    assert torch.equal(first, next(iter(reads)))
    stop = threading.Event()
    stop.set()
    fresh = ShardStream(pack_dir, 8, order="global", in_memory=True)
    assert fresh.memory_copy is not None
    fresh.memory_copy.load(stop)  # stopped before its first run: nothing copied
    assert fresh.memory_copy.stats()["blocks_copied"] == 0
    fresh.memory_copy.load(threading.Event())  # the next job copies what is left
    assert fresh.memory_copy.complete


def test_the_copy_is_made_only_for_the_global_order_within_the_bound(pack_dir, monkeypatch):
    images = N * 3 * 8 * 8
    monkeypatch.setattr(inmemory, "available_memory", lambda: 4 * images)
    assert ShardStream(pack_dir, 8, order="global").memory_copy is None  # opt-in
    assert ShardStream(pack_dir, 8, order="global", in_memory=None).memory_copy is not None
    monkeypatch.setattr(inmemory, "available_memory", lambda: 4 * images - 1)
    over = ShardStream(pack_dir, 8, order="global", in_memory=None)
    assert over.memory_copy is None  # over the bound: one pread per image, as before
    assert ShardStream(pack_dir, 8, order="global", in_memory=True).memory_copy is not None
    assert ShardStream(pack_dir, 8, order="block", in_memory=True).memory_copy is None
    assert ShardStream(pack_dir, 8, window=2, in_memory=None).memory_copy is None  # auto order
    with pytest.raises(TypeError, match="in_memory must be True, False or None, got 'yes'"):
        ShardStream(pack_dir, 8, in_memory="yes")  # type: ignore[arg-type]


def test_pickled_and_forked_streams_read_with_pread(pack_dir):
    kw = {"order": "global", "labels": True, "infinite": False}
    stream = ShardStream(pack_dir, 8, in_memory=True, **kw)
    copy = filled(stream)
    clone = pickle.loads(pickle.dumps(stream))
    assert clone.memory_copy is not None and not clone.memory_copy.usable
    assert clone.memory_copy.stats()["blocks_copied"] == 0
    reads = list(ShardStream(pack_dir, 8, in_memory=False, **kw))
    assert same(list(clone), reads)
    assert clone.memory_copy.from_memory == 0
    # DataLoader worker processes (forked): each reads with pread, none copies the pack
    loader = mixshard.loader(pack_dir, 8, num_workers=2, workers="process", in_memory=True, **kw)
    assert loader.stream.memory_copy is not None
    assert same(list(loader), reads)
    loader.close()
    assert loader.stream.memory_copy.stats()["blocks_copied"] == 0
    assert copy.from_memory == 0  # the parent's own copy was not used by the clone


def test_a_shard_changed_under_the_copy_is_noticed(tmp_path, pack_dir):
    pack = copy_pack(pack_dir, tmp_path / "pack")
    stream = ShardStream(pack, 8, order="global", in_memory=True, infinite=True)
    filled(stream)
    it = iter(stream)
    next(it)
    backup = tmp_path / "backup.tar"
    shutil.copyfile(pack / "shard-000002.tar", backup)
    shutil.copyfile(backup, pack / "shard-000002.tar")  # the same bytes, a new mtime
    with pytest.raises(ShardError, match="shard-000002.tar changed after the pack was opened"):
        for _ in range(5):  # one shard checked per batch: within 5 batches
            next(it)


def test_a_shard_truncated_before_the_fill_stops_it_and_the_reads_name_it(tmp_path, pack_dir):
    pack = copy_pack(pack_dir, tmp_path / "pack")
    stream = ShardStream(pack, 8, order="global", in_memory=True)
    with open(pack / "shard-000002.tar", "r+b") as f:
        f.truncate(2048)
    copy = stream.memory_copy
    assert copy is not None
    copy.load(threading.Event())
    assert copy.stats()["blocks_copied"] == 6  # shards 0 and 1: 3 blocks each; then it stops
    assert not copy.complete
    with pytest.raises(ShardError, match="shard-000002.tar"):
        list(stream)
    assert copy.from_memory == 0


def test_a_pack_with_a_skipped_bad_block_keeps_the_preads(tmp_path, pack_dir):
    bad = copy_pack(pack_dir, tmp_path / "bad")
    data = bytearray((bad / "shard-000001.tar").read_bytes())
    data[512:518] = b"XXXXXX"  # the first block's .npy header
    (bad / "shard-000001.tar").write_bytes(bytes(data))
    kw = {"order": "global", "labels": True, "on_error": "skip"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copied = ShardStream(bad, 8, in_memory=True, **kw)
        assert copied.memory_copy is not None
        copied.memory_copy.load(threading.Event())
        assert not copied.memory_copy.complete
        assert copied.memory_copy.stats()["blocks_copied"] == 13
        reads = list(ShardStream(bad, 8, in_memory=False, **kw))
        assert same(list(copied), reads)
    assert copied.memory_copy.from_preads == N


def test_the_copy_goes_with_its_stream_and_its_job_with_the_reader(pack_dir):
    loader = mixshard.loader(pack_dir, 8, num_workers=2, order="global", in_memory=True)
    it = iter(loader)
    next(it)
    copy = loader.stream.memory_copy
    assert copy is not None
    gone = weakref.ref(copy)
    loader.close()
    assert not [t for t in threading.enumerate() if t.name in ("mixshard-warm", "mixshard-fill")]
    del loader, it, copy
    gc.collect()
    assert gone() is None  # its memory with it (private memory: nothing outlives the process)


def test_the_gather_checks_its_output(pack_dir):
    copy = filled(ShardStream(pack_dir, 8, order="global", in_memory=True))
    with pytest.raises(ValueError, match="out must be C-contiguous with room for 4 images"):
        copy.read_images(np.arange(4), np.empty((3, 3, 8, 8), np.uint8))


def test_the_fill_faults_its_pages_in_ahead_and_copes_without_the_call(pack_dir, monkeypatch):
    """Each run's rows are populated with one `madvise` before they are read into; a kernel
    that refuses the call (before Linux 5.14) is asked once, and the reads fault pages in."""
    reads = list(ShardStream(pack_dir, 8, order="global", in_memory=False))
    real, calls = inmemory._madvise, []

    def record(address: int, length: int, advice: int) -> int:
        calls.append((length, advice, real(address, length, advice)))
        return calls[-1][2]

    monkeypatch.setattr(inmemory, "_madvise", record)
    stream = ShardStream(pack_dir, 8, order="global", in_memory=True)
    filled(stream)
    assert same(list(stream), reads)
    # 5 shards of 3 blocks (8, 8, 4 images): one run each, its 20 or 16 rows of 192 bytes
    assert [(advice, got) for _, advice, got in calls] == [(inmemory.MADV_POPULATE_WRITE, 0)] * 5
    assert sum(length for length, _, _ in calls) >= N * 3 * 8 * 8
    calls.clear()
    monkeypatch.setattr(inmemory, "MADV_POPULATE_WRITE", 12345)  # no such advice: refused
    refused = ShardStream(pack_dir, 8, order="global", in_memory=True)
    filled(refused)
    assert same(list(refused), reads)
    assert [(advice, got) for _, advice, got in calls] == [(12345, -1)]

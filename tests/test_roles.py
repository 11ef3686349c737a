"""Process workers in the block order split the reading: each block is read by one worker
(issue 22, point 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import small_pack
from torch.utils.data import DataLoader, IterableDataset

import mixshard
from mixshard import ShardStream


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    """640 images of 8 px in blocks of 4 (160 blocks, 40 runs of 4)."""
    return small_pack(tmp_path_factory.mktemp("roles"), 320, shard_size=160, block_size=4)


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar"))


class _Measured(IterableDataset):
    """The stream's batches, between the bytes its process had read before and after."""

    def __init__(self, stream: ShardStream) -> None:
        self.stream = stream

    def __iter__(self):
        yield ("start", _rchar())
        yield from self.stream
        yield ("end", _rchar())


def _epoch(pack_dir: Path, workers: int) -> tuple[list[bytes], int]:
    stream = ShardStream(pack_dir, 8, order="block", seed=2)
    images, read = [], 0
    for item in DataLoader(_Measured(stream), batch_size=None, num_workers=workers):
        if isinstance(item, (tuple, list)):
            read += item[1] if item[0] == "end" else -item[1]
        else:
            assert item.shape == (8, 3, 8, 8)
            images += [bytes(image.numpy()) for image in item]
    return images, read


def test_each_block_is_read_by_one_worker(pack_dir, block_feed):
    _epoch(pack_dir, 0)  # once first: this process's lazy imports read files too
    alone, read_alone = _epoch(pack_dir, 0)
    assert len(alone) == len(set(alone)) == 640
    for workers in (2, 4):
        images, read = _epoch(pack_dir, workers)
        assert len(images) == 640 and set(images) == set(alone)  # every image once
        assert abs(read - read_alone) <= 0.1 * read_alone, (workers, read, read_alone)


def test_the_batches_are_fixed_for_a_worker_count(pack_dir):
    first, _ = _epoch(pack_dir, 2)
    again, _ = _epoch(pack_dir, 2)
    assert first == again


def test_process_loader_resumes_exactly_and_keeps_epochs(pack_dir):
    def loader():
        return mixshard.loader(pack_dir, 8, num_workers=2, workers="process", order="block")

    full = [bytes(b.numpy()) for b in loader()]
    assert len(full) == 80 and len(set(full)) == 80
    interrupted = loader()
    it = iter(interrupted)
    head = [bytes(next(it).numpy()) for _ in range(33)]
    state = interrupted.state_dict()
    interrupted.close()
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + [bytes(b.numpy()) for b in resumed] == full


def test_one_worker_and_the_global_order_are_unchanged(pack_dir):
    for kw in ({"order": "block"}, {"order": "global"}):
        alone = [bytes(b.numpy()) for b in ShardStream(pack_dir, 8, seed=2, **kw)]
        dl = DataLoader(ShardStream(pack_dir, 8, seed=2, **kw), batch_size=None, num_workers=1)
        assert [bytes(b.numpy()) for b in dl] == alone
        if kw["order"] == "global":
            dl = DataLoader(ShardStream(pack_dir, 8, seed=2, **kw), batch_size=None, num_workers=2)
            assert [bytes(b.numpy()) for b in dl] == alone
    assert torch.cuda.is_available() in (True, False)


@pytest.mark.parametrize("workers", [2, 4])
def test_a_run_split_between_two_workers_is_read_only_where_each_needs_it(
    pack_dir, block_feed, monkeypatch, workers
):
    # A worker whose part of the epoch starts or ends inside a run of 4 blocks read the whole
    # run (issue 40: 1.5x the pack an epoch with four workers on a 25-block pack). Now each
    # seam between two parts shares one block at most: the one the cut falls in.
    from mixshard.reading.pack.reader import PackReader

    read: list[int] = []
    scatter_run = PackReader.scatter_run

    def counted(self, blocks, *args, **kwargs):
        read.extend(blocks)
        return scatter_run(self, blocks, *args, **kwargs)

    monkeypatch.setattr(PackReader, "scatter_run", counted)
    stream = ShardStream(pack_dir, 12, order="block", seed=2)  # parts cut inside runs
    nb = stream.batches_per_epoch
    images = []
    for wid in range(workers):  # what each worker process makes, one after another here
        for _, batch in stream._batches_of.batches(0, nb, wid, workers, nb, 0, 1):
            images += [bytes(image.numpy()) for image in torch.as_tensor(batch)]
    assert len(images) == len(set(images)) == nb * 12 == 636  # 4 left over
    blocks = len(stream.pack.block_count)
    assert len(set(read)) >= blocks - 1  # (one may hold only images left over)
    assert len(read) <= blocks + workers - 1, (len(read), blocks)

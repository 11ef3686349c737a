"""The bytes process workers read in the block order (issue 46, point 13): over one epoch the
whole process tree reads each image of the pack once, whatever the number of workers.

Each worker process makes a contiguous part of the epoch (`roles.py`); a part's first or last
block is shared with the next part when the cut between them falls inside it. Both workers
read such a block whole at 5e33428, so a pack of 12 blocks read 13 blocks' bytes an epoch with
2 workers and 15 with 4. Counted here as the bytes read from the shard files by every process
of the tree (a counter in shared memory that forked workers inherit), not timed.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import small_pack
from torch.utils.data import DataLoader

from mixshard import Manifest, ShardError, ShardStream
from mixshard.core import layout
from mixshard.reading.pack import reader as pack_reader
from mixshard.reading.pack.reader import PackReader

BATCH = 14  # 240 images: 17 batches; the parts of 2 and of 4 workers end inside blocks


@pytest.fixture(scope="module")
def seam_pack(tmp_path_factory) -> Path:
    """240 images of 8 px in 12 blocks of 20, one shard."""
    return small_pack(tmp_path_factory.mktemp("seams"), 120, shard_size=240, block_size=20)


@pytest.fixture
def shard_bytes_read(monkeypatch, block_feed):
    """A counter of the bytes every process (forked after this) reads from shard files."""
    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the counter reaches the workers by fork")
    count = multiprocessing.Value("q", 0)
    read_iov, pread = pack_reader.read_iov, pack_reader.PackReader._pread

    def counted_iov(fd, iov, offset):
        got = read_iov(fd, iov, offset)
        with count.get_lock():
            count.value += got
        return got

    def counted_pread(self, slot, fd, buf, offset):
        pread(self, slot, fd, buf, offset)
        with count.get_lock():
            count.value += len(buf)

    monkeypatch.setattr(pack_reader, "read_iov", counted_iov)
    monkeypatch.setattr(pack_reader.PackReader, "_pread", counted_pread)
    return count


def _epoch(pack: Path, workers: int, count) -> int:
    """The bytes the process tree read for one epoch of the block order with `workers`
    processes (the workers are joined when the epoch ends); its images are checked to be
    distinct images of the pack."""
    stream = ShardStream(pack, BATCH, order="block", seed=3, window=4, run=4)
    every = {bytes(image) for image in stream.pack.gather(np.arange(stream.count))}
    count.value = 0
    images: list[bytes] = []
    bound = {"timeout": 60} if workers else {}  # a batch that never comes fails the test
    for batch in DataLoader(stream, batch_size=None, num_workers=workers, **bound):
        images += [bytes(image.numpy()) for image in torch.as_tensor(batch)]
    assert len(images) == len(set(images)) == 17 * BATCH
    assert set(images) <= every  # none read from the wrong place
    return count.value


def test_each_image_is_read_once_by_the_process_tree(seam_pack, shard_bytes_read):
    pack_bytes = sum(p.stat().st_size for p in seam_pack.glob("shard-*.tar"))
    read_alone = _epoch(seam_pack, 0, shard_bytes_read)
    assert read_alone <= pack_bytes
    for workers in (2, 4):
        read = _epoch(seam_pack, workers, shard_bytes_read)
        # The workers together read no more than one reader alone: a block that a seam falls
        # in costs each side only its own images (and the block's headers and labels, 336
        # bytes, twice). Here 0.89x and 0.79x, as the workers skip the images left over and,
        # at a seam, the tar members after a block's images. At 5e33428 both sides read the
        # block whole: one more block of 12 with 2 workers (1.065x), three with 4 (1.194x).
        assert read <= read_alone, (workers, read, read_alone, pack_bytes)


def _part(pack: PackReader, b: int, first: int, n: int) -> tuple[object, np.ndarray]:
    """`scatter_part` of images `first .. first + n` of block `b` into rows 1 .. n of a fresh
    array (row 0 and the last row stay zero: nothing is written outside the part)."""
    size = pack.manifest.image_bytes
    out = np.zeros((n + 2, size), np.uint8)
    addresses = out.ctypes.data + size * np.arange(1, n + 1, dtype=np.uint64)
    return pack.scatter_part(b, first, addresses), out


def test_a_part_of_a_block_is_its_images_and_a_bad_block_is_said(seam_pack, tmp_path):
    m = Manifest.load(seam_pack)
    pack = PackReader(seam_pack, m)
    result, out = _part(pack, 5, 7, 9)
    assert result is True
    start = int(pack.block_start[5])
    want = pack.gather(np.arange(start + 7, start + 16)).reshape(9, -1)
    assert np.array_equal(out[1:-1], want) and not out[0].any() and not out[-1].any()

    bad = tmp_path / "pack"
    shutil.copytree(seam_pack, bad)
    block = m.shards[0].blocks[5]
    with open(bad / m.shards[0].name, "r+b") as f:  # damage block 5's images header
        f.seek(block.offset - layout.images_header_len(block.count, m.size))
        f.write(b"XXXXXX")
    result, _ = _part(PackReader(bad, m), 5, 7, 9)
    assert isinstance(result, ShardError) and "block 00000005" in str(result)
    with pytest.warns(RuntimeWarning, match="skipping a bad block"):
        assert _part(PackReader(bad, m, on_error="skip"), 5, 7, 9)[0] is False

    cut = tmp_path / "cut"
    shutil.copytree(seam_pack, cut)
    opened = PackReader(cut, m)
    assert _part(opened, 5, 7, 9)[0] is True  # checked: the next read is of images only
    os.truncate(cut / m.shards[0].name, block.offset + 10 * m.image_bytes)  # under the reader
    with pytest.raises(ShardError, match="shard-000000.tar"):
        _part(opened, 5, 7, 9)

"""The block cache of a store pack against a hostile or full disk (issue 40, points 3 and 7).

A link planted in the cache (`cache_dir/<id>/part-0/...`) is refused and its target left as
it was, byte for byte; a full `cache_dir` is one `MixshardError` naming it and `cache_limit`,
and the default limit counts the pages blocks take, so it never fills the disk. The pack is
on moto's S3 server on 127.0.0.1; the small disk is a tmpfs (the test skips where mounting is
not allowed).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import make_tree

import mixshard
from mixshard import MixshardError, ShardStream
from mixshard.core.stores import Store
from mixshard.reading.store import storepack

pytest.importorskip("s3fs", reason="the s3 extra is not installed (pip install 'mixshard[s3]')")

N = 96  # 8 px images in blocks of 8: ~1.8 KB a block, one or two 4 KiB pages on disk


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cachefaults")
    make_tree(root / "src", classes=("a", "b", "c"), per_class=N // 3)
    mixshard.pack(root / "src", root / "pack", size=8, shard_size=48, block_size=8, workers=1)
    return root / "pack"


@pytest.fixture
def url(pack_dir, s3_bucket) -> str:
    store = Store(s3_bucket + "/p")
    for name in sorted(os.listdir(pack_dir)):
        if name.endswith(".tar"):
            store.upload(pack_dir / name, name)
    store.upload(pack_dir / "index.json", "index.json")
    return store.url


def batches(stream: ShardStream) -> list[torch.Tensor]:
    return [b.clone() for b in stream]


@pytest.fixture
def victim(tmp_path) -> tuple[Path, bytes]:
    """A file outside the cache that a planted link points at."""
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    data = b"precious bytes that are not a shard\n" * 100
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize(
    "planted", ["part-0/shard-000000.tar", "part-0/lock", "part-0", "part-0/have"]
)
def test_a_link_planted_in_the_cache_is_refused_and_its_target_untouched(
    url, tmp_path, victim, planted
):
    stream = ShardStream(url, 8, order="block", cache_dir=tmp_path / "c")
    root = stream.pack.files.root  # cache_dir/<pack identity>
    link = root / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    target = victim[0] if "." in planted or planted.endswith("lock") else victim[0].parent
    link.symlink_to(target)
    with pytest.raises(MixshardError) as err:
        list(stream)
    assert str(err.value) == (
        f"{link} in the block cache is a symbolic link or not a regular file or folder; mixshard "
        f"never writes through one: remove it (or the whole cache folder, {link.parent}) or "
        "give another cache_dir"
    )
    assert victim[0].read_bytes() == victim[1]  # byte for byte, not truncated nor written
    assert sorted(os.listdir(victim[0].parent)) == ["victim.txt"]  # nothing made beside it
    assert link.is_symlink()  # left for the user to look at


def test_a_link_among_the_kept_blocks_is_removed_never_followed(url, pack_dir, tmp_path, victim):
    first = ShardStream(url, 8, order="block", cache_dir=tmp_path / "c")
    root = first.pack.files.root
    (root / "part-0" / "have").mkdir(parents=True)
    (root / "part-0" / "have" / "0").symlink_to(victim[0])  # "block 0 is kept": it is not
    assert _same(batches(first), batches(ShardStream(pack_dir, 8, order="block")))
    assert victim[0].read_bytes() == victim[1]
    assert not (root / "part-0" / "have" / "0").is_symlink()  # checked, dropped, fetched


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) == N // 8 and all(torch.equal(x, y) for x, y in zip(a, b))


def test_a_full_cache_disk_names_cache_dir_and_cache_limit(url, tmp_path, monkeypatch):
    """ENOSPC from the write of a block (stood in for by os.pwrite) is one line, not Errno 28."""
    from mixshard.reading.store import blockcache

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(blockcache.os, "pwrite", full)
    cache_dir = tmp_path / "c"
    stream = ShardStream(url, 8, order="block", cache_dir=cache_dir, cache_limit=1 << 20)
    with pytest.raises(MixshardError) as err:
        list(stream)
    text = str(err.value)
    assert not isinstance(err.value, mixshard.ShardError)  # on_error="skip" does not hide it
    assert text.startswith(f"the disk of cache_dir {cache_dir} is full (No space left on device; ")
    assert " bytes of its limit of 1048576 in use. Give a smaller cache_limit= (bytes), or a " in (
        text
    )
    assert text.endswith("cache_dir= on a disk with more room")


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `folder` (the test skips where mounting is not allowed)."""
    folder.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:  # lazily where a descriptor of a failed test is still open there
        if subprocess.run(["umount", str(folder)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def test_a_cache_on_a_small_disk_by_default_never_fills_it(url, pack_dir, tmp_path):
    """72 KiB of disk, 56 KiB of blocks in pages (45 KiB of bytes): the default limit is half
    the free space counted in pages, and three epochs read through it without a full disk
    (counted in bytes, the edge pages of dropped blocks stayed allocated: 56 KiB in use)."""
    with small_disk(tmp_path / "small", "72k") as disk:
        stream = ShardStream(url, 8, order="block", cache_dir=disk)
        pack = stream.pack
        assert pack.files.limit == (72 << 10) // 2 < pack.files.need
        local = ShardStream(pack_dir, 8, order="block")
        for epoch in range(3):
            stream.set_epoch(epoch)
            local.set_epoch(epoch)
            assert _same(batches(stream), batches(local))
        used = os.statvfs(disk)
        assert (used.f_blocks - used.f_bfree) * used.f_frsize <= pack.files.limit
        # a limit larger than the disk fills it: the error names the fix
        big = ShardStream(url, 8, order="block", cache_dir=disk / "big", cache_limit=1 << 20)
        with pytest.raises(MixshardError, match=r"^the disk of cache_dir .*/big is full"):
            list(big)
        big.pack.files.cache.close()
        stream.pack.files.cache.close()


def test_the_limit_that_holds_the_whole_pack_counts_its_pages(url, tmp_path):
    stream = ShardStream(url, 8, cache_dir=tmp_path / "c")
    pack = stream.pack
    spans = pack.files.spans
    pages = sum(((end + 4095) // 4096 - start // 4096) * 4096 for _, start, end in spans.tolist())
    assert os.statvfs(tmp_path).f_frsize == 4096
    assert pack.files.need == pages > pack.files.block_bytes
    assert storepack.default_limit(pack.files.need, tmp_path) == pages  # type: ignore[union-attr]


def test_a_cache_dir_that_cannot_be_made_is_one_line(url, tmp_path):
    (tmp_path / "file").write_bytes(b"not a folder")
    stream = ShardStream(url, 8, cache_dir=tmp_path / "file" / "c")
    with pytest.raises(MixshardError) as err:
        list(stream)
    root = stream.pack.files.root
    assert str(err.value) == (
        f"cannot use the block cache under {root}: Not a directory; give a cache_dir= where "
        "this process can write (and a cache_limit= that fits)"
    )

"""Reading packs on an object store (s3:// on moto's server, 127.0.0.1) through the block cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from helpers import make_tree, small_pack

import mixshard
from mixshard import ManifestError, MixshardError, ShardError, ShardStream
from mixshard.core import stores
from mixshard.core.files import user_cache_dir
from mixshard.core.stores import Store
from mixshard.reading.store import blockcache, cachefiles, eviction
from mixshard.writing.out.storeout import staging_root

N = 96  # images: 5 shards (20, 20, 20, 20, 16) of 8-image blocks


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("storeread")
    return small_pack(root, N // 3, shard_size=20, block_size=8, classes=("a", "b", "c"))


def upload(folder: Path, url: str) -> str:
    """Put a local pack at `url` the way a finished upload leaves it (index.json last)."""
    store = Store(url)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".tar"):
            store.upload(folder / name, name)
    store.upload(folder / "index.json", "index.json")
    return url


@pytest.fixture
def url(pack_dir, s3_bucket) -> str:
    return upload(pack_dir, s3_bucket + "/packs/p")


def need_of(url: str, tmp_path: Path) -> int:
    return ShardStream(url, 8, cache_dir=tmp_path / "probe").pack.files.need


def stack(batches) -> list[torch.Tensor]:
    return [b.clone() for b in batches]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("order", ["block", "global"])
def test_a_store_gives_exactly_the_local_batches(pack_dir, url, tmp_path, order):
    local = ShardStream(pack_dir, 8, order=order, seed=3, labels=True)
    remote = ShardStream(url, 8, order=order, seed=3, labels=True, cache_dir=tmp_path / "c")
    assert remote.order == order and remote.source.kind == "store"
    for epoch in range(2):
        local.set_epoch(epoch)
        remote.set_epoch(epoch)
        want, got = list(local), list(remote)
        assert len(got) == N // 8
        for (wi, wl), (gi, gl) in zip(want, got):
            assert torch.equal(wi, gi) and torch.equal(wl, gl)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_epoch_contract_holds_over_s3(pack_dir, url, tmp_path, workers):
    kw = {"num_workers": workers, "workers": "process", "pin_memory": False, "seed": 1}
    local = mixshard.loader(pack_dir, 8, **kw)
    half = need_of(url, tmp_path) // 2
    remote = mixshard.loader(url, 8, cache_dir=tmp_path / "c", cache_limit=half, **kw)
    try:
        for _ in range(2):
            want, got = stack(local), stack(remote)
            assert same(want, got) and len(got) == N // 8
            rows = {bytes(img.numpy()) for batch in got for img in batch}
            assert len(rows) == N  # every image once per epoch
    finally:
        local.close()
        remote.close()


def test_state_dict_resumes_over_s3(pack_dir, url, tmp_path):
    full = mixshard.loader(url, 8, pin_memory=False, cache_dir=tmp_path / "a")
    it = iter(full)
    first = [next(it).clone() for _ in range(5)]
    state = full.state_dict()
    rest = stack(it)
    again = mixshard.loader(url, 8, pin_memory=False, cache_dir=tmp_path / "b")
    again.load_state_dict(state)
    assert same(stack(again), rest) and len(first) + len(rest) == N // 8


def test_the_byte_limit_is_never_passed_and_a_second_run_fetches_nothing(url, tmp_path):
    need = need_of(url, tmp_path)  # the blocks' pages on disk
    data = ShardStream(url, 8, cache_dir=tmp_path / "probe").pack.files.block_bytes
    for limit in (need // 4, need // 2):
        stream = ShardStream(url, 8, cache_dir=tmp_path / f"c{limit}", cache_limit=limit)
        for epoch in range(3):
            stream.set_epoch(epoch)
            assert len(list(stream)) == N // 8
        cache = stream.pack.files.cache
        assert cache.peak <= limit and cache.fetched_bytes > data
        on_disk = sum(os.stat(p).st_blocks * 512 for p in (tmp_path / f"c{limit}").rglob("s*"))
        assert on_disk <= limit  # pages of blocks dropped are freed, edges included
    first = ShardStream(url, 8, cache_dir=tmp_path / "full", cache_limit=need)
    want = stack(first)
    assert first.pack.files.cache.fetched_bytes == data  # type: ignore[union-attr]
    on_disk = sum(os.stat(p).st_blocks * 512 for p in (tmp_path / "full").rglob("shard-*.tar"))
    assert data < on_disk <= need
    first.pack.files.cache.close()  # (a run's end lets its part go)
    second = ShardStream(url, 8, cache_dir=tmp_path / "full", cache_limit=need)
    assert same(stack(second), want)
    assert second.pack.files.cache.fetched_bytes == 0  # type: ignore[union-attr]


def test_a_changed_pack_gets_a_new_cache_folder(pack_dir, url, tmp_path):
    a = ShardStream(url, 8, cache_dir=tmp_path / "c")
    list(a)
    meta = json.loads(Store(url).read("index.json"))
    meta["classes"] = ["x", "y", "z"]
    Store(url).write("index.json", json.dumps(meta).encode())
    b = ShardStream(url, 8, cache_dir=tmp_path / "c")
    list(b)
    assert a.pack.files.root != b.pack.files.root
    assert len(list((tmp_path / "c").iterdir())) == 2
    assert b.pack.files.cache.fetched_bytes == b.pack.files.block_bytes


def test_an_object_changed_after_the_manifest_was_read_is_refused(pack_dir, url, tmp_path):
    stream = ShardStream(url, 8, cache_dir=tmp_path / "c")
    data = bytearray((pack_dir / "shard-000000.tar").read_bytes())
    data[2000] ^= 0xFF  # same size, other bytes: the block's sha256 differs
    Store(url).write("shard-000000.tar", bytes(data))
    with pytest.raises(ShardError) as err:
        list(stream)
    assert f"{url}/shard-000000.tar: block 0 (bytes 0-" in str(err.value)
    assert "is not as its sha256 in index.json says; the pack changed after its" in str(err.value)
    assert "\n" not in str(err.value)
    assert not any((tmp_path / "c").rglob("have/0"))  # nothing unchecked kept


def test_a_shortened_object_is_refused(pack_dir, url, tmp_path):
    stream = ShardStream(url, 8, cache_dir=tmp_path / "c", shuffle=False)
    Store(url).write("shard-000000.tar", (pack_dir / "shard-000000.tar").read_bytes()[:3000])
    with pytest.raises(ShardError) as err:
        list(stream)
    assert str(err.value).startswith(f"{url}/shard-000000.tar: block 0 (bytes 0-")
    assert "came back as 3000 bytes (the object is shorter than index.json says); " in str(
        err.value
    )


def test_a_missing_object_or_bucket_is_one_line(url, tmp_path):
    with pytest.raises(ManifestError) as err:
        ShardStream("s3://no-such-bucket-24/p", 8, cache_dir=tmp_path)
    assert "s3://no-such-bucket-24/p/index.json does not exist" in str(err.value)
    stream = ShardStream(url, 8, cache_dir=tmp_path / "c", shuffle=False)
    Store(url).remove("shard-000000.tar")
    with pytest.raises(ShardError) as err:
        list(stream)
    assert str(err.value) == (
        f"{url}/shard-000000.tar does not exist: check the bucket and prefix (and that the "
        "pack was uploaded)"
    )


def test_denied_access_is_one_line(url, tmp_path, monkeypatch):
    stream = ShardStream(url, 8, cache_dir=tmp_path / "c")

    def denied(path, start=None, end=None):
        raise PermissionError("AccessDenied")

    fs = Store(url).fs  # the instance every Store of this bucket shares (fsspec's cache)
    monkeypatch.setattr(fs, "cat_file", denied)
    with pytest.raises(ShardError) as err:
        list(stream)
    assert str(err.value).startswith(f"access to {url}/shard-0000")
    assert "check the credentials" in str(err.value)


def test_a_stalling_store_is_an_error_not_a_hang(url, tmp_path, monkeypatch):
    stream = ShardStream(url, 8, cache_dir=tmp_path / "c")
    monkeypatch.setattr(stores, "STORE_DEADLINE", 0.2)
    monkeypatch.setattr(Store, "read", lambda self, name, start=None, end=None: time.sleep(3))
    began = time.monotonic()
    with pytest.raises(ShardError) as err:
        list(stream)
    assert time.monotonic() - began < 3
    assert " stalled: bytes " in str(err.value) and str(err.value).startswith(url)


def test_a_pack_without_block_digests_is_refused(pack_dir, s3_bucket, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    for name in os.listdir(pack_dir):
        (old / name).write_bytes((pack_dir / name).read_bytes())
    meta = json.loads((old / "index.json").read_text())
    for shard in meta["shards"]:
        for block in shard["blocks"]:
            block.pop("sha256", None)
    (old / "index.json").write_text(json.dumps(meta))
    url = upload(old, s3_bucket + "/old")
    with pytest.raises(ManifestError) as err:
        ShardStream(url, 8, cache_dir=tmp_path / "c")
    assert str(err.value).startswith(f"{url}: this pack was made by an older mixshard")
    assert "repack it" in str(err.value)


def test_global_order_needs_the_whole_pack_in_the_cache(url, tmp_path):
    need = need_of(url, tmp_path)
    with pytest.raises(ValueError, match="order='global' .* cache_limit >= "):
        ShardStream(url, 8, order="global", cache_dir=tmp_path, cache_limit=need - 1)
    with pytest.raises(MixshardError, match="smaller than one read"):
        list(ShardStream(url, 8, cache_dir=tmp_path / "tiny", cache_limit=100))


def test_two_processes_never_share_a_cache_part(tmp_path):
    a, fa = cachefiles.claim_part(tmp_path)
    b, fb = cachefiles.claim_part(tmp_path)
    assert a != b
    os.close(fa)
    c, fc = cachefiles.claim_part(tmp_path)
    assert c == a
    os.close(fb)
    os.close(fc)


def test_the_default_cache_is_under_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MIXSHARD_STAGING", raising=False)
    assert user_cache_dir() == tmp_path / "mixshard"
    assert staging_root() == tmp_path / "mixshard" / "staging"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert user_cache_dir() == Path.home() / ".cache" / "mixshard"


@pytest.mark.parametrize("cache", ["device", "pool"])
def test_overlay_reads_a_store(url, tmp_path, pack_dir, cache):
    kw = {"cache": cache, "device": "cpu", "flip": False, "num_workers": 0, "seed": 1, "pool": 16}
    got = mixshard.Overlay(url, cache_dir=tmp_path / "c", **kw)
    want = mixshard.Overlay(pack_dir, **kw)
    assert got.source.kind == "store"
    assert torch.equal(got.sample(40), want.sample(40))
    got.close()
    want.close()


@pytest.fixture(scope="module")
def pack32(tmp_path_factory) -> Path:
    """32 blocks of 8 images of 16 px in 4 shards: a small pack, many blocks."""
    root = tmp_path_factory.mktemp("pack32")
    make_tree(root / "src", classes=("a", "b", "c", "d"), per_class=64)
    mixshard.pack(root / "src", root / "pack", size=16, shard_size=64, block_size=8, workers=1)
    return root / "pack"


@pytest.mark.parametrize("workers", [0, 2])
def test_half_a_small_pack_cached_fetches_near_half_an_epoch(pack32, s3_bucket, tmp_path, workers):
    # a cache of half a pack of 32 blocks, with a run of 4 blocks (the default), one window
    # of 64 blocks and (with 2 process workers) a quarter of the pack in each worker's cache:
    # epochs after the first fetched 75% of it in one process, 100% with 2 workers, while the
    # benchmark's 128 larger blocks read in one process showed 50%. Belady's bound: 50%.
    url = upload(pack32, s3_bucket + "/p32")
    log = tmp_path / "fetches.log"
    real = blockcache.BlockCache._start

    def start(cache: blockcache.BlockCache, b: int, t: int) -> None:
        # each fetch, by the epoch of the read it is for (fetched ahead or not), in every
        # process (the forked workers run this too): not smeared by the reads ahead
        _, lo, hi = (int(x) for x in cache.spans[b])
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, b"%d %d\n" % (t // eviction.STRIDE, hi - lo))
        os.close(fd)
        real(cache, b, t)

    blockcache.BlockCache._start = start  # type: ignore[method-assign]
    try:
        probe = ShardStream(url, 32, cache_dir=tmp_path / "probe").pack
        need, data = probe.files.need, probe.files.block_bytes
        kw = {"num_workers": workers, "workers": "process"} if workers else {}
        loader = mixshard.loader(
            url, 32, pin_memory=False, order="block", cache_dir=tmp_path / "c",
            cache_limit=need // 2, **kw,
        )  # fmt: skip
        try:
            for _ in range(3):
                assert sum(len(b) for b in loader) == 256
        finally:
            loader.close()
    finally:
        blockcache.BlockCache._start = real  # type: ignore[method-assign]
    fetched = [0] * 4
    for line in log.read_text().splitlines():
        epoch, size = map(int, line.split())
        fetched[min(epoch, 3)] += size
    shares = [round(f / data, 2) for f in fetched[:3]]
    # the first epoch fetches every block once (with workers, a block a seam between their
    # parts falls in: twice); each later one at most 60% of the pack in one process (measured
    # 50-53%). Two workers each keep only blocks they read themselves, of which a random part
    # falls in their next epoch's part, through a cache of 8 blocks: 50-62% measured.
    most = 0.6 if not workers else 0.66
    assert 1.0 <= shares[0] <= (1.0 if not workers else 1.2) and max(shares[1:]) <= most, shares

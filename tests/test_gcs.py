"""`gs://` end to end against a GCS emulator on 127.0.0.1 (gcp-storage-emulator, through
gcsfs): the same code as `s3://` (`test_storepack.py`, `test_store_reading.py` cover it in
depth); these tests prove the Google side of fsspec meets it: pack, verify, inspect, the
exclusive marker, read through the cache, a changed object, a missing bucket."""

from __future__ import annotations

import pytest
import torch
from helpers import files, run, sourceless
from stores import pack_all_but_index

import mixshard
from mixshard import pack
from mixshard.core.errors import ShardError
from mixshard.core.stores import Store

ARGS = dict(size=8, shard_size=5, block_size=2, workers=1)


@pytest.fixture(autouse=True)
def staging(tmp_path, monkeypatch):
    from mixshard.writing.out import storeout

    monkeypatch.setenv(storeout.STAGING_ENV, str(tmp_path / "staging"))


@pytest.fixture
def reference(tree, tmp_path):
    out = tmp_path / "local"
    pack(tree, out, **ARGS)
    return out


@pytest.fixture
def url(tree, gcs_bucket):
    url = gcs_bucket + "/packs/p"
    pack(tree, url, **ARGS)
    return url


def test_a_pack_on_gcs_is_byte_identical_and_verifies(url, reference):
    store = Store(url)
    assert {n: sourceless(n, store.read(n)) for n in sorted(store.listing())} == files(reference)
    res = run("verify", url)
    assert res.exit_code == 0, res.output
    assert res.output.startswith("OK: 4 shards, 18 images")
    res = run("inspect", url)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[:2] == [
        f"pack:     {url} (mixshard format v1)",
        "images:   18 (8x8 RGB uint8, NCHW)",
    ]


def test_the_marker_is_an_exclusive_write_on_gcs(gcs_bucket):
    store = Store(gcs_bucket + "/m")
    assert store.create(".mixshard-lock", b"one") is True
    assert store.create(".mixshard-lock", b"two") is False
    assert store.read(".mixshard-lock") == b"one"


def test_the_loader_reads_gcs_as_the_local_pack(url, reference, tmp_path):
    kw = dict(pin_memory=False, order="block", infinite=False, seed=3)
    local = torch.cat(list(mixshard.loader(reference, 4, **kw)))
    probe = mixshard.ShardStream(url, 4, cache_dir=tmp_path / "probe").pack
    need = probe.files.need  # the blocks' pages on disk
    # a cache of half the blocks: blocks are dropped to make room, and the batches are the same
    remote = mixshard.loader(url, 4, cache_dir=tmp_path / "c", cache_limit=need // 2, **kw)
    assert torch.equal(torch.cat(list(remote)), local)
    cache = remote.stream.pack.files.cache
    assert cache.peak <= need // 2
    assert cache.fetched_bytes >= probe.files.block_bytes  # every block, once or more


def test_an_object_changed_on_gcs_is_refused(url, tmp_path):
    store = Store(url)
    shard = store.read("shard-000000.tar")
    at = 512 + 3  # a byte of the first block's images (after the member's tar header)
    store.write("shard-000000.tar", shard[:at] + bytes([shard[at] ^ 1]) + shard[at + 1 :])
    loader = mixshard.loader(url, 4, pin_memory=False, infinite=False, cache_dir=tmp_path / "c")
    with pytest.raises(ShardError, match=r"gs://.*/shard-000000\.tar: .*mixshard verify gs://"):
        list(loader)


def test_a_missing_gcs_bucket_is_one_line(tree, gcs_endpoint):
    res = run("pack", tree, "gs://no-such-bucket-zz/p", "--size", "8", "--workers", "1")
    assert res.exit_code == 1
    assert res.output == (
        "Error: gs://no-such-bucket-zz/p: the bucket gs://no-such-bucket-zz does not exist; "
        "create it first (for GCS: `gcloud storage buckets create gs://no-such-bucket-zz`) or "
        "check its name. Nothing was written\n"
    )


def test_resume_on_gcs_redoes_a_shard_rewritten_since_it_was_journaled(
    tree, reference, gcs_bucket, monkeypatch
):
    url = gcs_bucket + "/r"
    pack_all_but_index(tree, url, monkeypatch, **ARGS)
    store = Store(url)
    data = store.read("shard-000003.tar")  # the same size, other bytes: a new generation
    store.write("shard-000003.tar", data[:600] + bytes([data[600] ^ 1]) + data[601:])
    result = pack(tree, url, **ARGS, resume=True)
    assert result.written_shards == 1 and result.reused_shards == 3
    assert {n: sourceless(n, store.read(n)) for n in sorted(store.listing())} == files(reference)

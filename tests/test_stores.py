"""The object-store seam (core/stores.py) against moto's S3 server on 127.0.0.1."""

from __future__ import annotations

import pytest

from mixshard.core.errors import MixshardError, ShardError
from mixshard.core.stores import Store, check_location, is_store_url, url_scheme


def test_schemes_are_told_apart():
    assert url_scheme("S3://b/p") == "s3" and url_scheme("/data/p") is None
    assert url_scheme(3) is None
    assert is_store_url("s3://b/p") and is_store_url("gs://b/p")
    assert is_store_url("https://h/p") and not is_store_url("file:///p")
    assert not is_store_url("data/p") and not is_store_url("pipe:cat x.tar")


def test_an_unknown_scheme_is_an_error_not_a_folder_name():
    for fine in ["data/p", "s3://b/p", "gs://b/p", "http://h/x", "file:///tmp/x", "memory://x"]:
        check_location(fine)
    with pytest.raises(MixshardError) as err:
        check_location("xyz://bucket/pack")
    assert str(err.value) == (
        "xyz://bucket/pack: mixshard cannot read or write xyz:// URLs; give a local folder, a "
        "file:// URL, or a pack's URL such as s3://bucket/prefix, gs://bucket/prefix or "
        "https://host/prefix"
    )


def test_a_store_reads_writes_lists_and_removes(s3_bucket, tmp_path):
    store = Store(s3_bucket + "/packs/p/")
    assert store.url == s3_bucket + "/packs/p"
    assert store.listing() == {} and store.size("a.bin") is None
    local = tmp_path / "a.bin"
    local.write_bytes(bytes(range(256)) * 4)
    store.upload(local, "a.bin")
    store.write("b.json", b"{}")
    assert store.listing() == {"a.bin": 1024, "b.json": 2}
    assert store.size("a.bin") == 1024
    assert store.read("a.bin", 10, 14) == bytes([10, 11, 12, 13])
    assert store.read("b.json") == b"{}"
    store.remove("b.json")
    store.remove("never-there")
    assert store.listing() == {"a.bin": 1024}


def test_a_missing_object_or_bucket_is_one_line_naming_it(s3_bucket):
    with pytest.raises(ShardError) as err:
        Store(s3_bucket + "/p").read("shard-000000.tar", 0, 10)
    assert str(err.value) == (
        f"{s3_bucket}/p/shard-000000.tar does not exist: check the bucket and prefix (and that "
        "the pack was uploaded)"
    )
    with pytest.raises(ShardError, match="^s3://no-such-bucket-x/p/index.json does not exist"):
        Store("s3://no-such-bucket-x/p").read("index.json")


def test_the_manifest_of_a_store_pack_is_loaded_or_named_missing(s3_bucket, tree, tmp_path):
    from mixshard import pack
    from mixshard.core.errors import ManifestError
    from mixshard.core.manifest import Manifest
    from mixshard.core.stores import load_manifest

    store = Store(s3_bucket + "/p")
    with pytest.raises(ManifestError) as err:
        load_manifest(store)
    assert str(err.value) == (
        f"{s3_bucket}/p/index.json does not exist: no finished pack at {s3_bucket}/p (a pack "
        "being uploaded gets its index.json last); check the bucket and prefix"
    )
    pack(tree, tmp_path / "p", size=8, workers=1)
    store.upload(tmp_path / "p" / "index.json", "index.json")
    found = load_manifest(store)
    assert found == Manifest.load(tmp_path / "p")
    assert found.origin == f"{s3_bucket}/p/index.json"


def test_an_http_prefix_is_read_only_and_read_by_ranges(tmp_path):
    from helpers import serve_folder

    (tmp_path / "a.bin").write_bytes(bytes(range(256)) * 4)
    with serve_folder(tmp_path) as base:
        store = Store(base)
        assert store.size("a.bin") == 1024 and store.size("none.bin") is None
        assert store.read("a.bin", 10, 14) == bytes([10, 11, 12, 13])
        assert store.sizes(["a.bin", "none.bin"]) == {"a.bin": 1024}
        store.download("a.bin", tmp_path / "copy.bin")
        assert (tmp_path / "copy.bin").read_bytes() == (tmp_path / "a.bin").read_bytes()
        with pytest.raises(MixshardError) as err:
            store.write("b.json", b"{}")
        assert str(err.value) == (
            f"{base}: an http(s):// pack is read-only (and cannot be listed); write the pack to "
            "a folder or an object store (s3://, gs://) and serve that"
        )
        with pytest.raises(MixshardError, match=r"is read-only \(and cannot be listed\)"):
            store.listing()

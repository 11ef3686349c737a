"""`verify`, `inspect` and `preview` of a pack in an object store (moto's S3 server on
127.0.0.1), and the one-line errors of a store: missing bucket or object, denied, changed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run
from PIL import Image

from mixshard import Manifest, pack
from mixshard.cli.sheet import preview_grid
from mixshard.core.errors import ShardError
from mixshard.core.layout import block_span
from mixshard.core.stores import Store
from mixshard.reading.verifying import verify
from mixshard.writing.out import storeout

ARGS = dict(size=8, shard_size=5, block_size=2, workers=1)


@pytest.fixture
def packed(tree, tmp_path, s3_bucket, monkeypatch):
    """`(url, local)`: the same pack in the bucket and in a folder."""
    monkeypatch.setenv(storeout.STAGING_ENV, str(tmp_path / "staging"))
    url, local = s3_bucket + "/p", tmp_path / "local"
    pack(tree, url, **ARGS)
    pack(tree, local, **ARGS)
    return url, local


def test_verify_reads_every_shard_of_a_store_pack(packed):
    url, _ = packed
    res = run("verify", url, "-q")
    assert res.exit_code == 0
    assert res.output.startswith("OK: 4 shards, 18 images, ") and "match index.json" in res.output
    seen: list[int] = []
    report = verify(url, progress=seen.append)
    assert report.ok and sum(seen) == report.manifest.total_bytes


def test_verify_names_each_changed_or_missing_object_and_the_fix(packed):
    url, _ = packed
    store = Store(url)
    first = store.read("shard-000000.tar")
    store.write("shard-000000.tar", first[:-512])
    store.write("shard-000001.tar", first[:1000] + b"\0" + first[1001:])  # same size as 0
    store.remove("shard-000002.tar")
    store.write("shard-000009.tar", b"x")
    res = run("verify", url, "-q")
    assert res.exit_code == 1
    lines = res.output.splitlines()
    assert lines[:4] == [
        "BAD shard-000009.tar: extra: a shard file that index.json does not list",
        "BAD shard-000000.tar: truncated: 9728 bytes, index.json says 10240",
        "BAD shard-000001.tar: altered: sha256 differs from index.json",
        "BAD shard-000002.tar: missing",
    ]
    assert lines[4] == (
        f"Error: 4 bad shard file(s) in {url}; repack with `mixshard pack SRC {url} "
        "--overwrite` (or restore the files)"
    )


def test_inspect_reads_only_index_json(packed, monkeypatch):
    url, local = packed
    names: list[str] = []
    real = Store.read

    def read(self, name, start=None, end=None):
        names.append(name)
        return real(self, name, start, end)

    monkeypatch.setattr(Store, "read", read)
    res = run("inspect", url, "--json")
    assert res.exit_code == 0
    summary = json.loads(res.output)
    assert summary["path"] == url and summary["count"] == 18 and summary["shards"] == 4
    assert names == ["index.json"]
    expected = json.loads(run("inspect", local, "--json").output)
    assert {**expected, "path": url} == summary


def test_preview_fetches_only_the_blocks_it_shows_by_ranged_reads(packed, monkeypatch):
    url, local = packed
    reads: list[tuple] = []
    real = Store.read

    def read(self, name, start=None, end=None):
        reads.append((name, start, end))
        return real(self, name, start, end)

    monkeypatch.setattr(Store, "read", read)
    grid, n = preview_grid(url, 3, seed=1)
    assert n == 3
    assert reads[0] == ("index.json", None, None)
    ranged = reads[1:]
    m = Manifest.load(local)
    spans = {
        (sh.name, *block_span(b.offset, b.labels_offset, b.count, m.size))
        for sh in m.shards
        for b in sh.blocks
    }
    assert 1 <= len(ranged) <= 3 and set(ranged) <= spans  # whole blocks, not shards
    want, _ = preview_grid(local, 3, seed=1)
    assert np.array_equal(np.asarray(grid), np.asarray(want))


def test_the_preview_command_over_a_store(packed, tmp_path):
    url, local = packed
    out = tmp_path / "g.png"
    res = run("preview", url, "-o", out, "-n", "18")
    assert res.exit_code == 0 and res.output == f"Wrote {out}: 18 images from {url}\n"
    want, _ = preview_grid(local, 18)
    assert np.array_equal(np.asarray(Image.open(out)), np.asarray(want))


def test_preview_refuses_a_block_that_changed_as_the_block_cache_does(
    packed, tmp_path, monkeypatch
):
    url, local = packed
    store = Store(url)
    for name in store.listing():
        if name.startswith("shard-"):
            data = bytearray(store.read(name))
            data[700] ^= 0xFF  # inside the first block's images
            store.write(name, bytes(data))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(ShardError) as err:
        preview_grid(url, 18)
    b = Manifest.load(local).shards[0].blocks[0]  # packed as the store's
    start, end = block_span(b.offset, b.labels_offset, b.count, 8)
    assert str(err.value) == (
        f"{url}/shard-000000.tar: block 0 (bytes {start}-{end}) is not as its sha256 in "
        "index.json says; the pack changed after its index.json was read, or is damaged: run "
        f"`mixshard verify {url}` and open the pack again (repack it or restore the object if "
        "verify fails)"
    )
    assert not (tmp_path / "xdg").exists()  # a block shown is kept nowhere


def test_a_missing_object_in_preview_is_one_line(packed):
    url, _ = packed
    Store(url).remove("shard-000000.tar")
    res = run("preview", url, "-o", "never.png", "-n", "18")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {url}/shard-000000.tar does not exist: check the bucket and prefix (and that "
        "the pack was uploaded)\n"
    )


@pytest.mark.parametrize("command", [["verify"], ["inspect"], ["preview", "-o", "g.png"]])
def test_a_missing_bucket_or_pack_is_one_line_naming_it(s3_bucket, command):
    for url in ("s3://no-such-bucket-q/p", s3_bucket + "/nothing"):
        res = run(*command, url)
        assert res.exit_code == 1
        assert res.output == (
            f"Error: {url}/index.json does not exist: no finished pack at {url} (a pack being "
            "uploaded gets its index.json last); check the bucket and prefix\n"
        )


def test_denied_access_is_one_line_naming_the_credentials(packed, tree):
    from moto.core.authorization import enable_iam_authentication

    url, _ = packed
    with enable_iam_authentication():  # moto knows no such key: every request is refused
        for command in (["verify"], ["inspect"]):
            res = run(*command, url)
            assert res.exit_code == 1
            assert res.output == (
                f"Error: cannot read the manifest: access to {url}/index.json was denied: check "
                "the credentials (for S3, AWS_ACCESS_KEY_ID / AWS_PROFILE; for GCS, "
                "GOOGLE_APPLICATION_CREDENTIALS) and the bucket's permissions\n"
            )
        res = run("pack", tree, url + "2", "--size", "8")
        assert res.exit_code == 1 and res.output.count("\n") == 1
        assert res.output.startswith(f"Error: access to {url}2") and "was denied" in res.output

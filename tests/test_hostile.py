"""Hostile packs: damaged manifests, shard names outside the pack, FIFOs and folders where
files belong, shards changed under a running reader, a pack replaced between epochs.

Every case ends in a `MixshardError` naming the file (or the old bytes), never a crash, a
hang, or data the writer did not write.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from helpers import copy_pack, make_tree, ranged_reply, read_pack, run, serve, serve_folder

import mixshard
from mixshard import ManifestError, MixshardError, Overlay, ShardError, ShardStream
from mixshard.core import stores


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """30 images in 3 shards (12, 12, 6) of 4-image blocks."""
    root = tmp_path_factory.mktemp("hostile")
    make_tree(root / "src", classes=("a", "b", "c"), per_class=10)
    mixshard.pack(root / "src", root / "pack", size=8, shard_size=12, block_size=4, workers=1)
    return root / "pack"


def damaged(doc: dict, change) -> dict:
    doc = json.loads(json.dumps(doc))
    change(doc)
    return doc


def block(doc, s=0, b=0):
    return doc["shards"][s]["blocks"][b]


def shift(entry: dict, key: str, by: int) -> None:
    entry[key] += by


def copy(src: dict, dst: dict, key: str, to: str | None = None) -> None:
    dst[to or key] = src[key]


def all_blocks(doc):
    return [b for s in doc["shards"] for b in s["blocks"]]


def _set(path, value):
    def change(doc):
        where = doc
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value

    return change


# (id, change of the parsed manifest, words the error must contain)
VARIANTS = [
    ("offset-moved-in-tar-block", lambda d: shift(block(d), "offset", 64), "offset"),
    ("offset-overlaps-previous", lambda d: copy(block(d), block(d, 0, 1), "offset"), "offset"),
    ("offset-at-labels", lambda d: copy(block(d), block(d), "labels_offset", "offset"), "offset"),
    ("labels-offset-moved", lambda d: shift(block(d), "labels_offset", 512), "labels_offset"),
    ("negative-labels-offset", lambda d: block(d).update(labels_offset=-128), "labels_offset"),
    ("negative-count", lambda d: block(d).update(count=-4), "block count"),
    ("zero-count", lambda d: block(d).update(count=0), "block count"),
    ("all-zero-counts", lambda d: [b.update(count=0) for b in all_blocks(d)], "block count"),
    ("count-over-block-size", lambda d: d.update(block_size=2), "exceeds block_size"),
    ("size-83", _set(["size"], 83), "offset"),
    ("size-zero", _set(["size"], 0), "size"),
    ("size-huge", _set(["size"], 100_000), "size"),
    ("block-size-zero", _set(["block_size"], 0), "block_size"),
    ("offset-infinity", lambda d: block(d).update(offset=float("inf")), "offset"),
    ("offset-float", lambda d: block(d).update(offset=640.0), "offset"),
    ("offset-huge", lambda d: block(d).update(offset=10**30), "offset"),
    ("count-is-text", lambda d: block(d).update(count="4"), "block count"),
    ("count-is-bool", lambda d: d["shards"][0].update(count=True), "count"),
    ("shard-without-blocks", lambda d: d["shards"][0].update(blocks=[], count=0), "count"),
    ("no-shards", lambda d: d.update(shards=[], count=0), "count"),
    ("name-outside", lambda d: d["shards"][0].update(name="../../outside/x.tar"), "shard name"),
    ("name-absolute", lambda d: d["shards"][0].update(name="/etc/passwd"), "shard name"),
    ("name-in-subfolder", lambda d: d["shards"][0].update(name="sub/shard-00.tar"), "shard name"),
    ("name-twice", lambda d: d["shards"][1].update(name=d["shards"][0]["name"]), "listed twice"),
    ("bytes-not-tar-blocks", lambda d: shift(d["shards"][0], "bytes", 1), "tar blocks"),
    ("bytes-too-small", lambda d: d["shards"][0].update(bytes=1024), "run past"),
    ("sha-not-hex", lambda d: d["shards"][0].update(sha256="zz"), "sha256"),
    ("shard-count-wrong", lambda d: d["shards"][0].update(count=11), "add up"),
    ("total-count-wrong", _set(["count"], 31), "add up"),
    ("missing-field", lambda d: d.pop("block_size"), "'block_size' is missing"),
    ("missing-block-field", lambda d: block(d).pop("labels_offset"), "labels_offset"),
    ("classes-not-list", _set(["classes"], "abc"), "classes"),
    ("skipped-not-list", _set(["skipped"], {"a": 1}), "skipped"),
    ("channels-4", _set(["channels"], 4), "channels"),
    ("dtype-float", _set(["dtype"], "float32"), "dtype"),
    ("layout-nhwc", _set(["layout"], "NHWC"), "layout"),
    ("key-not-digits", lambda d: block(d).update(key="../x"), "block key"),
    ("blocks-not-list", lambda d: d["shards"][0].update(blocks="x"), "blocks"),
    ("block-not-object", lambda d: d["shards"][0]["blocks"].__setitem__(0, 7), "block entry must"),
    ("shard-blocks-empty", lambda d: d["shards"][0].update(blocks=[]), "000000.tar has no blocks"),
    ("shards-not-list", _set(["shards"], {"a": 1}), "shards must be a list"),
    ("shards-empty", _set(["shards"], []), "it lists no shards"),
    ("skipped-entry-not-text", _set(["skipped"], [{"path": 3}]), "a skipped entry must map names"),
]  # fmt: skip


def write_manifest(pack: Path, text: str | bytes) -> None:
    path = pack / "index.json"
    path.unlink()
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def every_reader(pack: Path) -> list[BaseException]:
    """What each reader raises on `pack` (None when it did not raise)."""
    outcomes: list[BaseException] = []
    for read in (
        lambda: mixshard.Manifest.load(pack),
        lambda: list(ShardStream(pack, 4, order="global")),
        lambda: list(ShardStream(pack, 4, order="block")),
        lambda: Overlay(pack, cache="device").sample(4),
        lambda: mixshard.verify(pack),
    ):
        try:
            read()
        except MixshardError as exc:
            outcomes.append(exc)
        else:
            raise AssertionError(f"a reader accepted a damaged manifest: {read}")
    return outcomes


@pytest.mark.parametrize(
    ("change", "words"), [v[1:] for v in VARIANTS], ids=[v[0] for v in VARIANTS]
)
def test_a_damaged_manifest_is_refused_by_every_reader(good, tmp_path, change, words):
    pack = copy_pack(good, tmp_path / "pack")
    write_manifest(pack, json.dumps(damaged(json.loads((good / "index.json").read_text()), change)))
    for exc in every_reader(pack):
        assert isinstance(exc, ManifestError), exc
        assert str(exc).startswith(f"{pack}/index.json is inconsistent ("), exc
        assert words in str(exc), exc
        assert str(exc).endswith("repack it with `mixshard pack SRC OUT --overwrite`")
    res = run("inspect", pack)
    assert res.exit_code == 1 and res.output.startswith(f"Error: {pack}/index.json is ")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b"", "is not valid JSON"),
        (b"\x00\xff\xfe garbage", "is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"format": "mixshard", "version": "1"}', "is shard format version '1'"),
        (b'{"format": "other"}', "is not a mixshard manifest"),
        (b"[1, 2, 3]", "is not a mixshard manifest"),
    ],
    ids=["empty", "binary", "deep", "version-text", "other-format", "a-list"],
)
def test_a_manifest_that_is_not_one_is_refused(good, tmp_path, text, words):
    pack = copy_pack(good, tmp_path / "pack")
    write_manifest(pack, text)
    for exc in every_reader(pack):
        assert isinstance(exc, ManifestError) and words in str(exc), exc


def test_names_outside_the_pack_never_reach_files_outside(good, tmp_path):
    outside = tmp_path / "outside"
    copy_pack(good, outside)  # a valid shard that must not be served through the name
    pack = copy_pack(good, tmp_path / "pack")
    doc = json.loads((good / "index.json").read_text())
    doc["shards"][0]["name"] = "../outside/shard-000000.tar"
    write_manifest(pack, json.dumps(doc))
    with pytest.raises(
        ManifestError, match="shard name is not valid: '../outside/shard-000000.tar'"
    ):
        ShardStream(pack, 4)
    res = run("verify", pack)
    assert res.exit_code == 1 and "shard name is not valid" in res.output


def test_a_symlinked_shard_is_allowed(good, tmp_path):
    pack = copy_pack(good, tmp_path / "pack")
    (tmp_path / "other-disk").mkdir()
    (pack / "shard-000001.tar").rename(tmp_path / "other-disk" / "shard-000001.tar")
    (pack / "shard-000001.tar").symlink_to(tmp_path / "other-disk" / "shard-000001.tar")
    assert len(list(ShardStream(pack, 5))) == 6
    assert run("verify", pack, "-q").exit_code == 0


FIFO_OR_FOLDER = """
    import sys
    import mixshard
    for pack in sys.argv[1:]:
        for read in (lambda: list(mixshard.ShardStream(pack, 5)), lambda: mixshard.verify(pack)):
            try:
                read()
            except mixshard.MixshardError as exc:
                print(type(exc).__name__, exc)
"""


def test_a_fifo_or_folder_where_a_file_belongs(good, tmp_path):
    packs = {}
    for what in ("index.json", "shard-000001.tar"):
        for kind in ("fifo", "folder"):
            pack = packs[what, kind] = copy_pack(good, tmp_path / f"{kind}-{what}")
            (pack / what).unlink()
            os.mkfifo(pack / what) if kind == "fifo" else (pack / what).mkdir()
    done = subprocess.run(  # a fresh interpreter: a hang fails the test instead of stalling it
        [sys.executable, "-c", textwrap.dedent(FIFO_OR_FOLDER), *map(str, packs.values())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    expected = []
    for (what, kind), pack in packs.items():
        found = "not a regular file" if kind == "fifo" else "a folder"
        if what == "index.json":
            message = (
                f"ManifestError cannot read {pack}/index.json: {found}; the pack is damaged: "
                "repack it with `mixshard pack SRC OUT --overwrite`"
            )
            expected += [message, message]
        else:  # verify reports the shard as bad instead of raising
            expected.append(
                f"ShardError shard {pack}/shard-000001.tar is {found}; run `mixshard verify "
                f"{pack}`, then repack or restore the file"
            )
            report = mixshard.verify(pack)
            assert report.problems == {"shard-000001.tar": f"cannot be read: {found}"}
    assert done.stdout.splitlines() == expected


@pytest.mark.parametrize("order", ["global", "block"])
def test_a_shard_removed_or_rewritten_before_its_first_read_is_named(good, tmp_path, order):
    pack = copy_pack(good, tmp_path / "pack")
    shard = pack / "shard-000001.tar"
    gone = ShardStream(pack, 4, order=order)
    data = shard.read_bytes()
    shard.unlink()
    with pytest.raises(ShardError) as err:
        list(gone)
    assert str(err.value) == (
        f"cannot open shard {shard}: No such file or directory; run `mixshard verify {pack}`, "
        "then repack or restore the file"
    )
    shard.write_bytes(data)
    rewritten = ShardStream(pack, 4, order=order)
    os.utime(shard, ns=(0, 0))  # the same bytes, another mtime: as a copy over it
    with pytest.raises(ShardError) as err:
        list(rewritten)
    assert str(err.value).startswith(
        f"shard {shard} changed after the pack was opened (a new pack written over it, or "
    )


CHANGE_UNDER_READER = """
    import os, shutil, sys
    import mixshard
    for pack in sys.argv[1:]:
        order, how = pack.rsplit("/", 1)[1].split("-")
        # a warm pack's block order is copied out of mappings; "feed": its blocks read ahead
        os.environ["MIXSHARD_MMAP"] = "0" if order == "feed" else "1"
        order = "block" if order == "feed" else order
        shard = pack + "/shard-000001.tar"
        data = open(shard, "rb").read()
        it = iter(mixshard.loader(pack, 5, num_workers=2, infinite=True, order=order, window=1))
        first = [next(it) for _ in range(3)]
        if how == "truncate":
            with open(shard, "r+b") as f:
                f.truncate(len(data) // 2)
        else:  # copy the same bytes over it, as `cp backup/shard-000001.tar pack/` does
            shutil.copyfile(pack + "/backup.tar", shard)
        try:
            for _ in range(60):
                next(it)
        except mixshard.ShardError as exc:
            print("ShardError", exc)
        else:
            print("old bytes")
"""


def test_a_shard_changed_under_a_running_reader(good, tmp_path):
    packs = []
    for order in ("global", "block", "feed"):
        for how in ("truncate", "copy"):
            pack = copy_pack(good, tmp_path / f"{order}-{how}")
            (pack / "backup.tar").write_bytes((pack / "shard-000001.tar").read_bytes())
            packs.append(pack)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHANGE_UNDER_READER), *map(str, packs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr)  # never a signal (SIGBUS)
    lines = done.stdout.splitlines()
    assert len(lines) == 6
    for pack, out in zip(packs, lines):
        if pack.name.endswith("truncate") or out != "old bytes":
            assert out.startswith(f"ShardError shard {pack}/shard-000001.tar "), out
            assert any(w in out for w in ("changed after the pack was opened", "ends early")), out


def test_spawned_workers_see_a_pack_replaced_between_epochs(tmp_path):
    make_tree(tmp_path / "src", classes=("a", "b"), per_class=6)
    pack = tmp_path / "pack"
    mixshard.pack(tmp_path / "src", pack, size=8, workers=1)
    stream = ShardStream(pack, 4)
    dl = torch.utils.data.DataLoader(
        stream, batch_size=None, num_workers=1, multiprocessing_context="spawn"
    )
    assert len(list(dl)) == 3
    mixshard.pack(tmp_path / "src", pack, size=8, workers=1, seed=5, overwrite=True)
    with pytest.raises(
        ShardError, match="changed after the pack was opened .a new pack written over it"
    ):
        list(dl)


def test_readers_are_told_when_a_pack_is_being_written(good, tmp_path):
    pack = tmp_path / "pack"
    from mixshard.writing.out.outlock import OutLock

    lock = OutLock(pack)
    try:
        with pytest.raises(ManifestError, match=r"no index.json in .*pack yet: a pack is being "):
            ShardStream(pack, 4)
    finally:
        lock.release()
    with pytest.raises(ManifestError, match="not a mixshard pack"):
        ShardStream(pack, 4)


def test_zero_samples_and_obs_that_need_grad(good):
    for cache in ("device", "pool", "stream"):
        ov = Overlay(good, cache=cache, num_workers=0, pool=8)
        assert ov(torch.zeros(0, 9, 8, 8)).shape == (0, 9, 8, 8)
        assert ov.sample(0).shape == (0, 3, 8, 8)
        ov.close()
    obs = (torch.rand(4, 9, 8, 8) * 255).requires_grad_()
    out = Overlay(good, cache="device", alpha=0.25)(obs)
    out.sum().backward()
    assert torch.equal(obs.grad, torch.full_like(obs, 0.75))
    images = read_pack(good)[0]
    assert images.shape == (30, 3, 8, 8)


# ------------------------------------------------------------------ a server that misbehaves


class Hostile(http.server.BaseHTTPRequestHandler):
    """Serves a good pack with byte ranges, behind paths that misbehave: `/endless/` (a body
    that never ends, after a size probe answered honestly), `/drip/` (one byte at a time),
    `/long/` (more bytes than the range asked for), `/norange/` (whole files only)."""

    pack: Path

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - the http.server API
        name = self.path.rsplit("/", 1)[1]
        data = (self.pack / name).read_bytes() if name.endswith((".json", ".tar")) else b""
        ranged = self.headers.get("Range") not in (None, "bytes=0-0")  # not the size probe
        if self.path.startswith("/norange/"):
            self._whole(data)
            return
        if not ranged and not self.path.startswith(("/endless/", "/drip/")):
            ranged_reply(self, data)
            return
        if not ranged and self.headers.get("Range"):  # the probe: an honest size
            ranged_reply(self, data)
            return
        self.send_response(206 if self.headers.get("Range") else 200)
        self.end_headers()
        try:
            if self.path.startswith("/endless/"):  # a body that never ends
                for _ in range(2000):  # bounded: 64 MB at most
                    self.wfile.write(b" " * 32768)
            elif self.path.startswith("/drip/"):  # one byte at a time
                for byte in data[:200]:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.05)
            elif self.path.startswith("/long/"):  # the range asked for, and as much again
                self.wfile.write(data + data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _whole(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def hostile_url(good, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the block cache's folder
    handler = type("Handler", (Hostile,), {"pack": good})
    with serve(handler) as base:
        yield base


def test_an_endless_manifest_is_cut_at_its_size(hostile_url, good):
    size = (good / "index.json").stat().st_size
    with pytest.raises(ManifestError) as err:
        ShardStream(f"{hostile_url}/endless", 4)
    assert str(err.value) == (
        f"cannot read the manifest: {hostile_url}/endless/index.json is longer than the "
        f"{size} bytes expected"
    )


def test_a_missing_remote_manifest_is_a_manifest_error(tmp_path):
    with serve_folder(tmp_path) as base, pytest.raises(ManifestError) as err:
        ShardStream(base, 4)
    assert str(err.value) == (
        f"{base}/index.json does not exist: no finished pack at "
        f"{base} (a pack being uploaded gets its index.json last); check the bucket and prefix"
    )


def test_a_range_answered_with_more_bytes_is_refused_before_reading_them(hostile_url):
    with pytest.raises(ShardError, match=rf"^{hostile_url}/long/shard-000000.tar is longer "):
        list(ShardStream(f"{hostile_url}/long", 4, shuffle=False))


def test_a_server_without_byte_ranges_is_refused_with_what_to_do(hostile_url):
    with pytest.raises(ShardError) as err:
        list(ShardStream(f"{hostile_url}/norange", 4, shuffle=False))
    assert str(err.value) == (
        f"{hostile_url}/norange/shard-000000.tar: the server does not answer byte ranges (HTTP "
        "Range requests), which reading a pack's blocks needs; serve the pack from one that "
        "does (nginx, Apache, S3 or GCS over https, most static hosts)"
    )


def test_a_dripping_server_is_timed_out(hostile_url, monkeypatch):
    monkeypatch.setattr(stores, "STORE_DEADLINE", 0.5)
    t0 = time.monotonic()
    with pytest.raises(ManifestError) as err:
        ShardStream(f"{hostile_url}/drip", 4)
    assert time.monotonic() - t0 < 5
    assert str(err.value) == (
        f"cannot read the manifest: {hostile_url}/drip/index.json did not answer within "
        "0.5 s: check the endpoint or network"
    )

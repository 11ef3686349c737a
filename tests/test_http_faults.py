"""A pack over HTTP against a server that fails the way real ones do.

A pack at an `http(s)://` URL is read like one on a store, by byte ranges into the block
cache. A chunked body cut short is the project's `ShardError`, never aiohttp's own error; a
5xx answer or a dropped connection is tried again with a bounded backoff
(`httpreads.HTTP_ATTEMPTS`, `httpreads.HTTP_BACKOFF`), then is the `ShardError`. Servers on
127.0.0.1 only.
"""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest
from helpers import ranged_reply, serve, small_pack

from mixshard import Manifest, ShardError, ShardStream
from mixshard.core import httpreads
from mixshard.core.errors import ManifestError

CUT = 700  # bytes of shard-000001.tar's first block sent before the connection closes


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    """24 images, 8 px, in 3 shards of 8 (blocks of 4)."""
    return small_pack(tmp_path_factory.mktemp("httpfaults"), 12, shard_size=8, block_size=4)


@pytest.fixture
def cache(tmp_path) -> dict:
    return {"cache_dir": tmp_path / "cache"}


class Faulty(http.server.BaseHTTPRequestHandler):
    """Serves `pack`'s files with byte ranges; `faults[name]` says how to fail a request for
    `name`: `"cut"` (a block's chunked body that ends early), `"503"` or `"reset"` (the first
    `fail_times` requests), `"always503"`, `"404"`. Counts the requests of each name."""

    pack: Path
    faults: dict[str, str]
    fail_times: int = 2
    seen: dict[str, int]
    lock = threading.Lock()
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - the http.server API
        name = self.path.rsplit("/", 1)[1]
        with self.lock:
            self.seen[name] = n = self.seen.get(name, 0) + 1
        fault = self.faults.get(name)
        if fault in ("always503", "404") or (fault == "503" and n <= self.fail_times):
            body = b"busy"
            self.send_response(404 if fault == "404" else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if fault == "reset" and n <= self.fail_times:
            self.close_connection = True  # no status line: the client sees the peer go away
            return
        data = (self.pack / name).read_bytes()
        if fault == "cut" and self.headers.get("Range", "bytes=0-0") != "bytes=0-0":
            self.send_response(206)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"%x\r\n" % CUT + data[:CUT] + b"\r\n")  # one whole chunk ...
            self.wfile.write(b"%x\r\n" % 4096 + data[CUT : CUT + 100])  # ... one cut short
            self.wfile.flush()
            self.close_connection = True
            return
        ranged_reply(self, data)


def faulty(pack: Path, **faults: str) -> type[Faulty]:
    return type("Handler", (Faulty,), {"pack": pack, "faults": faults, "seen": {}})


def rows(batches) -> list[bytes]:
    return [bytes(img.numpy()) for batch in batches for img in batch]


def shard_rows(pack: Path, skip: set[str]) -> list[bytes]:
    """The images of `pack`'s shards not in `skip`, in stored order."""
    local = list(ShardStream(pack, 4, shuffle=False, order="global"))
    manifest = Manifest.load(pack)
    out, first = [], 0
    every = rows(local)
    for shard in manifest.shards:
        if shard.name not in skip:
            out += every[first : first + shard.count]
        first += shard.count
    return out


def test_a_chunked_body_cut_short_is_a_shard_error(pack, cache):
    handler = faulty(pack, **{"shard-000001.tar": "cut"})
    with serve(handler) as base, pytest.raises(ShardError) as err:
        list(ShardStream(base, 4, shuffle=False, **cache))
    assert str(err.value) == (
        f"cannot read {base}/shard-000001.tar: the server's body ended early, after {CUT + 100} "
        "bytes (ClientPayloadError); check the server, then read again"
    )


@pytest.mark.parametrize("fault", ["503", "reset"])
def test_a_server_that_fails_twice_then_answers_gives_every_batch(pack, monkeypatch, fault, cache):
    monkeypatch.setattr(httpreads, "HTTP_BACKOFF", 0.05)
    names = ["index.json", "shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    handler = faulty(pack, **dict.fromkeys(names, fault))
    with serve(handler) as base:
        got = list(ShardStream(base, 4, shuffle=False, **cache))
    assert rows(got) == shard_rows(pack, set())
    # two failures, then the size; index.json: then its read; a shard: a read per run of blocks
    assert handler.seen["index.json"] == 4
    assert all(handler.seen[name] >= 4 for name in names[1:]), handler.seen


def test_a_server_that_always_answers_503_ends_in_bounded_time(pack, cache):
    """The documented bound: 4 attempts, 0.5 + 1 + 2 s of waiting, then one line."""
    assert (httpreads.HTTP_ATTEMPTS, httpreads.HTTP_BACKOFF) == (4, 0.5)
    handler = faulty(pack, **{"shard-000000.tar": "always503"})
    with serve(handler) as base:
        began = time.monotonic()
        with pytest.raises(ShardError) as err:
            list(ShardStream(base, 4, shuffle=False, **cache))
        took = time.monotonic() - began
    assert str(err.value) == (
        f"cannot read {base}/shard-000000.tar: HTTP 503 Service Unavailable (4 attempts in 3.5 s)"
    )
    assert handler.seen["shard-000000.tar"] == 4
    assert 3.5 <= took < 10, took


def test_a_manifest_behind_503(pack, monkeypatch, cache):
    monkeypatch.setattr(httpreads, "HTTP_BACKOFF", 0.01)
    handler = faulty(pack, **{"index.json": "always503"})
    with serve(handler) as base:
        with pytest.raises(ManifestError) as err:
            ShardStream(base, 4, **cache)
        assert str(err.value) == (
            f"cannot read the manifest: cannot read {base}/index.json: HTTP 503 Service "
            "Unavailable (4 attempts in 0.07 s)"
        )
    assert handler.seen == {"index.json": 4}


def test_a_client_error_is_not_tried_again(pack, cache):
    handler = faulty(pack, **{"shard-000000.tar": "404"})
    with serve(handler) as base, pytest.raises(ShardError) as err:
        list(ShardStream(base, 4, **cache))
    assert str(err.value) == f"shard {base}/shard-000000.tar is missing from the store; repack"
    assert handler.seen["shard-000000.tar"] == 1

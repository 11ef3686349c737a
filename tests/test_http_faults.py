"""Shard URLs against an HTTP server that fails the way real ones do (issue 40, points 7, 8).

A chunked body cut short is the project's `ShardError` (skipped with `on_error="skip"`), never
`http.client.IncompleteRead`; a 5xx answer or a connection reset is tried again with a bounded
backoff (`remote.HTTP_ATTEMPTS`, `remote.HTTP_BACKOFF`), then is the `ShardError`. Servers on
127.0.0.1 only.
"""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest
from helpers import serve, small_pack

from mixshard import Manifest, MixshardError, ShardError, ShardStream
from mixshard.core.errors import ManifestError
from mixshard.reading.urls import remote

CUT = 700  # bytes of shard-000001.tar sent before the connection closes (inside block 0)


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    """24 images, 8 px, in 3 shards of 8 (blocks of 4)."""
    return small_pack(tmp_path_factory.mktemp("httpfaults"), 12, shard_size=8, block_size=4)


class Faulty(http.server.BaseHTTPRequestHandler):
    """Serves `pack`'s files; `faults[name]` says how to fail a request for `name`:
    `"cut"` (a chunked body that ends early), `"503"` or `"reset"` (the first `fail_times`
    requests), `"always503"`, `"404"`. Counts the requests of each name."""

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
        self.send_response(200)
        if fault == "cut":
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"%x\r\n" % CUT + data[:CUT] + b"\r\n")  # one whole chunk ...
            self.wfile.write(b"%x\r\n" % 4096 + data[CUT : CUT + 100])  # ... one cut short
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


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


def test_a_chunked_body_cut_short_is_a_shard_error_and_skipped(pack):
    handler = faulty(pack, **{"shard-000001.tar": "cut"})
    with serve(handler) as base:
        url = f"{base}/shard-{{000000..000002}}.tar"
        with pytest.raises(ShardError) as err:
            list(ShardStream(url, 4, shuffle=False))
        assert str(err.value) == (
            f"cannot read {base}/shard-000001.tar: the server's body ended early, after "
            f"{CUT + 100} bytes (the connection closed inside it); check the server, then "
            "read again"
        )
        with pytest.warns(RuntimeWarning, match="skipping a bad shard: cannot read .*000001"):
            got = list(ShardStream(url, 4, shuffle=False, on_error="skip"))
    assert rows(got) == shard_rows(pack, {"shard-000001.tar"})  # the other two, whole


@pytest.mark.parametrize("fault", ["503", "reset"])
def test_a_server_that_fails_twice_then_answers_gives_every_batch(pack, monkeypatch, fault):
    monkeypatch.setattr(remote, "HTTP_BACKOFF", 0.05)
    names = ["index.json", "shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    handler = faulty(pack, **dict.fromkeys(names, fault))
    with serve(handler) as base:
        got = list(ShardStream(f"{base}/shard-{{000000..000002}}.tar", 4, shuffle=False))
    assert rows(got) == shard_rows(pack, set())
    assert handler.seen == dict.fromkeys(names, 3)  # two failures, then the answer


def test_a_server_that_always_answers_503_ends_in_bounded_time(pack):
    """The documented bound: 4 attempts, 0.5 + 1 + 2 s of waiting, then one line."""
    assert (remote.HTTP_ATTEMPTS, remote.HTTP_BACKOFF) == (4, 0.5)
    handler = faulty(pack, **{"shard-000000.tar": "always503"})
    with serve(handler) as base:
        url = f"{base}/shard-{{000000..000002}}.tar"
        stream = ShardStream(url, 4, shuffle=False)
        began = time.monotonic()
        with pytest.raises(ShardError) as err:
            list(stream)
        took = time.monotonic() - began
    assert str(err.value) == (
        f"cannot read {base}/shard-000000.tar: HTTP 503 Service Unavailable (4 attempts in 3.5 s)"
    )
    assert handler.seen["shard-000000.tar"] == 4
    assert 3.5 <= took < 10, took


def test_a_manifest_behind_503_and_a_pack_of_only_bad_shards(pack, monkeypatch):
    monkeypatch.setattr(remote, "HTTP_BACKOFF", 0.01)
    handler = faulty(pack, **{"index.json": "always503"})
    with serve(handler) as base:
        with pytest.raises(ManifestError) as err:
            ShardStream(f"{base}/shard-000000.tar", 4)
        assert str(err.value) == (
            f"cannot read the manifest: cannot read {base}/index.json: HTTP 503 Service "
            "Unavailable (4 attempts in 0.07 s)"
        )
    shards = [f"shard-00000{i}.tar" for i in range(3)]
    handler = faulty(pack, **dict.fromkeys(shards, "always503"))
    with serve(handler) as base:
        stream = ShardStream(f"{base}/shard-{{000000..000002}}.tar", 4, on_error="skip")
        with pytest.warns(RuntimeWarning), pytest.raises(MixshardError, match="every shard read"):
            list(stream)
    assert handler.seen == {"index.json": 1, **dict.fromkeys(shards, 4)}


def test_a_client_error_is_not_tried_again(pack):
    handler = faulty(pack, **{"shard-000000.tar": "404"})
    with serve(handler) as base, pytest.raises(ShardError) as err:
        list(ShardStream(f"{base}/shard-000000.tar", 4))
    assert str(err.value) == f"cannot read {base}/shard-000000.tar: HTTP 404 Not Found"
    assert handler.seen["shard-000000.tar"] == 1

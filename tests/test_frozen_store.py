"""A store that stops answering (issue 40, point 4): every store call has a wall-clock deadline.

moto's S3 server runs here in a process of its own on 127.0.0.1, so a test can freeze it with
SIGSTOP (its socket still accepts connections, nothing answers: a hung server or a dead link)
and see the packer's upload and heartbeat threads and the reader's fetch threads end in a
`ShardError` naming the object once the deadline (`stores.STORE_DEADLINE`, shortened here)
has passed. The server is always woken and killed afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from helpers import free_port, make_tree
from stores import S3_ENV, environment, new_bucket

import mixshard
from mixshard import ShardError, ShardStream
from mixshard.core import stores
from mixshard.core.stores import Store
from mixshard.writing.out import storeout

pytest.importorskip("s3fs", reason="the s3 extra is not installed (pip install 'mixshard[s3]')")
pytest.importorskip("moto.server", reason="moto[server] is not installed")

DEADLINE = 4.0  # seconds a store call may take here (60 by default; a busy CI machine) ...
FROZEN = 1.5  # ... and once the server is frozen (calls made from then on)
ARGS = dict(size=8, shard_size=6, block_size=2, workers=1)


class Server:
    """moto's S3 server in a child process: `freeze` stops it (SIGSTOP), `thaw` wakes it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.frozen = False
        limit = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > limit:
                    self.stop()
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.frozen = True
        stores.STORE_DEADLINE = FROZEN  # put back by the fixture's monkeypatch

    def thaw(self) -> None:
        if self.frozen:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.frozen = False

    def stop(self) -> None:
        self.thaw()
        self.proc.kill()
        self.proc.wait(timeout=30)


def _fresh_filesystems() -> None:
    """s3fs keeps one file system per set of options, whatever endpoint the environment
    names: dropped so that this module's server (and then the session's) is the one used."""
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()


@pytest.fixture
def server(monkeypatch, tmp_path) -> Iterator[Server]:
    """A fresh server in its own process, set as the AWS endpoint; a short deadline."""
    monkeypatch.setattr(stores, "STORE_DEADLINE", DEADLINE)
    monkeypatch.setenv(storeout.STAGING_ENV, str(tmp_path / "staging"))
    srv = Server()
    try:
        with environment({**S3_ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{srv.port}"}):
            _fresh_filesystems()
            try:
                yield srv
            finally:
                _fresh_filesystems()
    finally:
        srv.stop()


def mixshard_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("mixshard-"))


def test_a_pack_into_a_store_that_freezes_mid_upload_ends_in_a_shard_error(
    server, tree, monkeypatch
):
    url = new_bucket("s3") + "/p"
    monkeypatch.setattr(storeout, "HEARTBEAT", 0.5)  # the marker's thread meets the freeze too
    real = Store.upload
    began: list[float] = []

    def upload(self, local, name):
        if name == "shard-000001.tar":  # the first shard is in, the second never answers
            server.freeze()
            began.append(time.monotonic())
        real(self, local, name)

    monkeypatch.setattr(Store, "upload", upload)
    with pytest.raises(ShardError) as err:
        mixshard.pack(tree, url, **ARGS)
    took = time.monotonic() - began[0]
    assert str(err.value) == (
        f"{url}/shard-000001.tar did not answer within 1.5 s: check the endpoint or network"
    )
    # the upload's deadline, then the marker's: its last beat and removal (errors swallowed)
    assert FROZEN - 0.2 < took < DEADLINE + 2 * FROZEN + 5, took
    assert "mixshard-upload" not in mixshard_threads()
    assert "mixshard-marker" not in mixshard_threads()


def test_a_reader_of_a_store_that_freezes_ends_in_a_shard_error(server, tmp_path):
    url = new_bucket("s3") + "/p"
    make_tree(tmp_path / "src", classes=("a", "b"), per_class=16)
    mixshard.pack(tmp_path / "src", url, size=8, shard_size=8, block_size=4, workers=1)
    need = ShardStream(url, 4, cache_dir=tmp_path / "probe").pack.files.need
    # half the pack: blocks are fetched again all along
    stream = ShardStream(url, 4, order="block", cache_dir=tmp_path / "c", cache_limit=need // 2)
    assert len(list(stream)) == 8  # epoch 0; half of its blocks stay in the cache
    cache = stream.pack.files.cache
    limit = time.monotonic() + 30
    while cache._inflight and time.monotonic() < limit:  # fetches ahead for epoch 1 end
        time.sleep(0.05)
    server.freeze()
    stream.set_epoch(1)
    began = time.monotonic()
    with pytest.raises(ShardError) as err:
        list(stream)  # needs the other half again
    took = time.monotonic() - began
    text = str(err.value)
    # the call's own deadline or the cache's wait for its fetch (the same deadline, started
    # a moment before the call): whichever ends first names the object and the fix
    stalled = " stalled: bytes " in text and text.endswith(
        " did not arrive at 256 KiB/s or more; check the endpoint or network (a store that "
        "stalls is not retried)"
    )
    silent = text.endswith(" did not answer within 1.5 s: check the endpoint or network")
    assert text.startswith(f"{url}/shard-00000") and (stalled or silent), text
    assert FROZEN - 0.2 < took < 2 * FROZEN + 5, took


def test_a_synchronous_protocol_that_blocks_is_ended_by_the_deadline(monkeypatch):
    """A file system without fsspec's loop (a stand-in here) runs on a thread, given up on
    at the deadline."""
    pytest.importorskip("fsspec")
    monkeypatch.setattr(stores, "STORE_DEADLINE", 0.5)
    store = Store("memory://bucket-frozen/p")
    release = threading.Event()

    class Blocking:
        def invalidate_cache(self, path=None):
            pass

        def cat_file(self, path, start=None, end=None):
            release.wait(30)
            return b""

    store.fs = Blocking()
    began = time.monotonic()
    try:
        with pytest.raises(ShardError) as err:
            store.read("index.json")
        took = time.monotonic() - began
    finally:
        release.set()
    assert str(err.value) == (
        "memory://bucket-frozen/p/index.json did not answer within 0.5 s: check the endpoint "
        "or network"
    )
    assert 0.4 < took < 5, took

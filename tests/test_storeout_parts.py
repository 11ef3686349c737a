"""The parts of writing/out/storeout.py a whole pack into moto's S3 rarely reaches: the marker's
heartbeat and the markers it ignores, the uploader stopped mid-way, the staging folder's
default, errors of the packer passed through, a Ray task's own upload. On fsspec's in-memory
file system (`memory://`): no server."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from mixshard.core.errors import OutputError, WriteError
from mixshard.core.stores import Store
from mixshard.writing.out import storeout
from mixshard.writing.out.shardwrite import DoneShard

pytest.importorskip("fsspec", reason="the s3 extra is not installed (pip install 'mixshard[s3]')")

LOCK = ".mixshard-lock"


def memory_url() -> str:
    return f"memory://bucket-{uuid.uuid4().hex[:12]}/p"


def marker_of(pid: int, host: str, beat: object) -> bytes:
    holder = {"token": "t", "pid": pid, "host": host, "started": "2026-12-01 10:00:00"}
    return json.dumps({**holder, "command": "mixshard pack a b", "beat": beat}).encode()


def wait_for(done, seconds: float = 20.0) -> None:
    end = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < end, "gave up waiting"
        time.sleep(0.005)


def test_staging_defaults_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(storeout.STAGING_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert storeout.staging_root() == tmp_path / "xdg" / "mixshard" / "staging"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert storeout.staging_root() == tmp_path / "home" / ".cache" / "mixshard" / "staging"
    monkeypatch.setenv(storeout.STAGING_ENV, str(tmp_path / "mine"))
    assert storeout.staging_root() == tmp_path / "mine"


@pytest.mark.parametrize("found", [b"not json {", b"[1, 2]", marker_of(1, "elsewhere", "soon")])
def test_a_marker_unreadable_or_without_a_heartbeat_is_taken_over(found):
    store = Store(memory_url())
    store.write(LOCK, found)
    marker = storeout.Marker(store, None)
    marker.take(list(store.listing()))
    try:
        assert json.loads(store.read(LOCK))["token"] == marker.holder["token"]
    finally:
        marker.release()
    assert store.listing() == {}


def test_a_part_runs_beside_another_part_but_not_beside_a_whole_pack():
    store = Store(memory_url())
    live = marker_of(1, "elsewhere", time.time())
    store.write(LOCK + ".part-1-of-2", live)
    part = storeout.Marker(store, (0, 2))
    part.take(list(store.listing()))
    assert sorted(store.listing()) == [LOCK + ".part-0-of-2", LOCK + ".part-1-of-2"]
    part.release()
    whole = storeout.Marker(store, None)
    with pytest.raises(OutputError) as err:
        whole.take(list(store.listing()))
    assert str(err.value).startswith(
        f"{store.url} is in use by another mixshard pack (pid 1 on elsewhere since "
        "2026-12-01 10:00:00 (mixshard pack a b)); wait for it to finish or stop it"
    )
    assert sorted(store.listing()) == [LOCK + ".part-1-of-2"]


def test_the_marker_is_rewritten_until_released(monkeypatch):
    monkeypatch.setattr(storeout, "HEARTBEAT", 0.01)
    store = Store(memory_url())
    marker = storeout.Marker(store, None)
    marker.take([])
    first = json.loads(store.read(LOCK))
    wait_for(lambda: json.loads(store.read(LOCK))["beat"] > first["beat"])
    later = json.loads(store.read(LOCK))
    assert {k: v for k, v in later.items() if k != "beat"} == marker.holder
    marker.release()
    assert store.listing() == {}
    marker.release()  # twice: nothing more happens


def test_releasing_a_marker_never_taken_touches_nothing():
    store = Store(memory_url())
    theirs = marker_of(1, "elsewhere", time.time())
    store.write(LOCK, theirs)
    storeout.Marker(store, None).release()
    assert store.read(LOCK) == theirs


def test_a_stopped_uploader_drops_what_is_queued_and_waits_for_the_upload_under_way():
    store = Store(memory_url())
    recorded, going, release = [], threading.Event(), threading.Event()

    def record(shard: DoneShard) -> None:
        going.set()
        release.wait()
        recorded.append(shard.index)

    uploader = storeout.Uploader(store, Path("."), record)
    uploader.submit(DoneShard(0, None))
    going.wait()
    uploader.submit(DoneShard(1, None))  # queued behind the one under way
    stopper = threading.Thread(target=uploader.stop)
    stopper.start()
    wait_for(lambda: uploader.cancelled)
    release.set()
    stopper.join()
    assert recorded == [0] and not uploader.thread.alive
    uploader.stop()  # a stopped one: nothing to wait for
    assert recorded == [0]


def test_a_write_error_of_the_packer_keeps_its_staging_file_name(monkeypatch, tmp_path):
    monkeypatch.setenv(storeout.STAGING_ENV, str(tmp_path / "staging"))
    out = storeout.StoreOut(memory_url(), None)

    def fails(error: type[OutputError]):
        def work():
            raise error(f"{out.staging}/shard-000000.tar: no space left {storeout.KEPT}")

        return work

    with pytest.raises(WriteError) as err:
        out.run(fails(WriteError), resume=False, overwrite=False, finish=False)
    assert str(err.value) == f"{out.staging}/shard-000000.tar: no space left {storeout.KEPT}"
    with pytest.raises(OutputError) as err:
        out.run(fails(OutputError), resume=False, overwrite=False, finish=False)
    assert str(err.value) == f"{out.url}/shard-000000.tar: no space left {storeout.DELETED}"
    assert out.store.listing() == {} and not out.staging.exists()


def test_a_ray_task_uploads_its_shard_and_leaves_no_staging(monkeypatch, tmp_path):
    monkeypatch.setenv(storeout.STAGING_ENV, str(tmp_path / "staging"))
    url, seen = memory_url(), []

    def write(folder: Path) -> DoneShard:
        seen.append(folder)
        (folder / "shard-000003.tar").write_bytes(b"tar bytes")
        return DoneShard(3, SimpleNamespace(name="shard-000003.tar"))  # type: ignore[arg-type]

    shard = storeout.staged_upload(url, write)
    assert shard.index == 3 and Store(url).read("shard-000003.tar") == b"tar bytes"
    assert seen[0].parent == tmp_path / "staging" and seen[0].name.startswith("ray-")
    assert os.listdir(tmp_path / "staging") == []
    assert storeout.staged_upload(url, lambda folder: DoneShard(4, None)).info is None
    assert sorted(Store(url).listing()) == ["shard-000003.tar"]

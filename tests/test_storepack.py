"""`pack` into an object store (writing/out/storeout.py), against moto's S3 server on 127.0.0.1: the
same bytes as a local pack, `index.json` last, resume, overwrite, the marker lock and the
errors."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from helpers import files, run, sourceless
from stores import pack_all_but_index

from mixshard import Manifest, ShardStream, pack
from mixshard.core.errors import OutputError, ShardError
from mixshard.core.stores import Store
from mixshard.writing.out import storeout

ARGS = dict(size=8, shard_size=5, block_size=2, workers=1)
CLI_ARGS = ["--size", "8", "--shard-size", "5", "--block-size", "2", "--workers", "1"]


@pytest.fixture(autouse=True)
def staging(tmp_path, monkeypatch):
    """Staging under the test's folder, never the user's cache."""
    folder = tmp_path / "staging"
    monkeypatch.setenv(storeout.STAGING_ENV, str(folder))
    return folder


@pytest.fixture
def reference(tree, tmp_path):
    out = tmp_path / "local"
    pack(tree, out, **ARGS)
    return out


def objects(url: str) -> dict[str, bytes]:
    store = Store(url)
    return {name: sourceless(name, store.read(name)) for name in sorted(store.listing())}


def test_a_pack_in_the_bucket_is_byte_identical_to_the_local_pack(tree, reference, s3_bucket):
    url = s3_bucket + "/packs/p"
    seen = []
    result = pack(tree, url, **ARGS, progress=seen.append)
    assert objects(url) == files(reference)  # index.json and 4 shards, nothing else
    assert len(Manifest.load(reference).shards) == 4
    assert result.out == url and result.written_shards == 4
    assert result.manifest == Manifest.load(reference)
    assert seen[-1].uploaded == seen[-1].total == 18 and seen[-1].done == 18
    assert [p.uploaded for p in seen if p.uploaded] == sorted(
        p.uploaded for p in seen if p.uploaded
    )


def test_the_cli_packs_into_a_bucket_and_says_where(tree, reference, s3_bucket, staging):
    url = s3_bucket + "/p"
    res = run("pack", tree, url, *CLI_ARGS)
    assert res.exit_code == 0, res.output
    assert res.output.endswith(f": {url}; 3 classes (cat, dog, eel)\n")
    assert objects(url) == files(reference)
    assert not staging.exists() or not any(staging.iterdir())  # staging is emptied


def test_index_json_goes_up_last_and_staging_holds_few_shards(tree, s3_bucket, monkeypatch):
    url = s3_bucket + "/p"
    order, staged = [], []
    real = Store.upload

    def upload(self, local, name):
        staged.append(sum(1 for p in local.parent.iterdir() if p.name.startswith("shard-")))
        order.append(name)
        real(self, local, name)

    monkeypatch.setattr(Store, "upload", upload)
    pack(tree, url, **ARGS)
    shards = [n for n in order if n.startswith("shard-")]
    assert shards == [f"shard-00000{i}.tar" for i in range(4)]
    assert order[-1] == "index.json" and order.count("index.json") == 1
    assert order.index("index.json") > order.index("shard-000003.tar")
    assert max(staged) <= storeout.IN_FLIGHT + 2


def test_resume_after_a_failed_upload_uploads_no_shard_twice(
    tree, reference, s3_bucket, monkeypatch
):
    url = s3_bucket + "/p"
    uploads: list[str] = []
    failed: list[str] = []
    real = Store.upload

    def failing(self, local, name):
        if name == "shard-000002.tar" and not failed:
            failed.append(name)
            raise ShardError(f"cannot reach {self.object_url(name)}: injected")
        uploads.append(name)
        real(self, local, name)

    monkeypatch.setattr(Store, "upload", failing)
    with pytest.raises(ShardError, match="injected"):
        pack(tree, url, **ARGS)
    assert "index.json" not in Store(url).listing()  # no half pack for a reader
    first = [n for n in uploads if n.startswith("shard-")]
    assert first == ["shard-000000.tar", "shard-000001.tar"]
    with pytest.raises(OutputError, match="is not empty; pass resume=True"):
        pack(tree, url, **ARGS)
    uploads.clear()
    result = pack(tree, url, **ARGS, resume=True)
    assert [n for n in uploads if n.startswith("shard-")] == [
        "shard-000002.tar",
        "shard-000003.tar",
    ]
    assert result.reused_shards == 2 and result.written_shards == 2
    assert objects(url) == files(reference)
    again = pack(tree, url, **ARGS, resume=True)
    assert again.already_complete


def test_resume_redoes_a_shard_whose_object_is_not_the_journals(
    tree, reference, s3_bucket, monkeypatch
):
    url = s3_bucket + "/p"
    pack_all_but_index(tree, url, monkeypatch, **ARGS)
    store = Store(url)
    shards = {f"shard-00000{i}.tar" for i in range(4)}
    journals = {f".mixshard-pack.00000{i}.jsonl" for i in range(4)}
    assert set(store.listing()) == journals | shards
    store.write("shard-000001.tar", store.read("shard-000001.tar")[:100])  # changed: cut short
    data = store.read("shard-000002.tar")  # and rewritten, the same size, other bytes
    store.write("shard-000002.tar", data[:600] + bytes([data[600] ^ 1]) + data[601:])
    result = pack(tree, url, **ARGS, resume=True)
    assert result.written_shards == 2 and result.reused_shards == 2  # only the changed ones
    assert objects(url) == files(reference)


def test_resume_reads_back_each_shard_it_reuses_and_redoes_one_not_as_journaled(
    tree, reference, s3_bucket, monkeypatch
):
    url = s3_bucket + "/p"
    pack_all_but_index(tree, url, monkeypatch, **ARGS)
    store = Store(url)
    journal = ".mixshard-pack.000001.jsonl"  # shard 1's record: another sha256
    head, line = store.read(journal).decode().splitlines()
    doc = json.loads(line)
    doc["info"]["sha256"] = "0" * 64
    store.write(journal, f"{head}\n{json.dumps(doc)}\n".encode())
    hashed: list[str] = []
    real = Store.sha256
    monkeypatch.setattr(Store, "sha256", lambda self, name: hashed.append(name) or real(self, name))
    result = pack(tree, url, **ARGS, resume=True)
    assert sorted(hashed) == [f"shard-00000{i}.tar" for i in range(4)]  # each read back once
    assert result.written_shards == 1 and result.reused_shards == 3
    assert objects(url) == files(reference)


def test_overwrite_replaces_a_pack_and_index_json_goes_first(tree, s3_bucket, tmp_path):
    url = s3_bucket + "/p"
    pack(tree, url, **ARGS)
    with pytest.raises(OutputError, match=f"^{url} is not empty; pass resume=True"):
        pack(tree, url, **{**ARGS, "size": 6})
    pack(tree, url, **{**ARGS, "size": 6}, overwrite=True)
    local = tmp_path / "six"
    pack(tree, local, **{**ARGS, "size": 6})
    assert objects(url) == files(local)


def test_a_prefix_of_other_objects_is_never_written(tree, s3_bucket):
    url = s3_bucket + "/p"
    Store(url).write("notes.txt", b"mine")
    with pytest.raises(OutputError) as err:
        pack(tree, url, **ARGS, overwrite=True)
    assert str(err.value) == (
        f"{url} holds objects mixshard did not write (notes.txt); nothing was written. Choose "
        "an empty or new prefix"
    )
    assert objects(url) == {"notes.txt": b"mine"}


def _marker(pid: int, host: str, beat: float) -> bytes:
    holder = {"token": "t", "pid": pid, "host": host, "started": "2026-12-01 10:00:00"}
    return json.dumps({**holder, "command": "mixshard pack a b", "beat": beat}).encode()


def test_a_second_pack_into_the_prefix_is_refused_while_one_runs(tree, s3_bucket):
    url = s3_bucket + "/p"
    Store(url).write(".mixshard-lock", _marker(os.getpid(), socket.gethostname(), time.time()))
    res = run("pack", tree, url, *CLI_ARGS)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {url} is in use by another mixshard pack (pid {os.getpid()} on "
        f"{socket.gethostname()} since 2026-12-01 10:00:00 (mixshard pack a b)); wait for it "
        "to finish or stop it, then run this again (the marker .mixshard-lock of a run that "
        "died is taken over after 180 s)\n"
    )
    assert set(Store(url).listing()) == {".mixshard-lock"}


def test_the_marker_of_a_run_that_died_is_taken_over(tree, reference, s3_bucket):
    url = s3_bucket + "/p"
    gone = _marker(2**22 + 12345, socket.gethostname(), time.time())  # no such pid here
    Store(url).write(".mixshard-lock", gone)
    pack(tree, url, **ARGS, resume=True)
    assert objects(url) == files(reference)  # and the marker is gone
    other = s3_bucket + "/q"
    Store(other).write(".mixshard-lock", _marker(1, "elsewhere", time.time() - 3600))
    pack(tree, other, **ARGS, resume=True)
    assert objects(other) == files(reference)


def test_a_live_marker_on_another_host_is_respected(tree, s3_bucket):
    url = s3_bucket + "/p"
    Store(url).write(".mixshard-lock", _marker(1, "elsewhere", time.time()))
    with pytest.raises(OutputError, match="is in use by another mixshard pack"):
        pack(tree, url, **ARGS)


def test_job_array_parts_upload_and_finish(tree, reference, s3_bucket):
    url = s3_bucket + "/p"
    for k in range(2):
        result = pack(tree, url, **ARGS, part=(k, 2))
        assert result.manifest is None and result.written_shards == 2
    assert "index.json" not in Store(url).listing()
    result = pack(tree, url, **ARGS, finish=True)
    assert result.manifest == Manifest.load(reference)
    assert objects(url) == files(reference)


def test_finish_before_every_part_ran_names_the_missing_part(tree, s3_bucket):
    url = s3_bucket + "/p"
    pack(tree, url, **ARGS, part=(0, 2))
    with pytest.raises(OutputError) as err:
        pack(tree, url, **ARGS, finish=True)
    assert str(err.value) == (
        f"{url}: 2 of 4 planned shards are not written yet from part(s) 1/2 (shard-000001.tar, "
        "shard-000003.tar); run the missing job-array parts, then finish again"
    )


def test_a_missing_bucket_is_one_line_saying_to_create_it(tree, s3_endpoint):
    res = run("pack", tree, "s3://no-such-bucket-zz/p", *CLI_ARGS)
    assert res.exit_code == 1
    assert res.output == (
        "Error: s3://no-such-bucket-zz/p: the bucket s3://no-such-bucket-zz does not exist; "
        "create it first (for S3: `aws s3 mb s3://no-such-bucket-zz`) or check its name. "
        "Nothing was written\n"
    )


def test_an_unknown_scheme_is_refused_and_writes_no_folder(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run("pack", tree, "xyz://packs/p365", *CLI_ARGS)
    assert res.exit_code == 1
    assert res.output.startswith("Error: xyz://packs/p365: mixshard cannot read or write xyz://")
    assert not (tmp_path / "xyz:").exists()
    for command in (["verify"], ["inspect"], ["preview", "-o", "g.png"]):
        res = run(*command, "xyz://packs/p365")
        assert res.exit_code == 1, command
        assert res.output.startswith("Error: xyz://packs/p365: mixshard cannot read or write")
    with pytest.raises(Exception, match="cannot read or write xyz://"):
        pack(tree, "xyz://packs/p365", **ARGS)


def test_a_missing_extra_names_what_to_install(tree, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_fsspec(name, *args, **kwargs):
        if name.startswith("fsspec"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fsspec)
    res = run("pack", tree, "s3://b/p", *CLI_ARGS)
    assert res.output == (
        "Error: s3://b/p: reading object stores needs fsspec: pip install 'mixshard[s3]'\n"
    )


def test_ray_tasks_upload_their_own_shards(tree, reference, s3_bucket, staging, local_ray):
    url = s3_bucket + "/ray"
    result = pack(tree, url, **ARGS, ray="local")
    assert result.written_shards == 4
    assert objects(url) == files(reference)


_SLOW_CLI = """
import sys, time
from mixshard.core import stores
real = stores.Store.upload
def slow(self, local, name):
    if name.startswith("shard-"):
        time.sleep(1.0)  # the kill comes while a shard is on its way
    real(self, local, name)
stores.Store.upload = slow
from mixshard.cli import main
sys.argv = ["mixshard", *sys.argv[1:]]
main()
"""


def test_resume_after_the_cli_is_killed_mid_upload(tree, reference, s3_bucket, monkeypatch):
    import signal
    import subprocess
    import sys

    url = s3_bucket + "/killed"
    args = [str(tree), url, *CLI_ARGS, "-q"]
    child = subprocess.Popen([sys.executable, "-c", _SLOW_CLI, "pack", *args])
    store, journaled = Store(url), []
    try:
        deadline = time.monotonic() + 120
        while len(journaled) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            journaled = [n for n in store.listing() if n.startswith(".mixshard-pack")]
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    assert journaled == [".mixshard-pack.000000.jsonl", ".mixshard-pack.000001.jsonl"]
    assert "index.json" not in store.listing()
    assert ".mixshard-lock" in store.listing()  # left by the killed run, taken over below
    uploads: list[str] = []
    real = Store.upload

    def counting(self, local, name):
        uploads.append(name)
        real(self, local, name)

    monkeypatch.setattr(Store, "upload", counting)
    res = run("pack", *args, "--resume")
    assert res.exit_code == 0, res.output
    shards = [n for n in uploads if n.startswith("shard-")]
    assert shards == ["shard-000002.tar", "shard-000003.tar"]
    assert "2 reused from earlier runs" in res.output
    assert objects(url) == files(reference)


def test_resume_onto_a_pack_of_other_options_names_the_url(tree, s3_bucket, staging):
    url = s3_bucket + "/p"
    pack(tree, url, **ARGS)
    res = run("pack", tree, url, "--size", "6", *CLI_ARGS[2:], "--resume")
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: {url} holds a finished pack made with other options ")
    assert "size 8 -> 6" in res.output and str(staging) not in res.output
    assert res.output.endswith(
        "pass --overwrite to replace it (in an object store the old pack is deleted first)\n"
    )


def test_the_marker_is_made_by_an_exclusive_write(tree, s3_bucket, monkeypatch):
    """Two runs that list an empty prefix at the same moment: the second one's create fails."""
    url = s3_bucket + "/p"
    real = Store.objects  # what the run lists the prefix with

    def listing_then_rival(self):
        found = real(self)
        if not any(n.startswith(".mixshard-lock") for n in found):
            rival = _marker(os.getpid(), socket.gethostname(), time.time())
            real_create(self, ".mixshard-lock", rival)
        return found

    real_create = Store.create
    monkeypatch.setattr(Store, "objects", listing_then_rival)
    with pytest.raises(OutputError, match="is in use by another mixshard pack"):
        pack(tree, url, **ARGS)


def test_a_store_pack_cannot_be_read_mapped(tree, s3_bucket, tmp_path):
    url = s3_bucket + "/mapped"
    pack(tree, url, **ARGS)
    with pytest.raises(ValueError, match="read='mapped' applies to pack folders; a store pack"):
        ShardStream(url, 4, read="mapped", cache_dir=tmp_path / "c")
    stream = ShardStream(url, 4, order="block", read="auto", cache_dir=tmp_path / "c")
    reader = stream.reader(range(0, 2))
    assert (reader.way, stream.pack.mapped_shards) == ("feed", 0)  # never mapped: the cache
    reader.close()  # holds only the blocks fetched so far

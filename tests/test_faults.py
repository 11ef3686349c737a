"""`pack` under faults: a full or read-only disk at every write, names that are not UTF-8, two
runs on one OUT, unreadable class folders, a source with no readable image."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import files, make_tree, noise, run

import mixshard
from mixshard import Manifest
from mixshard.core.errors import WriteError
from mixshard.writing.sources import scanning

ARGS = ["--size", "8", "--shard-size", "6", "--workers", "1"]


def fail_fsync_of(suffix: str, code: int, monkeypatch) -> None:
    """Make `os.fsync` fail with `code` for files whose name ends with `suffix`."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def leftovers(out: Path) -> list[str]:
    return sorted(n for n in os.listdir(out) if n.endswith((".partial", ".tmp")))


@pytest.mark.parametrize(
    ("suffix", "where", "code"),
    [
        (".tar.partial", "shard-000000.tar", errno.ENOSPC),  # the last flush of a shard
        ("index.json.tmp", "index.json", errno.ENOSPC),
        (".mixshard-pack.jsonl.tmp", ".mixshard-pack.jsonl", errno.ENOSPC),  # before any shard
        (".tar.partial", "shard-000000.tar", errno.EROFS),
    ],
    ids=["shard", "index", "journal", "read-only"],
)
def test_a_failed_write_is_one_error_line_and_resumes(
    tree, tmp_path, monkeypatch, suffix, where, code
):
    ref = tmp_path / "ref"
    assert run("pack", tree, ref, *ARGS).exit_code == 0
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        fail_fsync_of(suffix, code, patch)
        res = run("pack", tree, out, *ARGS)
    hint = "free some space" if code == errno.ENOSPC else "fix that"
    assert res.exit_code == 1
    assert res.output == (
        f"Error: cannot write {out}/{where}: {os.strerror(code)}; {hint}, then pack again "
        "with --resume to continue (finished shards are kept)\n"
    )
    assert leftovers(out) == []
    assert "index.json" not in os.listdir(out)
    res = run("pack", tree, out, *ARGS, "--resume")
    assert res.exit_code == 0, res.output
    assert files(out) == files(ref)


def test_a_real_full_disk(tree, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        res = run("pack", tree, disk / "out", "--size", "16", "--workers", "1")
        assert res.exit_code == 1
        assert res.output.startswith(f"Error: cannot write {disk}/out/shard-000000.tar: No space")
        assert leftovers(disk / "out") == []
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_names_that_are_not_utf8_are_packed(tmp_path):
    src = os.fsencode(tmp_path / "src")
    for cls in (b"caf\xe9", b"plain"):
        for name in (b"x\xff.png", b"ok.png"):
            path = os.path.join(src, cls, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            noise(Path(os.fsdecode(path)), seed=len(path) + cls[0])
    out = tmp_path / "out"
    res = run("pack", os.fsdecode(src), out, *ARGS)
    assert res.exit_code == 0, res.output
    m = Manifest.load(out)
    assert m.classes == ("caf\udce9", "plain") and m.count == 4
    keys = json.loads((out / "index.json").read_bytes())["classes"]
    assert keys == ["caf\udce9", "plain"]  # written as \udce9 escapes: valid UTF-8 JSON
    (out / "index.json").read_bytes().decode("utf-8")
    import tarfile

    with tarfile.open(out / "shard-000000.tar") as tar:
        stored = [n for m in tar.getmembers() if m.name.endswith("keys.json")
                  for n in json.loads(tar.extractfile(m).read())]  # fmt: skip
    assert {os.fsencode(k) for k in stored} == {
        b"caf\xe9/x\xff.png",
        b"caf\xe9/ok.png",
        b"plain/x\xff.png",
        b"plain/ok.png",
    }
    assert "caf\\xe9" in run("inspect", out).output


def test_a_second_pack_on_one_out_is_refused_naming_the_first(tmp_path):
    src = tmp_path / "src"
    make_tree(src, per_class=4)
    out = tmp_path / "out"
    first = subprocess.Popen(
        [sys.executable, "-m", "mixshard", "pack", str(src), str(out), *ARGS, "-q"],
        start_new_session=True,
    )
    try:
        lock = out / ".mixshard-lock"
        while not (lock.exists() and lock.read_text()):  # it names its holder once locked
            assert first.poll() is None
            time.sleep(0.005)
        os.killpg(first.pid, signal.SIGSTOP)  # holds the lock, mid-pack
        res = run("pack", src, out, *ARGS, "--overwrite")
        assert res.exit_code == 1
        assert res.output.startswith(
            f"Error: {out} is in use by another mixshard pack (pid {first.pid} on "
        )
        assert f"mixshard pack {src} {out}" in res.output
        assert res.output.endswith("wait for it to finish or stop it, then run this again\n")
        with pytest.raises(mixshard.ManifestError, match="a pack is being written there .pid"):
            mixshard.ShardStream(out, 4)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert first.wait(timeout=60) == 0
    assert run("verify", out, "-q").exit_code == 0
    assert sorted(os.listdir(out)) == ["index.json", "shard-000000.tar", "shard-000001.tar"]


def test_class_labels_follow_torchvision_and_survive_an_unreadable_class(tmp_path, monkeypatch):
    torchvision = pytest.importorskip("torchvision")
    src = tmp_path / "src"
    for name in ("c2", "c10", "c1", "empty", "locked"):
        (src / name).mkdir(parents=True)
    for name in ("c2", "c10", "c1", "locked"):
        noise(src / name / "a.png", seed=len(name))
    expected = torchvision.datasets.folder.find_classes(str(src))[1]  # ImageFolder's labels
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path).endswith("locked"):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(scanning.os, "scandir", scandir)
    found = scanning.scan(src)
    assert dict(zip(found.classes, range(len(found.classes)))) == expected
    assert found.classes == ["c1", "c10", "c2", "empty", "locked"]
    assert sorted(found.items) == [("c1/a.png", 0), ("c10/a.png", 1), ("c2/a.png", 2)]
    assert found.skipped == [
        {"path": "empty", "reason": "empty class folder: no images (its label stays reserved)"},
        {"path": "locked", "reason": "unreadable folder: Permission denied"},
    ]


def test_a_source_with_no_readable_image_is_an_error(tmp_path):
    src = tmp_path / "src"
    for i in range(3):
        (src / f"bad{i}.jpg").parent.mkdir(parents=True, exist_ok=True)
        (src / f"bad{i}.jpg").write_bytes(b"not a jpeg")
    res = run("pack", src, tmp_path / "out", *ARGS)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: no readable image in {src}: all 3 image files were skipped (first: bad0.jpg: "
        "not an image PIL can read (cannot identify image file)); nothing was packed\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_strict_run_from_scratch_that_fails_keeps_nothing(tmp_path):
    src = tmp_path / "src"
    make_tree(src, per_class=4)
    (src / "cat" / "zz.png").write_bytes(b"")
    res = run("pack", src, tmp_path / "out", *ARGS, "--strict")
    assert res.exit_code == 1
    assert res.output.startswith("Error: --strict: 1 file(s) could not be read: cat/zz.png")
    assert not (tmp_path / "out").exists()


def test_a_lock_taken_on_a_removed_lock_file_is_taken_again(tmp_path, monkeypatch):
    """A run that releases removes its lock file: a run that opened that file just before
    must not think it holds OUT (a third run would lock the new file too)."""
    from mixshard.core.constants import LOCK_NAME
    from mixshard.writing.out import outlock

    out = tmp_path / "out"
    out.mkdir()
    real, calls = outlock.fcntl.flock, []

    def flock(fd, mode):
        calls.append(mode)
        if len(calls) == 1:  # the holder releases right now: unlinks the file we opened
            (out / LOCK_NAME).unlink()
            (out / LOCK_NAME).write_text("{}")  # and the next run creates a new one
        return real(fd, mode)

    monkeypatch.setattr(outlock.fcntl, "flock", flock)
    lock = outlock.OutLock(out)
    (fd,) = lock.fds
    assert len(calls) == 2  # locked again, on the file that the name now gives
    assert os.fstat(fd).st_ino == os.stat(out / LOCK_NAME).st_ino
    lock.release()


def test_written_blocks_are_flushed_in_the_background_while_packing(tmp_path, monkeypatch):
    """Each shard's blocks are made durable on the flusher's thread as soon as they are
    written (the final fsync then waits for less); the shards are the same bytes."""
    from mixshard.core import files as core_files

    src = tmp_path / "src"
    make_tree(src, {"a": 5, "b": 4})
    mixshard.pack(src, tmp_path / "p0", size=8, shard_size=6, block_size=2, workers=1)
    calls: list[tuple[str, str]] = []
    real = os.fdatasync

    def seen(fd: int) -> None:
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), threading.current_thread().name))
        real(fd)

    monkeypatch.setattr(core_files.os, "fdatasync", seen)
    mixshard.pack(src, tmp_path / "p1", size=8, shard_size=6, block_size=2, workers=1)
    names = sorted(p.name for p in (tmp_path / "p1").glob("shard-*.tar"))
    assert names == ["shard-000000.tar", "shard-000001.tar"]
    for name in names:
        assert (tmp_path / "p1" / name).read_bytes() == (tmp_path / "p0" / name).read_bytes()
    # flushed while partial, never on the packing thread; one flush per write of a block at
    # most (one running and one queued: fewer when the writes outrun the disk)
    assert {c[0].rsplit("/", 1)[-1] for c in calls} == {n + ".partial" for n in names}
    assert {c[1] for c in calls} == {"mixshard-flush"}
    assert 2 <= len(calls) <= sum(len(s.blocks) for s in Manifest.load(tmp_path / "p1").shards)
    assert "mixshard-flush" not in {t.name for t in threading.enumerate()}  # ended with its shard


def test_a_background_flush_that_fails_fails_the_pack_and_keeps_no_half_shard(
    tmp_path, monkeypatch
):
    """An I/O error met by a background fdatasync may never be reported again to the fsync
    after it: it must fail the shard (named), not be lost."""
    from mixshard.core import files as core_files

    src = tmp_path / "src"
    make_tree(src, {"a": 5, "b": 4})

    def fails(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(core_files.os, "fdatasync", fails)
    out = tmp_path / "p"
    with pytest.raises(WriteError, match=r"shard-000000\.tar.*Input/output error"):
        mixshard.pack(src, out, size=8, shard_size=6, block_size=2, workers=1)
    assert not list(out.glob("shard-*")) and not (out / "index.json").exists()
    assert "mixshard-flush" not in {t.name for t in threading.enumerate()}

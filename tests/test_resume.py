"""Interrupted packs (kill -9, Ctrl-C, a dead worker) resume to byte-identical output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import crash_chunk, files, noise, run

import mixshard
from mixshard.core.constants import JOURNAL_NAME

ARGS = ["--size", "16", "--shard-size", "20", "--block-size", "8"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, Path]:
    """600 images and their uninterrupted pack (30 shards)."""
    root = tmp_path_factory.mktemp("resume")
    src = root / "src"
    for i in range(600):
        noise(src / f"c{i % 3}" / f"{i}.png", size=(96, 72), seed=i)
    ref = root / "ref"
    assert run("pack", src, ref, *ARGS, "--workers", 1).exit_code == 0
    return src, ref


def start_pack(src: Path, out: Path, workers: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mixshard",
            "pack",
            str(src),
            str(out),
            *ARGS,
            "--workers",
            str(workers),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # Ctrl-C as a terminal delivers it: a shell's background job (`make test &`) ignores
        # SIGINT, a child inherits that, and Python then installs no handler for it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def journal_lines(out: Path) -> int:
    try:
        return (out / JOURNAL_NAME).read_text().count("\n")
    except FileNotFoundError:
        return 0


def stop_after(proc: subprocess.Popen, out: Path, shards: int) -> None:
    """Let the pack run in 5 ms slices (SIGCONT, sleep, SIGSTOP on its whole process group)
    until its journal records `shards` finished shards, and leave it stopped there. It cannot
    finish between two looks: the rest of the pack takes far longer than a slice."""
    end = time.monotonic() + 120
    while journal_lines(out) < 1 + shards:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "pack made no progress"
        os.killpg(proc.pid, signal.SIGCONT)
        time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGSTOP)
    assert not (out / "index.json").exists()


def kill_after(src: Path, out: Path, shards: int, workers: int = 1) -> None:
    """Start a pack and `kill -9` it (workers too) once `shards` shards are journalled."""
    proc = start_pack(src, out, workers)
    os.killpg(proc.pid, signal.SIGSTOP)
    stop_after(proc, out, shards)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def resume(src: Path, out: Path, workers: int = 1):
    return run("pack", src, out, *ARGS, "--workers", workers, "--resume")


@pytest.mark.parametrize("workers", [1, 2])
def test_kill_9_then_resume_is_byte_identical(source, tmp_path, workers):
    src, ref = source
    out = tmp_path / "out"
    kill_after(src, out, 2, workers)
    assert (out / JOURNAL_NAME).exists()
    res = resume(src, out, workers=2)
    assert res.exit_code == 0, res.output
    assert "reused from earlier runs" in res.output
    assert files(out) == files(ref)


def test_ctrl_c_exits_130_and_resumes(source, tmp_path):
    src, ref = source
    out = tmp_path / "out"
    proc = start_pack(src, out, workers=2)
    os.killpg(proc.pid, signal.SIGSTOP)
    stop_after(proc, out, 2)
    os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C does: the whole process group, workers too
    os.killpg(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip().endswith(
        "Interrupted. Finished shards are kept: rerun the same command with --resume to continue."
    )
    assert "Traceback" not in err
    assert not (out / "index.json").exists()
    assert not [n for n in os.listdir(out) if n.endswith(".partial")]
    assert resume(src, out).exit_code == 0
    assert files(out) == files(ref)


def test_resume_redoes_a_shard_whose_journal_line_was_cut(source, tmp_path):
    src, ref = source
    out = tmp_path / "out"
    kill_after(src, out, 4)
    journal = out / JOURNAL_NAME
    lines = journal.read_text().splitlines()
    assert len(lines) >= 3
    journal.write_text("\n".join(lines[:2]) + "\n" + lines[2][:15])  # a line cut by the kill
    (out / "shard-000009.tar.partial").write_bytes(b"half a shard")
    res = resume(src, out)
    assert res.exit_code == 0 and "1 reused from earlier runs" in res.output
    assert files(out) == files(ref)


def test_resume_refuses_other_options_and_finished_packs(source, tmp_path):
    src, ref = source
    out = tmp_path / "out"
    kill_after(src, out, 1)
    res = run("pack", src, out, "--size", "12", "--resume")
    assert res.exit_code == 1
    assert "holds an interrupted pack of another source or other options" in res.output
    res = resume(src, ref)
    assert res.exit_code == 0
    assert res.output.startswith(f"{ref} already holds a finished pack of 600 images")


def test_dead_worker_is_an_error_not_a_hang(tmp_path, monkeypatch):
    src = tmp_path / "src"
    for i in range(70):
        noise(src / f"{i}.png", size=(20, 20), seed=i)
    localrun = sys.modules["mixshard.writing.run.localrun"]
    monkeypatch.setattr(localrun, "decode_chunk", crash_chunk)  # workers spawned: no slots
    monkeypatch.setattr(localrun, "decode_to_slot", crash_chunk)
    with pytest.raises(mixshard.MixshardError, match="a decode worker process died"):
        mixshard.pack(src, tmp_path / "out", size=8, workers=2)
    state = json.loads((tmp_path / "out" / JOURNAL_NAME).read_text().splitlines()[0])
    assert "fingerprint" in state


def test_every_resumable_error_ends_with_the_resume_hint(tmp_path, monkeypatch):
    """The CLI adds the hint to any error that says a pack can be resumed (a Ray task that
    failed for good words it its own way), once."""
    from mixshard.core.errors import RESUME, PackInterrupted
    from mixshard.writing import packing

    src = tmp_path / "src"
    noise(src / "a.png", size=(20, 20), seed=0)

    def failing(*args, **kwargs):
        raise PackInterrupted("the Ray task of shard 3 failed 4 times (lost node)")

    monkeypatch.setattr(packing, "pack", failing)
    res = run("pack", src, tmp_path / "out")
    assert res.exit_code == 1
    assert res.output == (
        "Error: the Ray task of shard 3 failed 4 times (lost node); rerun the same command "
        "with --resume to continue\n"
    )

    def worded(*args, **kwargs):
        raise PackInterrupted("a worker died; finished shards are kept: pack again with ", RESUME)

    monkeypatch.setattr(packing, "pack", worded)
    assert run("pack", src, tmp_path / "out").output == (
        "Error: a worker died; finished shards are kept: pack again with --resume\n"
    )


def test_workers_that_cannot_start_are_not_a_write_error(tmp_path, monkeypatch):
    from mixshard.writing.run import localrun

    def no_fork(*args, **kwargs):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(localrun, "start_workers", no_fork)
    src = tmp_path / "src"
    for i in range(70):  # more than one chunk of work: workers are started
        noise(src / f"{i}.png", size=(20, 20), seed=i)
    res = run("pack", src, tmp_path / "out", "--workers", "2", "--size", "8")
    assert res.exit_code == 1
    assert res.output == (
        "Error: cannot start 2 decode worker processes: Resource temporarily unavailable; "
        "pack with fewer workers (--workers 1 uses none)\n"
    )

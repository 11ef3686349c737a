"""writing/run/shardworkers.py: whole shards written by the decode workers themselves."""

from __future__ import annotations

import errno
import os
import sys
import time

import pytest
from helpers import bad_images, crash_chunk, files, make_tree

from mixshard import Manifest, pack
from mixshard.core.errors import MixshardError, PackInterrupted, WriteError
from mixshard.writing.run import localrun, shardworkers
from mixshard.writing.run.shardworkers import ShardJob, WholeShards, whole_shards

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="whole shards need forked workers")

KW = dict(size=8, shard_size=40, block_size=16)


@pytest.fixture
def src(tmp_path):
    """150 good images in 3 classes and bad ones amid them: 4 shards of 40."""
    root = tmp_path / "src"
    make_tree(root, classes=("c", "d", "e"), per_class=50)
    bad_images(root)
    return root


def runs(monkeypatch) -> list[str]:
    """The runner each pack of the test uses, in turn."""
    used: list[str] = []
    for name in ("WholeShards", "LocalRun"):
        module = shardworkers if name == "WholeShards" else localrun
        real = getattr(module, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            used.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    return used


def plan_of(src):
    from mixshard.writing.plan.packplan import make_plan
    from mixshard.writing.sources.scanning import scan

    return make_plan(str(src), scan(src), size=8, crop="center", variants=1, shard_size=40,
                     block_size=16, seed=0, shuffle=True)  # fmt: skip


def test_which_runs_hand_whole_shards_to_the_workers():
    assert whole_shards(workers=2, shards=2, variants=1)
    assert whole_shards(workers=4, shards=184, variants=1)
    assert not whole_shards(workers=1, shards=10, variants=1)  # decodes in the pack process
    assert not whole_shards(workers=3, shards=2, variants=1)  # a worker would idle
    assert not whole_shards(workers=2, shards=10, variants=2)  # a shard per worker in memory


def test_whole_shards_are_the_bytes_one_process_writes(src, tmp_path, monkeypatch):
    used = runs(monkeypatch)
    reports: list[int] = []
    pack(src, tmp_path / "one", workers=1, **KW)
    pack(src, tmp_path / "two", workers=2, progress=lambda p: reports.append(p.done), **KW)
    assert used == ["LocalRun", "WholeShards"]  # workers=1: LocalRun, decoding in this process
    assert files(tmp_path / "one") == files(tmp_path / "two")
    manifest = Manifest.load(tmp_path / "two")
    assert len(manifest.shards) == 4 and len(manifest.skipped) >= 3
    # the progress bar counts every image once, skipped ones too, and ends at the whole
    assert reports[0] == 0 and reports == sorted(reports)
    assert reports[-1] == 150 + len(manifest.skipped)


def test_each_task_records_the_stamps_of_its_shards_files(src, tmp_path):
    """What a resumed run checks before it reuses a shard: taken by the task, not the pack
    process (1.8 million `stat`s before any worker started, on Places365)."""
    from mixshard.writing.out.shardwrite import plan_stamps

    plan, done = plan_of(src), []
    (tmp_path / "out").mkdir()
    WholeShards(plan, tmp_path / "out", [0, 1, 2, 3], 2, lambda *a: None, done.append).run()
    assert sorted(d.index for d in done) == [0, 1, 2, 3]
    for shard in done:
        assert shard.sources == plan_stamps(plan, shard.index)
        assert len(shard.sources) == len(plan.shard_items(shard.index))
        assert all(isinstance(s, list) and len(s) == 2 for s in shard.sources)


def test_an_archive_packs_by_whole_shards_too(src, tmp_path, monkeypatch):
    import tarfile

    with tarfile.open(tmp_path / "src.tar", "w") as tf:
        tf.add(src, arcname="ds")
    used = runs(monkeypatch)
    pack(src, tmp_path / "folder", workers=1, **KW)
    pack(tmp_path / "src.tar", tmp_path / "tar", within="ds", workers=2, **KW)
    assert used == ["LocalRun", "WholeShards"]
    assert files(tmp_path / "folder") == files(tmp_path / "tar")


def test_a_dead_worker_is_an_error_and_leaves_no_partial_shard(src, tmp_path, monkeypatch):
    monkeypatch.setattr(shardworkers, "decode_chunk", crash_chunk)  # forked: the workers see it
    with pytest.raises(PackInterrupted, match="a decode worker process died"):
        pack(src, tmp_path / "out", workers=2, **KW)
    assert not [n for n in os.listdir(tmp_path / "out") if n.endswith(".partial")]
    assert not (tmp_path / "out" / "index.json").exists()


def test_a_failed_write_in_a_worker_names_the_shard(src, tmp_path, monkeypatch):
    from mixshard.writing.out import tarwriter

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tarwriter.ShardWriter, "add_block", full)
    with pytest.raises(WriteError) as info:
        pack(src, tmp_path / "out", workers=2, **KW)
    assert str(info.value).startswith(f"cannot write {tmp_path / 'out'}/shard-00000")
    assert "No space left on device; free some space, then pack again" in str(info.value)
    assert not [n for n in os.listdir(tmp_path / "out") if n.endswith(".partial")]


def test_a_stopped_run_ends_its_running_tasks_without_partial_shards(src, tmp_path, monkeypatch):
    """The pack process fails (here: journalling the first shard); the other tasks stop after
    their chunk instead of writing their shards to the end."""
    real = shardworkers.decode_chunk

    def slow(*args, **kwargs):
        time.sleep(0.3)  # each shard of 40 is two chunks
        return real(*args, **kwargs)

    monkeypatch.setattr(shardworkers, "decode_chunk", slow)
    out = tmp_path / "out"
    out.mkdir()
    plan = plan_of(src)

    def journal(shard):
        raise RuntimeError("the journal failed")

    run = WholeShards(plan, out, [0, 1, 2, 3], 2, lambda *a: None, journal)
    with pytest.raises(RuntimeError, match="the journal failed"):
        run.run()
    written = os.listdir(out)
    assert not [n for n in written if n.endswith(".partial")]
    # the first shard and the one beside it at most: the tasks queued behind them (already
    # handed to the workers) stopped at their first chunk
    assert 1 <= len(written) <= 2


def test_the_job_counts_per_slot_and_stops():
    job = ShardJob(None, None, 3)  # type: ignore[arg-type]  # a task reads them, not the counts
    job.add(1, 32, 2)
    job.add(1, 8, 0)
    job.add(2, 5, 5)
    assert [job.counts(s) for s in range(3)] == [(0, 0), (40, 2), (5, 5)]
    job.clear(1)
    assert job.counts(1) == (0, 0) and job.counts(2) == (5, 5)
    assert not job.stopped
    job.stop()
    assert job.stopped and job.counts(2) == (5, 5)


def test_progress_reports_skipped_images_seen_after_their_count():
    """A report may read a task's images before its skipped count catches up (written after
    them); the skipped ones then reach the next report on their own, none lost."""
    seen = iter([(32, 0), (32, 2), (32, 2)])

    class Job:
        def counts(self, slot):
            return next(seen)

    chunks: list[tuple[int, int]] = []
    run = WholeShards(None, None, [], 2, lambda n, k: chunks.append((n, k)), print)  # type: ignore[arg-type]
    run.reported[0] = (0, 0)
    for _ in range(3):
        run._report(Job(), [(0, 7)])  # type: ignore[arg-type]
    assert chunks == [(32, 0), (0, 2)]


def test_workers_that_cannot_start_are_not_a_write_error(src, tmp_path, monkeypatch):
    def no_fork(*args, **kwargs):
        raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    monkeypatch.setattr(shardworkers, "start_workers", no_fork)
    with pytest.raises(MixshardError) as info:
        pack(src, tmp_path / "out", workers=2, **KW)
    assert type(info.value) is MixshardError
    assert str(info.value) == (
        "cannot start 2 decode worker processes: Resource temporarily unavailable; pack with "
        "fewer workers (workers=1 uses none)"
    )


def test_a_whole_shard_task_runs_only_in_a_worker_forked_with_its_job():
    with pytest.raises(RuntimeError, match="runs in a worker forked with a ShardJob"):
        shardworkers.write_whole_shard(0, 0)  # in this process: no job

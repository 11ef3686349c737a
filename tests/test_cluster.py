"""Packing past one machine: `--ray` (one Ray task per shard) and `--part K/N` + `--finish`
(job arrays) make exactly the pack the local packer makes."""

from __future__ import annotations

import os
import sys
import tarfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers import alarm, files, make_tree, noise, run

import mixshard
from mixshard import Manifest, MixshardError
from mixshard.writing.plan.packplan import make_plan
from mixshard.writing.run import raypack

ray = pytest.importorskip("ray")

ARGS = ["--size", "12", "--shard-size", "10", "--block-size", "4"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """48 images in 3 classes, two of them unreadable: 5 shards of 10 source images."""
    src = tmp_path_factory.mktemp("cluster") / "src"
    make_tree(src, per_class=16)
    (src / "cat" / "img3.png").write_bytes(b"")  # skipped: empty
    (src / "dog" / "img7.png").write_bytes(b"not a png")  # skipped: not an image
    return src


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "pack"
    assert run("pack", source, out, *ARGS, "--workers", "2").exit_code == 0
    assert len(Manifest.load(out).skipped) == 2
    return out


def test_an_unreachable_cluster_is_one_line_and_writes_nothing(source, tmp_path):
    if ray.is_initialized():  # another module's tests started the session's instance
        ray.shutdown()
    out = tmp_path / "pack"
    res = run("pack", source, out, *ARGS, "--ray", "127.0.0.1:1")
    assert res.exit_code == 1
    assert res.output.startswith("Error: cannot reach the Ray cluster at 127.0.0.1:1: ")
    assert res.output.endswith("or pack without --ray\n") and res.output.count("\n") == 1
    assert not out.exists()


def test_ray_gives_the_local_bytes(source, reference, local_ray, tmp_path):
    out = tmp_path / "pack"
    res = run("pack", source, out, *ARGS, "--ray")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("Packed 46 images (2 skipped) into 5 shards, ")
    assert files(out) == files(reference)


@pytest.mark.parametrize("kind", ["tar", "tar.gz"])
def test_ray_from_an_archive_gives_the_folder_bytes(source, reference, local_ray, tmp_path, kind):
    archive = tmp_path / f"src.{kind}"
    with tarfile.open(archive, "w:gz" if kind == "tar.gz" else "w") as tf:
        tf.add(source, arcname="src")
    out = tmp_path / "pack"
    res = run("pack", archive, out, *ARGS, "--within", "src", "--ray")
    assert res.exit_code == 0, res.output
    assert files(out) == files(reference)  # no members file left behind either


def test_job_array_parts_give_the_local_bytes(source, reference, tmp_path):
    out = tmp_path / "pack"
    res = run("pack", source, out, *ARGS, "--part", "1/2", "--workers", "1")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("Wrote 2 shard(s) of this part (0 were already there) in ")
    res = run("pack", source, out, *ARGS, "--finish")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {out}: 3 of 5 planned shards are not written yet from part(s) 0/2 "
        "(shard-000000.tar, shard-000002.tar, shard-000004.tar); run the missing job-array "
        "parts, then finish again\n"
    )
    assert "index.json" not in os.listdir(out)
    assert run("pack", source, out, *ARGS, "--part", "0/2", "--workers", "2").exit_code == 0
    res = run("pack", source, out, *ARGS, "--finish")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("Packed 46 images (2 skipped) into 5 shards, 5 reused from ")
    assert files(out) == files(reference)
    # a part resubmitted after the finish (a job array re-run) leaves the pack alone,
    # even when the source has changed since
    (source / "cat" / "img0.png").rename(source / "cat" / "moved.bak")
    try:
        res = run("pack", source, out, *ARGS, "--part", "0/2", "--workers", "1")
    finally:
        (source / "cat" / "moved.bak").rename(source / "cat" / "img0.png")
    assert res.exit_code == 0, res.output
    assert res.output == f"{out} already holds a finished pack of 46 images; nothing to do.\n"
    assert files(out) == files(reference)


def test_parts_run_side_by_side(source, reference, tmp_path):
    out = tmp_path / "pack"
    results = {}

    def part(k: int) -> None:
        try:
            results[k] = mixshard.pack(source, out, size=12, shard_size=10, block_size=4,
                                       workers=1, part=(k, 3))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - reported below
            results[k] = exc

    threads = [threading.Thread(target=part, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.written_shards for r in results.values()) == [1, 2, 2], results
    mixshard.pack(source, out, size=12, shard_size=10, block_size=4, finish=True)
    assert files(out) == files(reference)


def test_parts_refuse_bad_numbers_and_other_options(source, tmp_path):
    out = tmp_path / "pack"
    for bad in ("2/2", "0/0", "-1/2", "x"):
        res = run("pack", source, out, *ARGS, "--part", bad)
        assert res.exit_code == 2 and "Invalid value for '--part'" in res.output, res.output
    assert run("pack", source, out, *ARGS, "--part", "0/2", "--workers", "1").exit_code == 0
    res = run("pack", source, out, "--size", "16", "--shard-size", "10", "--part", "1/2")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {out} holds an interrupted pack of another source or other options "
        "(.mixshard-pack.part-0-of-2.jsonl: block_size 4 -> 256; size 12 -> 16); pack again "
        "with the same SRC and options to resume it, or pass --overwrite to start over\n"
    )
    res = run("pack", source, out, *ARGS, "--part", "1/2", "--overwrite")
    assert res.exit_code == 2
    assert res.output.endswith("Error: --part cannot be combined with --overwrite or --ray\n")
    with pytest.raises(ValueError, match=r"part must be \(k, n\) with 0 <= k < n, got \(3, 2\)"):
        mixshard.pack(source, out, part=(3, 2))


def test_without_ray_installed(source, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    res = run("pack", source, tmp_path / "pack", *ARGS, "--ray")
    assert res.exit_code == 1
    assert res.output == (
        "Error: packing on Ray needs Ray: pip install 'mixshard[ray]' (or pip install ray)\n"
    )
    assert not (tmp_path / "pack").exists()


def plan_of(source: Path, shard_size: int = 10):
    return make_plan(str(source), mixshard.scan(source), size=12, crop="center", variants=1,
                     shard_size=shard_size, block_size=4, seed=0, shuffle=True)  # fmt: skip


def test_a_node_that_cannot_see_out_is_named(source, local_ray, tmp_path):
    missing = tmp_path / "not-mounted-here"
    with pytest.raises(MixshardError) as err:
        raypack.run_on_ray(plan_of(source), missing, [0, 1], "default", lambda *a: None,
                           lambda s: None)  # fmt: skip
    assert str(err.value).startswith(f"{missing} is not visible on Ray node ")
    assert str(err.value).endswith(
        "SRC and OUT must be on storage every node sees (NFS, Lustre, a shared disk) or an "
        "object store (s3://...); nothing of this shard was written"
    )
    assert not missing.exists()


def slow_decode(task):
    """A decode that is slow on the last, short chunk of a shard: by then the shard's first
    blocks are written, so the test can kill the worker mid-shard."""
    from mixshard.writing.run.decodeworkers import decode_chunk

    if len(task.keys) < 32:
        time.sleep(0.5)
    return decode_chunk(task)


def test_a_killed_worker_is_retried_and_the_bytes_do_not_change(source, local_ray,
                                                                 tmp_path):  # fmt: skip
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    out = tmp_path / "pack"
    out.mkdir()
    plan = plan_of(source, shard_size=40)  # shard 0: a chunk of 32 images, then 8
    ref = tmp_path / "ref"
    mixshard.pack(source, ref, size=12, shard_size=40, block_size=4, workers=1)
    done = {}
    killed = []

    def kill_one() -> None:
        while not killed:
            for proc in psutil.process_iter(["cmdline"]):
                cmd = " ".join(proc.info["cmdline"] or [])
                if "ray::ray_task" in cmd and list(out.glob("*.partial")):
                    proc.kill()
                    killed.append(proc.pid)
                    return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    raypack.run_on_ray(plan, out, list(range(plan.n_shards)), "default", lambda *a: None,
                       lambda s: done.update({s.index: s}), decode=slow_decode)  # fmt: skip
    killer.join(timeout=5)
    assert killed, "no worker was killed mid-shard"
    assert sorted(done) == [0, 1]
    for shard in done.values():
        assert (out / shard.info.name).read_bytes() == (ref / shard.info.name).read_bytes()
    assert not list(out.glob("*.partial"))


def test_a_two_node_cluster_gives_the_same_bytes(source, reference, tmp_path, _ray_temp):
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    head = {"num_cpus": 1}
    with alarm(120, "starting a Ray cluster's head"):  # Ray starts in the main thread only
        cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        with alarm(120, "adding a Ray node"):
            cluster.add_node(num_cpus=1)
        out = tmp_path / "pack"
        res = run("pack", source, out, *ARGS, "--ray", cluster.address)
        assert res.exit_code == 0, res.output
        assert len(ray.nodes()) == 2
        assert files(out) == files(reference)
    finally:
        ray.shutdown()
        with alarm(120, "stopping a Ray cluster"):
            cluster.shutdown()


def test_noise_helper_is_deterministic(tmp_path):
    a, b = noise(tmp_path / "a.png", seed=3), noise(tmp_path / "b.png", seed=3)
    assert a.read_bytes() == b.read_bytes()

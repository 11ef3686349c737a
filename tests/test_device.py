"""The device seam (`core/device.py`) and the job thread under its CPU lane; and, on CUDA, the
hot calls of the pool, the prefetch ring and `Overlay` with host syncs made errors."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from helpers import make_tree

import mixshard
from mixshard.core import device as dev
from mixshard.core.jobs import JobThread
from mixshard.reading.prefetcher import Ring, prefetch

CPU = torch.device("cpu")


def test_a_job_thread_runs_jobs_in_order_and_waits_for_a_given_one():
    jobs = JobThread("t")
    done: list[int] = []
    gate = threading.Event()
    first = jobs.submit(lambda: (gate.wait(5), done.append(1)))
    second = jobs.submit(lambda: done.append(2))
    assert (first, second) == (1, 2) and done == []
    gate.set()
    jobs.wait(first)
    assert done[0] == 1
    jobs.wait()
    assert done == [1, 2]
    jobs.close()
    with pytest.raises(RuntimeError, match="submit after close"):
        jobs.submit(lambda: None)


def test_a_job_error_is_raised_in_the_caller_by_every_later_wait():
    jobs = JobThread("t")

    def broken():
        raise ValueError("disk on fire")

    jobs.submit(broken)
    ran = []
    jobs.submit(lambda: ran.append(1))  # later jobs still run
    for _ in range(2):
        with pytest.raises(ValueError, match="disk on fire"):
            jobs.wait()
    assert ran == [1]
    jobs.close()


def test_a_closed_job_thread_ends_once_its_queue_is_done():
    jobs = JobThread("t")
    done = []
    jobs.submit(lambda: (time.sleep(0.05), done.append(1)))
    jobs.close()
    assert done == [1]
    assert not any(t.name == "t" for t in threading.enumerate())


@pytest.mark.parametrize("threaded", [True, False])
def test_a_cpu_lane_runs_jobs_in_order_and_carries_their_errors(threaded):
    lane = dev.Lane(CPU, "lane", threaded=threaded)
    assert lane.threaded == threaded
    seen: list[str] = []
    fences = [lane.submit(lambda i=i: seen.append(f"job{i}")) for i in range(3)]
    lane.wait(fences[1])
    assert seen[:2] == ["job0", "job1"]
    lane.wait()
    assert seen == ["job0", "job1", "job2"]

    def broken():
        raise OSError("short read")

    lane.submit(broken)
    with pytest.raises(OSError, match="short read"):
        lane.wait()
    with pytest.raises(OSError, match="short read"):  # and at the next submit
        lane.submit(lambda: None)
    lane.close()


def test_a_threaded_cpu_lane_runs_jobs_off_the_callers_thread():
    lane = dev.Lane(CPU, "mixshard-test-lane")
    names: list[str] = []
    lane.wait(lane.submit(lambda: names.append(threading.current_thread().name)))
    assert names == ["mixshard-test-lane"]
    lane.close()


def test_cpu_moves_hand_back_the_data_itself():
    index = np.array([3, 1, 2], np.int64)
    moved = dev.move_index(index, CPU)
    assert moved.dtype == torch.int64 and moved.tolist() == [3, 1, 2]
    assert moved.data_ptr() == index.ctypes.data  # no copy
    t = torch.arange(4)
    assert dev.move(t, CPU) is t
    assert dev.move_index(np.array([1, 2], np.int32), CPU).dtype == torch.int64


def test_device_queries_on_cpu():
    assert dev.canonical("cpu") == CPU
    assert dev.free_memory(CPU) > 0
    assert not dev.wants_pinned(CPU)
    assert dev.host_empty((2, 3), torch.uint8, pin=False).shape == (2, 3)
    assert dev.accelerator() == torch.cuda.is_available()


def test_the_cpu_ring_hands_batches_on_in_order_without_copying():
    batches = [torch.full((2, 3), i) for i in range(5)]
    ring = Ring(CPU, 3)
    got = list(ring.run(iter(batches)))
    assert [g.data_ptr() for g in got] == [b.data_ptr() for b in batches]
    assert ring.copies == 0
    pairs = [(b, b + 1) for b in batches]
    assert all(
        isinstance(p, tuple) and p[1].equal(b + 1) for p, b in zip(prefetch(pairs, CPU), batches)
    )
    assert list(prefetch([], CPU)) == []


# ---------------------------------------------------------------- CUDA: no host sync per call


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("device")
    make_tree(root / "src", classes=("a", "b"), per_class=150)
    mixshard.pack(root / "src", root / "pack", size=12, shard_size=100, block_size=16, workers=1)
    return root / "pack"


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _no_sync(call, times: int = 10) -> None:
    """`call` a few times to warm up, then `times` more with every host sync an error."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(times):
            call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("cache", ["device", "pool", "stream"])
@pytest.mark.parametrize("crop", [None, (0.5, 1.0)])
def test_overlay_calls_make_no_host_sync_on_cuda(pack_dir, cache, crop):
    ov = mixshard.Overlay(pack_dir, cache=cache, pool=64, crop=crop, alpha=(0.2, 0.6))
    obs = torch.rand(32, 9, 12, 12, device="cuda") * 255
    _no_sync(lambda: ov(obs))
    ov.close()


@pytest.mark.cuda
@cuda
def test_pool_takes_make_no_host_sync_on_cuda(pack_dir):
    from mixshard.augment.caches.imagepool import ImagePool
    from mixshard.reading.source import resolve_source

    pool = ImagePool(resolve_source(pack_dir), torch.device("cuda"), 64, 2, seed=0)
    _no_sync(lambda: pool.take(32, own=False), times=20)
    pool.wait()
    torch.cuda.synchronize()
    pool.close()


@pytest.mark.cuda
@cuda
def test_prefetch_makes_no_host_sync_on_cuda(pack_dir):
    it = prefetch(mixshard.loader(pack_dir, 16, num_workers=2, infinite=True), "cuda")
    _no_sync(lambda: next(it).float().mul_(2), times=20)


def test_a_ring_to_another_device_copies_into_buffers_it_reuses():
    """The copying path of the ring, run on the CPU suite: `meta` tensors stand in for a
    device (an inline lane; copies of shape only)."""
    meta = torch.device("meta")
    ring = Ring(meta, 2)
    batches = [torch.full((2, 3), i, dtype=torch.uint8) for i in range(4)]
    got = [(t.device, t.shape) for t in ring.run(iter(batches))]
    assert got == [(meta, (2, 3))] * 4 and ring.copies == 4
    slots = [list(s) for s in ring.slots]
    ring.load(4, torch.zeros(2, 3, dtype=torch.uint8))  # same shape: the buffer is reused
    ring.take(4)
    assert ring.slots[0][0] is slots[0][0]
    ring.load(5, torch.zeros(5, 3, dtype=torch.uint8))  # another shape: a new buffer
    assert ring.take(5).shape == (5, 3) and ring.slots[1][0] is not slots[1][0]
    assert dev.move_index(np.array([1, 2]), meta).device == meta

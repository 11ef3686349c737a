"""Memory that dropped objects leave behind (issue 40, point 9): an `Overlay(cache="pool")`
made and dropped again and again gives its memory back, without waiting for a full garbage
collection."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import make_tree

import mixshard
from mixshard.augment.caches.imagepool import ImagePool
from mixshard.augment.caches.refill import Refill

CYCLES = 30


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    """200 images of 84 px (4.2 MB): a pool holds them all."""
    root = tmp_path_factory.mktemp("dropped")
    make_tree(root / "src", classes=("a", "b"), per_class=100)
    mixshard.pack(root / "src", root / "pack", size=84, block_size=16, workers=1)
    return root / "pack"


DROP = """
import gc, sys, threading, time
import torch
import mixshard

def rss_anon_mb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024

def threads():  # besides this one and the reaper that stops dropped objects' threads
    return sum(t.name != "mixshard-reaper" for t in threading.enumerate()) - 1

def cycle():
    overlay = mixshard.Overlay(sys.argv[1], cache="pool", seed=0)
    for _ in range(3):
        overlay(obs)
    # dropped, not closed; then wait until the reaper has stopped its threads
    del overlay
    deadline = time.monotonic() + 20
    while threads() and time.monotonic() < deadline:
        time.sleep(0.01)

gc.disable()  # a full collection would hide a reference cycle
obs = torch.zeros(32, 9, 84, 84)
cycle()  # the first one's imports, thread stacks and allocator pools stay
base = rss_anon_mb()
for _ in range(int(sys.argv[2])):
    cycle()
print(f"{rss_anon_mb() - base:.0f} {threads()}")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_pools_made_and_dropped_give_their_memory_back(pack_dir):
    # Before: a lambda over the pool (its draws) and the refill's bound method (its
    # carry) made cycles, so each dropped Overlay kept ~25 MB (its pool, the reader's
    # batches and queue) until a full collection: +743 MB after 30 of these.
    done = subprocess.run(
        [sys.executable, "-c", DROP, str(pack_dir), str(CYCLES)],
        capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    grown_mb, threads_left = map(int, done.stdout.split())
    assert threads_left == 0
    assert grown_mb < 128, f"RssAnon grew by {grown_mb} MB over {CYCLES} dropped pools"


def test_a_dropped_pool_is_freed_by_reference_counting(pack_dir):
    gc.collect()
    gc.disable()
    try:
        overlay = mixshard.Overlay(pack_dir, cache="pool", seed=0)
        overlay(torch.zeros(4, 3, 84, 84))
        overlay.close()
        del overlay
        alive = [o for o in gc.get_objects() if type(o) in (ImagePool, Refill)]
        assert alive == []
    finally:
        gc.enable()

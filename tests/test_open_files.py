"""Descriptors: a pack of more shards than the process may open is read, mapped, epoch after
epoch (issue 40, point 5), and running out of descriptors is said as such, never as a damaged
pack."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_tree

import mixshard
from mixshard.reading.pack import mapped

SHARDS = 100
LIMIT = 64  # descriptors the reading process may hold: fewer than the shards

pytestmark = pytest.mark.skipif(
    mapped._mapped is None or mapped._mmap is None, reason="no mapping extension"
)


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fds")
    make_tree(root / "src", classes=("a", "b"), per_class=SHARDS)
    mixshard.pack(root / "src", root / "pack", size=8, shard_size=2, block_size=2, workers=1)
    assert len(list((root / "pack").glob("shard-*.tar"))) == SHARDS
    return root / "pack"


READ = """
import os, resource, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), int(sys.argv[2])))
import mixshard
stream = mixshard.ShardStream(sys.argv[1], 16, order=sys.argv[3], seed=1)
seen = []
for epoch in range(4):
    stream.set_epoch(epoch)
    batches = sum(1 for _ in stream)
    deadline = time.monotonic() + 15  # the warm pass maps the shards behind the first epoch
    while stream.pack.mapped_shards < len(stream.pack.shards) and time.monotonic() < deadline:
        time.sleep(0.05)
    seen.append((batches, stream.pack.mapped_shards, len(os.listdir("/proc/self/fd"))))
print(seen)
"""


@pytest.mark.parametrize("order", ["global", "block"])
def test_more_shards_than_descriptors_are_read_mapped_for_epochs(many, order):
    done = subprocess.run(
        [sys.executable, "-c", READ, str(many), str(LIMIT), order],
        capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = eval(done.stdout)  # [(batches, mapped shards, open descriptors)] per epoch
    # every epoch whole; more shards mapped than the process may hold descriptors (a mapping
    # holds none); how many the paced warm pass has mapped by then depends on the page cache
    assert [s[0] for s in seen] == [12] * 4 and seen[-1][1] > LIMIT, seen
    assert [s[1] for s in seen] == sorted(s[1] for s in seen), seen
    # the open-shard cache keeps max(16, LIMIT // 4) = 16; the mappings hold none
    assert all(fds < LIMIT - 16 for _, _, fds in seen), seen


EXHAUSTED = """
import os, sys
import mixshard
stream = mixshard.ShardStream(sys.argv[1], 16, order="global", seed=1, on_error="skip")
next(iter(stream))  # every module imported
stream.pack.close()  # no shard open: the next batch opens its shards
stream.set_epoch(1)
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    next(iter(stream))
    print("no error")
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_running_out_of_descriptors_says_so_and_skips_nothing(many):
    done = subprocess.run(
        [sys.executable, "-c", EXHAUSTED, str(many)], capture_output=True, text=True, timeout=100
    )
    out = done.stdout.strip()
    assert out.startswith(f"MixshardError cannot open shard {many}/shard-0"), out + done.stderr
    assert out.endswith(
        ": too many open files (this process may hold at most "
        f"{_soft_limit()}, `ulimit -n`; the pack itself is fine); raise the limit (e.g. "
        "`ulimit -n 65536` before starting) or use fewer workers"
    ), out
    assert "repack" not in out and "verify" not in out


def _soft_limit() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_a_mapping_holds_no_descriptor_and_goes_with_its_maps(many):
    shard = str(many / "shard-000000.tar")
    maps = mapped.ShardMaps(1)
    assert maps.map_all(lambda slot: os.open(shard, os.O_RDONLY), [os.path.getsize(shard)])
    assert len(maps) == 1
    assert shard not in _open_files()
    assert shard in Path("/proc/self/maps").read_text()
    del maps  # collected: unmapped
    gc.collect()
    assert shard not in Path("/proc/self/maps").read_text()


def _open_files() -> set[str]:
    return {os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")}

"""A manifest that lies about what its shards hold (issue 40, point 2): counts are bounded by
the bytes that exist, and a lie is refused before a reader spends memory on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_tree

import mixshard
from mixshard import ManifestError, ShardError, ShardStream
from mixshard.core import layout
from mixshard.core.constants import TAR_BLOCK

PER_BLOCK = 1 << 16  # the largest block_size


def lying_pack(folder: Path, blocks: int, sparse: bool = True) -> tuple[int, int]:
    """A manifest of `blocks` blocks of 65,536 one-pixel images (each entry ~90 bytes of JSON),
    every offset where a writer would put it, next to a shard of holes of the size it claims.
    Returns (images claimed, shard bytes)."""
    folder.mkdir(parents=True)
    entries, floor = [], 0
    for k in range(blocks):
        offset = floor + TAR_BLOCK + layout.images_header_len(PER_BLOCK, 1)
        labels = layout.labels_offset_for(offset, PER_BLOCK, 1)
        entry = {"key": f"{k:08d}", "count": PER_BLOCK, "offset": offset}
        entries.append({**entry, "labels_offset": labels})
        floor = layout.block_end_min(labels, PER_BLOCK)
    nbytes = layout.padded(floor + 2 * TAR_BLOCK)
    count = blocks * PER_BLOCK
    doc = {
        "format": "mixshard", "version": 1, "size": 1, "channels": 3, "dtype": "uint8",
        "layout": "NCHW", "block_size": PER_BLOCK, "count": count, "classes": [], "options": {},
        "skipped": [],
        "shards": [{"name": "shard-000000.tar", "count": count, "bytes": nbytes,
                    "sha256": "0" * 64, "blocks": entries}],
    }  # fmt: skip
    (folder / "index.json").write_text(json.dumps(doc))
    with open(folder / "shard-000000.tar", "wb") as f:
        f.truncate(nbytes) if sparse else f.write(bytes(nbytes))
    return count, nbytes


CHILD = """
import sys, time
import mixshard
from mixshard.reading import loading, stream  # torch and the readers, imported before

def peak_kb():  # this process's own high-water mark (ru_maxrss would count the parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

before = peak_kb()
start = time.monotonic()
try:
    ld = mixshard.loader(sys.argv[1], 64, order=sys.argv[2], num_workers=0, pin_memory=False)
    next(iter(ld))
    print("no error")
except mixshard.MixshardError as exc:
    print(type(exc).__name__, exc)
print(f"rss_kb={peak_kb() - before} seconds={time.monotonic() - start:.2f}")
"""


@pytest.mark.parametrize("order", ["block", "global"])
def test_billions_of_images_in_a_sparse_shard_fail_fast_in_little_memory(tmp_path, order):
    # 3,000 blocks: 196,608,000 images claimed by a 270 KB manifest. Before the check the
    # loader's permutation alone (8 bytes an image) took 1.5 GB before the first read.
    count, nbytes = lying_pack(tmp_path / "pack", 3000)
    assert os.path.getsize(tmp_path / "pack" / "index.json") < 300_000
    shard = tmp_path / "pack" / "shard-000000.tar"
    if os.stat(shard).st_blocks * 512 >= nbytes // 8:
        pytest.skip("this file system does not make truncated files sparse")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "pack"), order],
        capture_output=True, text=True, timeout=100, check=True,
    )  # fmt: skip
    first, last = done.stdout.strip().splitlines()
    assert first == (
        f"ManifestError index.json claims {count} images ({nbytes} bytes) in shard {shard}, but "
        "the file stores only 0 bytes of data (a sparse file: holes where images should be); "
        "restore the pack from a full copy or repack it"
    ), done.stdout + done.stderr
    grown_kb = int(last.split()[0].split("=")[1])
    seconds = float(last.split()[1].split("=")[1])
    assert grown_kb < 64 * 1024, last  # the manifest's own objects only
    assert seconds < 20, last


def test_a_shard_that_stores_its_bytes_is_read_as_before(tmp_path):
    # The same kind of manifest over a file written in full (zeros, no holes) passes the
    # check: only the first block's missing .npy header stops it.
    lying_pack(tmp_path / "pack", 2, sparse=False)
    with pytest.raises(ShardError, match="block 00000000: no .npy header where index.json says"):
        next(iter(ShardStream(tmp_path / "pack", 8, order="block")))


def test_a_shard_smaller_than_its_claim_is_refused_at_open(tmp_path):
    count, nbytes = lying_pack(tmp_path / "pack", 40)
    shard = tmp_path / "pack" / "shard-000000.tar"
    os.truncate(shard, 1 << 20)
    with pytest.raises(ShardError) as err:
        ShardStream(tmp_path / "pack", 8)
    assert str(err.value).startswith(
        f"shard {shard} is {1 << 20} bytes, index.json says {nbytes} (truncated or altered)"
    )


def test_a_manifest_cannot_claim_more_images_than_its_bytes_hold(tmp_path):
    # 65,536 one-pixel images need 458,752 bytes of pixels and labels: a shard of 100 KB that
    # claims them is inconsistent, whatever its offsets say.
    lying_pack(tmp_path / "pack", 1)
    doc = json.loads((tmp_path / "pack" / "index.json").read_text())
    doc["shards"][0]["bytes"] = 100 * 1024
    (tmp_path / "pack" / "index.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=r"shard-000000.tar: its blocks run past its 102400 "):
        ShardStream(tmp_path / "pack", 8)


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lies")
    make_tree(root / "src", classes=("a", "b"), per_class=6)
    mixshard.pack(root / "src", root / "pack", size=8, shard_size=6, block_size=3, workers=1)
    return root / "pack"


def test_a_store_object_of_another_size_than_index_json_says(small, s3_bucket, tmp_path):
    from mixshard.core.stores import Store

    url = s3_bucket + "/p"
    store = Store(url)
    store.upload(small / "shard-000000.tar", "shard-000000.tar")
    store.write("shard-000001.tar", b"\0" * 1024)  # a lie: index.json says more
    store.upload(small / "index.json", "index.json")
    claimed = json.loads((small / "index.json").read_text())["shards"][1]["bytes"]
    with pytest.raises(ManifestError) as err:
        ShardStream(url, 4, cache_dir=tmp_path / "c")
    assert str(err.value) == (
        f"index.json says shard {url}/shard-000001.tar is {claimed} bytes, the store's object "
        "is 1024; index.json does not describe this pack: repack it"
    )
    store.remove("shard-000001.tar")
    with pytest.raises(ShardError, match=f"shard {url}/shard-000001.tar is missing from the store"):
        ShardStream(url, 4, cache_dir=tmp_path / "c")

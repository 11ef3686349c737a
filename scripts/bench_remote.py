"""Reading a pack from S3 (moto's server on 127.0.0.1) through the block cache.

Starts moto's S3 server in a child process, packs a few thousand generated images, uploads the
pack, then reports:

* images/s of `mixshard.loader` over `s3://` with an empty cache (cold) and a full one (warm),
  against the same pack read from its local folder (median of 3 runs each);
* bytes fetched per epoch with a cache of 25%, 50% and 100% of the pack, evicting the block
  needed furthest in the future (mixshard's) and the least recently used one (LRU), over 3
  epochs (median of 3 runs), counted by the cache's fetch layer.

    flock /tmp/mixshard-bench.lock python scripts/bench_remote.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import OUT, free_port, machine, table, use_local_s3  # noqa: E402

import mixshard  # noqa: E402
from mixshard.core.stores import Store  # noqa: E402
from mixshard.reading.store import storepack  # noqa: E402

EPOCHS = 3
FRACTIONS = (0.25, 0.5, 1.0)


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = use_local_s3(port)
    import urllib.request

    for _ in range(200):
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    return proc, endpoint


def make_pack(root: Path, count: int, size: int = 32, block: int = 32) -> Path:
    from mixshard.testdata import make_jpeg_folder

    side = max(96, size)
    make_jpeg_folder(root / "src", count, width=side, height=side, classes=8, seed=1)
    out = root / "pack"
    shard = max(512, 16 * block)
    mixshard.pack(root / "src", out, size=size, block_size=block, shard_size=shard, workers=1)
    return out


def upload(folder: Path, url: str) -> None:
    import s3fs

    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(url[5:].split("/")[0])
    store = Store(url)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".tar"):
            store.upload(folder / name, name)
    store.upload(folder / "index.json", "index.json")


def epoch_rate(source: object, **kw: object) -> tuple[float, object]:
    """Images/s of one epoch of a fresh loader; the loader (closed)."""
    loader = mixshard.loader(source, 256, pin_memory=False, order="block", **kw)
    t0 = time.perf_counter()
    n = sum(len(b) for b in loader)
    rate = n / (time.perf_counter() - t0)
    loader.close()
    return rate, loader


def close_cache(loader: object) -> None:
    pack = loader.stream.pack  # type: ignore[attr-defined]
    if pack is not None and getattr(pack, "cache", None) is not None:
        pack.cache.close()  # lets its part folder go, for the next run to find


def raw_rate(pack: Path, url: str) -> float:
    """Images/s of the store alone: every block by one ranged read, FETCH_THREADS at once,
    nothing checked or kept (the ceiling of a cold epoch)."""
    from concurrent.futures import ThreadPoolExecutor

    from mixshard.reading.store.blockcache import FETCH_THREADS

    manifest = mixshard.core.manifest.Manifest.load(pack)
    spans = storepack.block_spans(manifest).tolist()
    names = [s.name for s in manifest.shards]
    store = Store(url)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(FETCH_THREADS) as pool:
        list(pool.map(lambda sp: store.read(names[sp[0]], sp[1], sp[2]), spans))
    return manifest.count / (time.perf_counter() - t0)


def rates(pack: Path, url: str, tmp: Path, runs: int) -> list[list[object]]:
    local, raw, cold, warm = [], [], [], []
    for r in range(runs):
        local.append(epoch_rate(pack)[0])
        raw.append(raw_rate(pack, url))
        cache = tmp / f"rate-{r}"
        rate, loader = epoch_rate(url, cache_dir=cache)
        cold.append(rate)
        close_cache(loader)
        rate, loader = epoch_rate(url, cache_dir=cache)
        warm.append(rate)
        close_cache(loader)
    base = statistics.median(local)
    rows = []
    for name, values in (
        ("local folder", local),
        ("s3:// ranged reads alone (no loader)", raw),
        ("s3://, cold", cold),
        ("s3://, warm", warm),
    ):
        med = statistics.median(values)
        rows.append(
            [name, f"{med:,.0f}", f"{med / base:.2f}", " / ".join(f"{v:,.0f}" for v in values)]
        )
    return rows


def fetched(url: str, tmp: Path, need: int, data: int, runs: int) -> list[list[object]]:
    """Bytes fetched per epoch over the pack's block bytes `data`, with caches of a fraction
    of `need` (the blocks' pages on disk)."""
    rows = []
    for policy in ("future", "lru"):
        storepack.POLICY = policy
        for frac in FRACTIONS:
            per_run = []
            for r in range(runs):
                limit = int(need * frac)
                loader = mixshard.loader(
                    url, 256, pin_memory=False, order="block", infinite=False,
                    cache_dir=tmp / f"f-{policy}-{frac}-{r}", cache_limit=limit,
                )  # fmt: skip
                last, row = 0, []
                for _ in range(EPOCHS):
                    sum(len(b) for b in loader)
                    cache = loader.stream.pack.cache  # type: ignore[union-attr]
                    row.append((cache.fetched_bytes - last) / data)
                    last = cache.fetched_bytes
                assert cache.peak <= limit, (cache.peak, limit)
                loader.close()
                close_cache(loader)
                per_run.append(row)
            med = [statistics.median(run[e] for run in per_run) for e in range(EPOCHS)]
            name = "furthest next use (mixshard)" if policy == "future" else "LRU"
            rows.append([name, f"{frac:.0%}", *(f"{m:.0%}" for m in med)])
            print(f"  {name}, cache {frac:.0%}: {rows[-1][2:]}", file=sys.stderr, flush=True)
    storepack.POLICY = "future"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a small pack, one run each")
    parser.add_argument("--runs", type=int, default=None, help="runs of each measurement")
    parser.add_argument("--fetched-only", action="store_true", help="only the bytes table")
    parser.add_argument("--images", type=int, default=4096, help="images in the pack")
    parser.add_argument("--size", type=int, default=32, help="image size of the pack (px)")
    parser.add_argument("--block-size", type=int, default=32, help="images per block")
    args = parser.parse_args()
    count, runs = (1024, 1) if args.quick else (args.images, 3)
    runs = args.runs or runs
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=OUT, prefix="remote-"))
    proc, endpoint = start_moto()
    try:
        pack = make_pack(tmp, count, args.size, args.block_size)
        url = "s3://bench-remote/pack"
        upload(pack, url)
        probe = storepack.StoreFiles(url, mixshard.core.manifest.Manifest.load(pack), tmp, None)
        need, data = probe.need, probe.block_bytes
        print(f"Command: python scripts/bench_remote.py {' '.join(sys.argv[1:])}")
        print(f"Machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
        print(f"Pack: {count} images of {args.size} px, blocks of {args.block_size} "
              f"({data / 1e6:.1f} MB of blocks, {need / 1e6:.1f} MB in the cache's pages), "
              f"moto S3 server on {endpoint}; loader batch 256, order='block'\n")  # fmt: skip
        if not args.fetched_only:
            rows = rates(pack, url, tmp, runs)
            print(table(["read from", "img/s (median)", "vs local", "runs"], rows), flush=True)
        print(f"\nBytes fetched per epoch, as a share of the pack (median of {runs}):\n")
        head = ["eviction", "cache", *(f"epoch {e + 1}" for e in range(EPOCHS))]
        print(table(head, fetched(url, tmp, need, data, runs)))
        print("\nGoal at 50%: the second epoch fetches <= 60% of the pack (LRU: nearly all).")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

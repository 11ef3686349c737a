"""Reading a pack from S3 (moto's server on 127.0.0.1) through the block cache.

Starts moto's S3 server in a child process, packs a few thousand generated images, uploads the
pack, then reports:

* images/s of `mixshard.loader` over `s3://` with an empty cache (cold) and a full one (warm),
  against the same pack read from its local folder (median of 3 runs each);
* bytes fetched per epoch with a cache of 25%, 50% and 100% of the pack, evicting the block
  needed furthest in the future (mixshard's) and the least recently used one (LRU), over 3
  epochs (median of 3 runs), counted by the cache's fetch layer.

`--small` sweeps instead packs of 8, 32, 128 and 512 blocks (16 images of 32 px each, 4
shards) with a cache of half the pack (in the cache's pages) and 0 or 2 DataLoader process
workers (each has half the limit), and prints the share of the pack fetched in each of 3
epochs, counted as ranged reads of the store between the epochs' ends (median of the runs):
what a user sees, where the benchmark's pack of 128 blocks of 98 KB, one process, hides the
read unit, the worker split and the block count. Reads ahead (the workers' batches, the cache's
fetches ahead) move some of an epoch's fetches into the one before it: the mean of epochs 2-3
is the steadier figure.

    flock /tmp/mixshard-bench.lock python scripts/bench_remote.py [--quick] [--small]
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
SMALL_BLOCKS = (8, 32, 128, 512)  # blocks in the packs of the --small sweep
SMALL_WORKERS = (0, 2)


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


def make_pack(
    root: Path, count: int, size: int = 32, block: int = 32, shard: int | None = None
) -> Path:
    from mixshard.testdata import make_jpeg_folder

    side = max(96, size)
    make_jpeg_folder(root / "src", count, width=side, height=side, classes=8, seed=1)
    out = root / "pack"
    shard = shard or max(512, 16 * block)
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
    if pack is not None and getattr(pack.files, "cache", None) is not None:
        pack.files.cache.close()  # lets its part folder go, for the next run to find


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
                    cache = loader.stream.pack.files.cache  # type: ignore[union-attr]
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


class ReadLog:
    """Bytes of the ranged reads of the store, in this process and the DataLoader workers it
    forks (`Store.read` patched while the log is open; each read appends a line to a file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._real = Store.read

        def read(store: Store, name: str, start: int | None = None, end: int | None = None):
            data = self._real(store, name, start, end)
            if start is not None:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, b"%d\n" % len(data))
                finally:
                    os.close(fd)
            return data

        Store.read = read  # type: ignore[method-assign]

    def total(self) -> int:
        try:
            return sum(int(line) for line in self.path.read_text().split())
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        Store.read = self._real  # type: ignore[method-assign]


def small_epochs(url: str, cache: Path, limit: int, workers: int, batch: int, log: ReadLog):
    """Bytes fetched in each of EPOCHS epochs of a fresh loader (store reads between the
    epochs' ends)."""
    kw: dict = {"num_workers": workers, "workers": "process"} if workers else {}
    loader = mixshard.loader(
        url, batch, pin_memory=False, order="block", infinite=False,
        cache_dir=cache, cache_limit=limit, **kw,
    )  # fmt: skip
    last, out = log.total(), []
    for _ in range(EPOCHS):
        sum(len(b) for b in loader)
        now = log.total()
        out.append(now - last)
        last = now
    loader.close()
    if not workers:
        close_cache(loader)
    return out


def small(tmp: Path, runs: int, size: int, block: int, batch: int) -> list[list[object]]:
    """The --small sweep: per pack size and worker count, the share of the pack fetched per
    epoch with a cache of half the pack."""
    log = ReadLog(tmp / "reads.log")
    rows = []
    try:
        for blocks in SMALL_BLOCKS:
            count = blocks * block
            root = tmp / f"small-{blocks}"
            pack = make_pack(root, count, size, block, shard=count // 4)
            url = f"s3://bench-small-{blocks}/pack"
            upload(pack, url)
            manifest = mixshard.core.manifest.Manifest.load(pack)
            probe = storepack.StoreFiles(url, manifest, root / "probe", None)
            limit, data = probe.need // 2, probe.block_bytes
            kept = int(limit / (probe.need / blocks))  # blocks the cache holds (one process)
            for workers in SMALL_WORKERS:
                per_run = [
                    small_epochs(url, root / f"c{workers}-{r}", limit, workers, batch, log)
                    for r in range(runs)
                ]
                med = [statistics.median(run[e] for run in per_run) / data for e in range(EPOCHS)]
                share = f"{kept // max(1, workers)}" + (f" x {workers}" if workers else "")
                later = statistics.median(sum(run[1:]) / (EPOCHS - 1) for run in per_run) / data
                rows.append([blocks, workers, share, *(f"{m:.0%}" for m in med), f"{later:.0%}"])
                print(f"  {rows[-1]}", file=sys.stderr, flush=True)
            shutil.rmtree(root, ignore_errors=True)
    finally:
        log.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a small pack, one run each")
    parser.add_argument("--runs", type=int, default=None, help="runs of each measurement")
    parser.add_argument("--fetched-only", action="store_true", help="only the bytes table")
    parser.add_argument("--images", type=int, default=4096, help="images in the pack")
    parser.add_argument("--size", type=int, default=32, help="image size of the pack (px)")
    parser.add_argument("--block-size", type=int, default=None, help="images per block")
    parser.add_argument(
        "--small", action="store_true", help="the sweep over small packs, 0 and 2 workers"
    )
    args = parser.parse_args()
    if args.small:
        return main_small(args)
    args.block_size = args.block_size or 32
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


def main_small(args: argparse.Namespace) -> None:
    runs = args.runs or (1 if args.quick else 3)
    block, batch = args.block_size or 16, 32
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=OUT, prefix="remote-small-"))
    proc, endpoint = start_moto()
    try:
        print(f"Command: python scripts/bench_remote.py {' '.join(sys.argv[1:])}")
        print(f"Machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
        print(f"Packs: blocks of {block} images of {args.size} px in 4 shards, moto S3 server on "
              f"{endpoint}; loader batch {batch}, order='block' (window 64, run 4); a cache of "
              "half the pack's pages (split among process workers)\n")  # fmt: skip
        rows = small(tmp, runs, args.size, block, batch)
        head = [
            "blocks",
            "workers",
            "cache (blocks)",
            *(f"epoch {e + 1}" for e in range(EPOCHS)),
            "epochs 2-3 (mean)",
        ]
        print(f"Bytes fetched per epoch, as a share of the pack (median of {runs}):\n")
        print(table(head, rows))
        print("\nGoal: epochs 2 and 3 fetch <= 60% of the pack (Belady with a known future: 50%).")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Bytes read by the process tree over block-order epochs, by the number of worker processes.

Each cell runs in a fresh process with `MIXSHARD_MMAP=0` (reads, not copies out of mappings,
so the kernel counts them) and gives `read_chars` (`/proc/self/io` `rchar`: every byte a
`read`/`pread`/`preadv` returned, to any file or pipe) of that process over the epochs, read
once its DataLoader workers are joined: the kernel adds a reaped child's counts to its
parent's, so this is the whole tree. Beside it, the bytes read from the shard files alone
(counted in `PackReader`'s two read paths, in shared memory the forked workers inherit); the
rest is imports, pipes and `/proc`. Two ways of reading an epoch:

* `stream`: `DataLoader(ShardStream(...), num_workers=w)`, a finite stream: the workers stop
  at the end of the epoch;
* `loader`: `mixshard.loader(..., workers="process")`, closed after the epochs: its workers
  never stop at an epoch's end (epochs do not respawn them), so they read ahead into the next
  one, whose bytes count when the loader is closed there (once those reads have landed: how
  many had when it is closed at once is a race).

Each cell is run for 1 and for `--epochs` epochs: the difference over the epochs between is
what an epoch costs once running; what one epoch reads beyond that is paid once per loader.

    python scripts/bench_worker_reads.py [--images 3000 30000] [--pack PACK] [--batch 128]
    python scripts/bench_worker_reads.py --quick
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

from benchlib import OUT, machine, run_json, table

MODES = ("stream", "loader")


def make_pack(images: int) -> Path:
    """A pack of `images` generated 24 px noise PNGs stored at 84 px (made once, in OUT)."""
    import numpy as np
    from PIL import Image

    import mixshard

    pack = OUT / f"worker-reads-{images}"
    if (pack / "index.json").exists():
        return pack
    src = OUT / "src" / f"noise24-{images}"
    rng = np.random.default_rng(0)
    for i in range(images):
        path = src / f"c{i % 10}" / f"{i:06d}.png"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (24, 24, 3), np.uint8)).save(path)
    mixshard.pack(src, pack, size=84, workers=2)
    return pack


def rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar"))


def count_shard_reads():
    """A counter (shared with forked workers) of the bytes `PackReader` reads from shards."""
    from mixshard.reading.pack import reader as pack_reader

    count = multiprocessing.Value("q", 0)
    read_iov, pread = pack_reader.read_iov, pack_reader.PackReader._pread

    def counted_iov(fd, iov, offset):
        got = read_iov(fd, iov, offset)
        with count.get_lock():
            count.value += got
        return got

    def counted_pread(self, slot, fd, buf, offset):
        pread(self, slot, fd, buf, offset)
        with count.get_lock():
            count.value += len(buf)

    pack_reader.read_iov, pack_reader.PackReader._pread = counted_iov, counted_pread
    return count


def settle(count, quiet: float = 0.5, most: float = 20.0) -> None:
    """Wait until no shard byte has been read for `quiet` seconds (at most `most`): the reads
    ahead a loader's workers started before the epoch ended have all landed, so the figure
    does not depend on how soon after its last batch the loader is closed."""
    last, still, end = -1, time.monotonic(), time.monotonic() + most
    while time.monotonic() < end:
        if count.value != last:
            last, still = count.value, time.monotonic()
        elif time.monotonic() - still >= quiet:
            return
        time.sleep(0.05)


def cell(pack: str, mode: str, workers: int, batch: int, window: int, epochs: int) -> dict:
    """One cell, in this (fresh) process: read_chars and shard bytes over `epochs` epochs."""
    from torch.utils.data import DataLoader

    import mixshard

    count = count_shard_reads()
    kw = {"order": "block", "window": window, "seed": 0}
    if mode == "loader":
        source = mixshard.loader(pack, batch, num_workers=workers, workers="process", **kw)
    else:
        stream = mixshard.ShardStream(pack, batch, **kw)
        source = DataLoader(stream, batch_size=None, num_workers=workers)
    before, images = rchar(), 0
    for epoch in range(epochs):
        if mode == "stream":
            stream.set_epoch(epoch)  # (the workers do not move the stream on)
        for batch_images in source:
            images += len(batch_images)
    if mode == "loader":
        settle(count)
        source.close()
    del source, batch_images
    gc.collect()
    multiprocessing.active_children()  # every worker joined: its counts are ours now
    return {"read_chars": rchar() - before, "shard": count.value, "images": images}


def measure(pack: Path, mode: str, workers: int, args: argparse.Namespace) -> dict:
    """The cell for 1 epoch and for `args.epochs`, each in a fresh process."""
    out = {}
    for epochs in (1, args.epochs):
        child = [__file__, "--cell", str(pack), mode, str(workers), str(epochs)]
        child += ["--batch", str(args.batch), "--window", str(args.window)]
        out[epochs] = run_json(child)
    return out


def rows_for(pack_bytes: int, got: dict, args: argparse.Namespace) -> list[list[object]]:
    """The table's rows: each mode, each worker count (`got`: the cells by both)."""
    rows = []
    for mode in MODES:
        zero = got[mode, args.workers[0]]
        for w in args.workers:
            one, many = got[mode, w][1], got[mode, w][args.epochs]
            epoch = got["stream", w][1]["shard"]  # the same blocks: no read-ahead there
            further = (many["read_chars"] - one["read_chars"]) / (args.epochs - 1)
            further_zero = (zero[args.epochs]["read_chars"] - zero[1]["read_chars"]) / (
                args.epochs - 1
            )
            rows.append(
                [
                    mode,
                    w,
                    f"{pack_bytes:,}",
                    f"{one['read_chars']:,} ({one['read_chars'] / pack_bytes:.3f}x)",
                    f"{one['read_chars'] / zero[1]['read_chars']:.3f}x",
                    f"{epoch / pack_bytes:.4f}x",
                    f"{(one['shard'] - epoch) / pack_bytes:.3f}x",
                    f"{(one['read_chars'] - one['shard']) / 1e6:.2f} MB",
                    f"{further / pack_bytes:.4f}x ({further / further_zero:.3f}x)",
                ]
            )
    return rows


def summary(got: dict, args: argparse.Namespace) -> str:
    """What a worker process costs beside the pack, from the loader's cells with the most."""
    w = args.workers[-1]
    if w == 0:
        return ""
    other = [got["loader", n][1]["read_chars"] - got["loader", n][1]["shard"] for n in (0, w)]
    ahead = got["loader", w][1]["shard"] - got["stream", w][1]["shard"]
    return (
        f"Per worker process (loader, {w} workers): {(other[1] - other[0]) / w / 1e6:.2f} MB "
        "read besides the shards (imports the forked worker makes, pipes), and "
        f"{ahead / w / 1e6:.1f} MB of shards read ahead into the next epoch, unused once the "
        "loader is closed after one epoch.\n"
    )


HEADERS = [
    "mode",
    "workers",
    "pack bytes",
    "read_chars, 1 epoch",
    "ratio to 0 workers",
    "shard bytes of the epoch",
    "shard bytes read ahead",
    "other bytes (imports, pipes, /proc)",
    "read_chars a further epoch (ratio to 0 workers)",
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, nargs="+", default=[3000, 30000])
    p.add_argument("--pack", type=Path, help="measure this pack instead of generated ones")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    p.add_argument("--quick", action="store_true", help="600 images, 0 and 2 workers")
    p.add_argument("--cell", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cell:
        pack, mode, workers, epochs = args.cell
        print(json.dumps(cell(pack, mode, int(workers), args.batch, args.window, int(epochs))))
        return
    args.workers = sorted({0, *args.workers})  # ratios are to 0 workers
    os.environ["MIXSHARD_MMAP"] = "0"  # the cells' reads are then counted by the kernel
    if args.quick:
        args.images, args.workers, args.epochs, args.batch = [600], [0, 2], 2, 32
    packs = [args.pack] if args.pack else [make_pack(n) for n in args.images]
    print(f"Command: python scripts/bench_worker_reads.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"Machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"Block order, window={args.window}, batch {args.batch}, MIXSHARD_MMAP=0.\n")
    for pack in packs:
        print(f"{pack.name}:\n")
        pack_bytes = sum(p.stat().st_size for p in pack.glob("shard-*.tar"))
        got = {(m, w): measure(pack, m, w, args) for m in MODES for w in args.workers}
        print(table(HEADERS, rows_for(pack_bytes, got, args)) + "\n")
        print(summary(got, args))


if __name__ == "__main__":
    main()

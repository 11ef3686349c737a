"""Benchmark getting shuffled batches of 84 px images into the training process, in one run.

Same data for all three (generated 256 px JPEGs, bench-out/src):
  (a) the reference pipeline of the seed question: torchvision ImageFolder + RandomResizedCrop(84)
      + RandomHorizontalFlip + ToTensor in a DataLoader (shuffle=True), iterator re-created at
      the end of each epoch as the reference's `_get_data_batch` does;
  (b) plain webdataset: one 84 px uint8 `.npy` per sample, shuffle buffer, `batched(256)`;
  (c) `mixshard.loader` on the same images packed at 84 px (`infinite=True`).
Each cell: images/s over a fixed number of batches after one warm-up batch, median of `--runs`.
`num_workers=0` is one process (= per core); 2 workers use both cores of this machine.
Then RSS of the process while `mixshard` streams 5 million images in infinite mode.

    python scripts/bench_stream.py [--runs 5] [--quick] [--plot]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from bench_pack import make_sources
from benchlib import OUT, bar_chart, fmt_rate, machine, reference_batches, table

import mixshard
from mixshard.writing.scanning import scan

BATCH = 256


def rss_mb(pid: str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reference_iter(src: Path, workers: int):
    return reference_batches(src, BATCH, workers)


def make_wds(src: Path) -> list[str]:
    """One sample per image: the 84 px pixels mixshard stores, as `.npy`, 1000 per shard."""
    import webdataset as wds

    folder = OUT / "wds-84"
    pack = OUT / "stream-pack"
    if not (folder / ".complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        images, labels = [], []
        stream = mixshard.ShardStream(pack, 1, shuffle=False, labels=True)
        for img, label in stream:
            images.append(img[0].numpy())
            labels.append(int(label[0]))
        with wds.ShardWriter(str(folder / "wds-%06d.tar"), maxcount=1000, verbose=0) as sink:
            for i, (img, label) in enumerate(zip(images, labels)):
                sink.write({"__key__": f"{i:08d}", "npy": img, "cls": label})
        (folder / ".complete").touch()
    return sorted(str(p) for p in folder.glob("wds-*.tar"))


def wds_iter(urls: list[str], workers: int):
    import webdataset as wds

    ds = (
        wds.WebDataset(urls, resampled=True, shardshuffle=False)
        .shuffle(1000)
        .decode()
        .to_tuple("npy", "cls")
        .batched(BATCH)
    )
    loader = wds.WebLoader(ds, batch_size=None, num_workers=workers)
    for images, _ in loader:
        yield torch.as_tensor(images)


def mixshard_iter(pack: Path, workers: int):
    yield from mixshard.loader(pack, BATCH, num_workers=workers, pin_memory=False, infinite=True)


def rate_of(make, batches: int, runs: int) -> float:
    """Median img/s over `batches` batches, after a warm-up batch that is not timed."""
    rates = []
    for _ in range(runs):
        it = make()
        next(it)  # warm-up: worker start, first epoch set-up
        n = 0
        t0 = time.perf_counter()
        for _ in range(batches):
            n += len(next(it))
        rates.append(n / (time.perf_counter() - t0))
        it.close()
    return statistics.median(rates)


def rss_run(pack: Path, images: int) -> tuple[float, float, float]:
    """In a fresh process (so earlier cells do not count): RSS after the first epoch and
    after `images` images of an infinite stream, and the rate in between."""
    here = str(Path(__file__).parent)
    code = (
        f"import sys, json; sys.path.insert(0, {here!r}); import bench_stream as b; "
        f"print(json.dumps(b._rss_inner({str(pack)!r}, {images})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return tuple(json.loads(out.strip().splitlines()[-1]))


def _rss_inner(pack: str, images: int) -> tuple[float, float, float]:
    stream = mixshard.ShardStream(pack, BATCH, infinite=True)
    per_epoch = stream.batches_per_epoch
    it = iter(stream)
    for _ in range(per_epoch):
        next(it)
    first = rss_mb()
    t0 = time.perf_counter()
    for _ in range(images // BATCH - per_epoch):
        next(it)
    return first, rss_mb(), images / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=3000, help="images in the dataset")
    parser.add_argument("--rss-images", type=int, default=5_000_000)
    parser.add_argument("--quick", action="store_true", help="1 run, fewer batches")
    parser.add_argument("--plot", action="store_true", help="write bench-out/bench_stream.png")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.rss_images = 1, 200_000
    src = make_sources(args.count)["256 px (Places365-like)"]
    pack = OUT / "stream-pack"
    if not (pack / "index.json").exists() or mixshard.Manifest.load(pack).count != len(
        scan(src).items
    ):
        mixshard.pack(src, pack, overwrite=True)
    urls = make_wds(src)
    scale = 0.2 if args.quick else 1.0
    cases = [
        (
            "(a) reference ImageFolder + RandomResizedCrop",
            reference_iter,
            src,
            max(2, int(24 * scale)),
        ),
        ("(b) plain webdataset, 1 image per sample", wds_iter, urls, max(5, int(60 * scale))),
        ("(c) mixshard.loader", mixshard_iter, pack, int(2000 * scale)),
    ]
    rates: dict[tuple[str, int], float] = {}
    for name, fn, data, batches in cases:
        for workers in (0, 2):
            rates[name, workers] = rate_of(
                lambda f=fn, d=data, w=workers: f(d, w), batches, args.runs
            )
            print(
                f"  {name}, {workers} workers: {fmt_rate(rates[name, workers])} img/s",
                file=sys.stderr,
            )
    ref = {w: rates[cases[0][0], w] for w in (0, 2)}
    wds_rate = {w: rates[cases[1][0], w] for w in (0, 2)}
    rows = []
    for name, *_ in cases:
        for workers in (0, 2):
            r = rates[name, workers]
            rows.append(
                [
                    name,
                    workers,
                    fmt_rate(r),
                    fmt_rate(r / max(workers, 1)) if workers else fmt_rate(r),
                    f"{r / ref[workers]:,.1f}x",
                    f"{r / wds_rate[workers]:,.1f}x",
                ]
            )
    print(
        f"Shuffled uint8 batches of {BATCH} into the training process; {args.count} images "
        f"(256 px JPEG sources, 84 px output); median of {args.runs} runs; {machine()}\n"
    )
    print(table(["pipeline", "num_workers", "img/s", "img/s per core", "vs (a)", "vs (b)"], rows))
    first, last, rate = rss_run(pack, args.rss_images)
    print(
        f"\nRSS of a fresh process running ShardStream(infinite=True): {first:.0f} MB after the "
        f"first epoch, {last:.0f} MB after {args.rss_images:,} images ({fmt_rate(rate)} img/s)"
    )
    if args.plot:
        path = OUT / "bench_stream.png"
        labels = [f"{n.split(' ', 1)[1]}, {w} workers" for n, *_ in cases for w in (0, 2)]
        bar_chart(
            path,
            f"batches of {BATCH} x 84 px into the training process (higher is better)",
            labels,
            [rates[n, w] for n, *_ in cases for w in (0, 2)],
            "images/s",
        )
        print(f"\nchart: {path}")


if __name__ == "__main__":
    main()

"""Benchmark getting shuffled batches of 84 px images into the training process, in one run.

Same data for all (generated 256 px JPEGs, bench-out/src), in the page cache:
  (a) the reference pipeline (the random-overlay loader of DMControl-GB and its successors):
      torchvision ImageFolder + RandomResizedCrop(84) + RandomHorizontalFlip + ToTensor in a
      DataLoader (shuffle=True), iterator re-created at the end of each epoch as the
      reference's `_get_data_batch` does;
  (b) plain webdataset: one 84 px uint8 `.npy` per sample, shuffle buffer, `batched(256)`;
  (c) `mixshard.loader` on the same images packed at 84 px (`infinite=True`), in global and
      in block order.
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
import sys
from pathlib import Path

import torch
from benchlib import (
    OUT,
    bar_chart,
    fmt_rate,
    items_rate,
    machine,
    make_sources,
    reference_batches,
    rss_mb,
    run_json,
    table,
)

import mixshard
from mixshard.writing.sources.scanning import scan

BATCH = 256


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


def mixshard_iter(order: str):
    def make(pack: Path, workers: int):
        loader = mixshard.loader(
            pack, BATCH, num_workers=workers, pin_memory=False, infinite=True, order=order
        )
        yield from loader

    return make


def rate_of(make, batches: int, runs: int) -> float:
    """Median img/s over `batches` batches, after a warm-up batch that is not timed."""
    rates = []
    for _ in range(runs):
        it = make()
        next(it)  # warm-up: worker start, first epoch set-up
        rates.append(items_rate(it, batches))
        it.close()
    return statistics.median(rates)


def rss_cell(pack: Path, images: int) -> dict:
    """In this (fresh) process: RSS after the first epoch and after `images` images of an
    infinite stream, and the rate in between."""
    stream = mixshard.ShardStream(pack, BATCH, infinite=True)
    per_epoch = stream.batches_per_epoch
    it = iter(stream)
    for _ in range(per_epoch):
        next(it)
    first = rss_mb()
    rate = items_rate(it, images // BATCH - per_epoch)
    return {"first": first, "last": rss_mb(), "rate": rate}


def cases(src: Path, pack: Path, urls: list[str], scale: float) -> list[tuple]:
    """(name, batch iterator maker, data, timed batches) of each pipeline."""
    return [
        (
            "(a) reference ImageFolder + RandomResizedCrop",
            reference_iter,
            src,
            max(2, int(24 * scale)),
        ),
        ("(b) plain webdataset, 1 image per sample", wds_iter, urls, max(5, int(60 * scale))),
        ("(c) mixshard.loader, order=global", mixshard_iter("global"), pack, int(2000 * scale)),
        ("(c) mixshard.loader, order=block", mixshard_iter("block"), pack, int(2000 * scale)),
    ]


def rows_of(rates: dict, names: list[str], workers_tried: tuple[int, ...]) -> list[list]:
    ref = {w: rates[names[0], w] for w in workers_tried}
    wds_rate = {w: rates[names[1], w] for w in workers_tried}
    rows = []
    for name in names:
        for workers in workers_tried:
            r = rates[name, workers]
            per_core = fmt_rate(r / max(workers, 1))
            rows.append(
                [
                    name,
                    workers,
                    fmt_rate(r),
                    per_core,
                    f"{r / ref[workers]:,.1f}x",
                    f"{r / wds_rate[workers]:,.1f}x",
                ]
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=3000, help="images in the dataset")
    parser.add_argument("--rss-images", type=int, default=5_000_000)
    parser.add_argument("--quick", action="store_true", help="1 run, fewer batches")
    parser.add_argument("--plot", action="store_true", help="write bench-out/bench_stream.png")
    parser.add_argument("--rss-cell", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_cell:
        print(json.dumps(rss_cell(args.rss_cell, args.rss_images)))
        return
    workers = (0, 2)
    if args.quick:
        args.runs, args.count, args.rss_images, workers = 1, 300, 2_000, (0,)
    places = "256 px (Places365-like)"
    src = make_sources(args.count, places)[places]
    pack = OUT / "stream-pack"
    if not (pack / "index.json").exists() or mixshard.Manifest.load(pack).count != len(
        scan(src).items
    ):
        mixshard.pack(src, pack, overwrite=True)
    todo = cases(src, pack, make_wds(src), 0.01 if args.quick else 1.0)
    rates: dict[tuple[str, int], float] = {}
    for name, fn, data, batches in todo:
        for w in workers:
            rate = rate_of(lambda f=fn, d=data, w=w: f(d, w), max(2, batches), args.runs)
            rates[name, w] = rate
            print(f"  {name}, {w} workers: {fmt_rate(rate)} img/s", file=sys.stderr)
    print(
        f"Shuffled uint8 batches of {BATCH} into the training process; {args.count} images "
        f"(256 px JPEG sources, 84 px output, in the page cache); median of {args.runs} runs; "
        f"{machine()}\n"
    )
    headers = ["pipeline", "num_workers", "img/s", "img/s per core", "vs (a)", "vs (b)"]
    print(table(headers, rows_of(rates, [t[0] for t in todo], workers)))
    rss = run_json([__file__, "--rss-cell", str(pack), "--rss-images", str(args.rss_images)])
    print(
        f"\nRSS of a fresh process running ShardStream(infinite=True): {rss['first']:.0f} MB "
        f"after the first epoch, {rss['last']:.0f} MB after {args.rss_images:,} images "
        f"({fmt_rate(rss['rate'])} img/s)"
    )
    if args.plot:
        path = OUT / "bench_stream.png"
        labels = [f"{n.split(' ', 1)[1]}, {w} workers" for n, *_ in todo for w in workers]
        values = [rates[n, w] for n, *_ in todo for w in workers]
        title = f"batches of {BATCH} x 84 px into the training process (higher is better)"
        bar_chart(path, title, labels, values, "images/s")
        print(f"\nchart: {path}")


if __name__ == "__main__":
    main()

"""Benchmark `mixshard pack` against a naive one-process webdataset packer, in one run.

Sources (generated once into bench-out/src, seeded): 256x256 JPEGs like Places365-standard and
640x480 JPEGs like COCO. The baseline opens each image with PIL, converts it to RGB, resizes it
to 84x84 and writes one webdataset sample (`.npy`) per image with `webdataset.TarWriter`.
mixshard packs the same folder with 1 and 2 worker processes. Reported: median img/s of
`--runs` runs, img/s per core (workers = cores; the baseline is one core), ratio to the baseline.

    python scripts/bench_pack.py [--runs 3] [--quick] [--plot]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from benchlib import OUT, bar_chart, fmt_rate, machine, median_rate, table
from PIL import Image

from mixshard import pack
from mixshard.testdata import make_jpeg_folder
from mixshard.writing.image import load_image
from mixshard.writing.scanning import scan

SOURCES = {"256 px (Places365-like)": (256, 256), "640x480 (COCO-like)": (640, 480)}


def make_sources(count: int) -> dict[str, Path]:
    paths = {}
    for name, (w, h) in SOURCES.items():
        folder = OUT / "src" / f"{w}x{h}-{count}"
        if not (folder / ".complete").exists():
            shutil.rmtree(folder, ignore_errors=True)
            print(f"generating {count} {w}x{h} JPEGs in {folder} ...", file=sys.stderr)
            make_jpeg_folder(folder, count, width=w, height=h, classes=8, seed=1)
            (folder / ".complete").touch()
        paths[name] = folder
    return paths


def baseline(src: Path, out: Path) -> int:
    """The naive packer: PIL open -> convert -> resize -> one webdataset sample per image."""
    import webdataset as wds

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    items = scan(src).items
    with wds.TarWriter(str(out / "baseline-000000.tar")) as sink:
        for i, (rel, label) in enumerate(items):
            with Image.open(src / rel) as img:
                arr = np.asarray(img.convert("RGB").resize((84, 84), Image.Resampling.BILINEAR))
            sink.write({"__key__": f"{i:08d}", "npy": arr, "cls": label})
    return len(items)


def _decode_all(src: str, keys: list[str]) -> int:
    for key in keys:
        load_image(Path(src) / key, 84)
    return len(keys)


def decode_only(src: Path, processes: int) -> int:
    """The machine's own scaling ceiling: the same decode loop in independent processes, no
    pipeline, no writing. What 2 processes reach here bounds what 2 workers can reach."""
    keys = [p for p, _ in scan(src).items]
    if processes == 1:
        return _decode_all(str(src), keys)
    with ProcessPoolExecutor(processes, mp_context=get_context("fork")) as ex:
        parts = [keys[i::processes] for i in range(processes)]
        return sum(ex.map(_decode_all, [str(src)] * processes, parts))


def mixshard_pack(src: Path, out: Path, workers: int) -> int:
    result = pack(src, out, workers=workers, overwrite=True)
    return result.manifest.count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (median reported)")
    parser.add_argument("--count", type=int, default=3000, help="images per source")
    parser.add_argument("--quick", action="store_true", help="500 images, 1 run")
    parser.add_argument("--plot", action="store_true", help="write bench-out/bench_pack.png")
    args = parser.parse_args()
    if args.quick:
        args.count, args.runs = 500, 1
    sources = make_sources(args.count)
    rows, labels, values, scaling = [], [], [], []
    for name, src in sources.items():
        baseline(src, OUT / "pack-baseline")  # warm the page cache
        base, _ = median_rate(lambda s=src: baseline(s, OUT / "pack-baseline"), args.runs)
        rows.append([name, "naive PIL + webdataset", 1, fmt_rate(base), fmt_rate(base), "1.00x"])
        labels.append(f"{name}: naive")
        values.append(base)
        packed = {}
        for workers in (1, 2):
            rate, _ = median_rate(
                lambda s=src, w=workers: mixshard_pack(s, OUT / "pack-mixshard", w), args.runs
            )
            packed[workers] = rate
            per_core = rate / workers
            rows.append(
                [
                    name,
                    "mixshard pack",
                    workers,
                    fmt_rate(rate),
                    fmt_rate(per_core),
                    f"{per_core / base:.2f}x",
                ]
            )
            labels.append(f"{name}: mixshard, {workers} worker{'s' if workers > 1 else ''}")
            values.append(per_core)
        one, _ = median_rate(lambda s=src: decode_only(s, 1), args.runs)
        two, _ = median_rate(lambda s=src: decode_only(s, 2), args.runs)
        scaling.append(
            [
                name,
                f"{two / one:.2f}x",
                f"{packed[2] / packed[1]:.2f}x",
                f"{(packed[2] / packed[1]) / (two / one):.0%}",
            ]
        )
    print(
        f"mixshard pack vs naive packer; {args.count} images per source, median of "
        f"{args.runs} runs; {machine()}\n"
    )
    print(
        table(
            ["source", "packer", "workers", "img/s", "img/s per core", "per-core ratio to naive"],
            rows,
        )
    )
    print(
        "\nScaling from 1 to 2 workers, against this machine's ceiling (the decode loop alone "
        "in 2 independent processes vs 1):\n"
    )
    print(
        table(
            [
                "source",
                "ceiling: decode-only 2 procs / 1",
                "mixshard 2 workers / 1",
                "share of ceiling",
            ],
            scaling,
        )
    )
    if args.plot:
        path = OUT / "bench_pack.png"
        bar_chart(
            path, "pack throughput per core (higher is better)", labels, values, "images/s per core"
        )
        print(f"\nchart: {path}")


if __name__ == "__main__":
    main()

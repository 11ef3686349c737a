"""Benchmark `mixshard pack` against a naive one-process webdataset packer, in one run.

Sources (generated once into bench-out/src, seeded): 256x256 JPEGs like Places365-standard and
640x480 JPEGs like COCO. The baseline opens each image with PIL, converts it to RGB, resizes it
to 84x84 and writes one webdataset sample (`.npy`) per image with `webdataset.TarWriter`.
mixshard packs the same folder with 1 and 2 worker processes. Reported: median img/s of
`--runs` runs, img/s per core (workers = cores; the baseline is one core), ratio to the baseline.

`--ray` instead compares, on 10,000 256 px JPEGs (`--count`), the local packer (2 workers)
with `--ray` on a local 2-CPU Ray instance (started once, not timed: a cluster is already
running) and with two job-array parts run side by side plus `--finish`, all with 250 images
per shard (Ray and parts run one shard per task).

    python scripts/bench_pack.py [--runs 3] [--quick] [--plot] [--ray]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from benchlib import OUT, bar_chart, fmt_rate, machine, make_sources, median_rate, table
from PIL import Image

from mixshard import pack
from mixshard.writing.image import load_image
from mixshard.writing.scanning import scan


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


def mixshard_pack(src: Path, out: Path, workers: int, **kwargs) -> int:
    result = pack(src, out, workers=workers, overwrite=True, **kwargs)
    return result.manifest.count


def source_rows(name: str, src: Path, runs: int) -> tuple[list, list, list]:
    """Table rows, chart bars and the scaling row of one source."""
    baseline(src, OUT / "pack-baseline")  # warm the page cache
    base, _ = median_rate(lambda: baseline(src, OUT / "pack-baseline"), runs)
    rows = [[name, "naive PIL + webdataset", 1, fmt_rate(base), fmt_rate(base), "1.00x"]]
    bars = [(f"{name}: naive", base)]
    packed = {}
    for workers in (1, 2):
        rate, _ = median_rate(lambda w=workers: mixshard_pack(src, OUT / "pack-ms", w), runs)
        packed[workers] = rate
        per_core = rate / workers
        ratio = f"{per_core / base:.2f}x"
        rows.append([name, "mixshard pack", workers, fmt_rate(rate), fmt_rate(per_core), ratio])
        bars.append((f"{name}: mixshard, {workers} worker(s)", per_core))
    one, _ = median_rate(lambda: decode_only(src, 1), runs)
    two, _ = median_rate(lambda: decode_only(src, 2), runs)
    gain = packed[2] / packed[1]
    scaling = [name, f"{two / one:.2f}x", f"{gain:.2f}x", f"{gain / (two / one):.0%}"]
    return rows, bars, scaling


def local_benchmark(count: int, runs: int, plot: bool) -> None:
    rows, bars, scaling = [], [], []
    for name, src in make_sources(count).items():
        r, b, s = source_rows(name, src, runs)
        rows += r
        bars += b
        scaling.append(s)
    print(
        f"mixshard pack vs naive packer; {count} images per source, median of {runs} runs; "
        f"{machine()}\n"
    )
    headers = ["source", "packer", "workers", "img/s", "img/s per core", "per-core ratio to naive"]
    print(table(headers, rows))
    print(
        "\nScaling from 1 to 2 workers, against this machine's ceiling (the decode loop alone "
        "in 2 independent processes vs 1):\n"
    )
    headers = [
        "source",
        "ceiling: decode-only 2 procs / 1",
        "mixshard 2 workers / 1",
        "share of ceiling",
    ]
    print(table(headers, scaling))
    if plot:
        path = OUT / "bench_pack.png"
        labels, values = zip(*bars)
        bar_chart(
            path,
            "pack throughput per core (higher is better)",
            list(labels),
            list(values),
            "images/s per core",
        )
        print(f"\nchart: {path}")


def parts_pack(src: Path, out: Path, parts: int, shard_size: int) -> int:
    """`parts` job-array parts side by side (one process each), then `--finish`."""
    shutil.rmtree(out, ignore_errors=True)
    common = [str(src), str(out), "--shard-size", str(shard_size), "-q"]
    run = [sys.executable, "-m", "mixshard", "pack", *common]
    procs = [
        subprocess.Popen([*run, "--part", f"{k}/{parts}", "--workers", "1"]) for k in range(parts)
    ]
    if any(p.wait() for p in procs):
        raise RuntimeError("a part failed")
    subprocess.run([*run, "--finish"], check=True, capture_output=True)
    return len(scan(src).items)


def ray_benchmark(count: int, runs: int) -> None:
    import ray

    places = "256 px (Places365-like)"
    src = make_sources(count, places)[places]
    shard_size = 250
    local, _ = median_rate(
        lambda: mixshard_pack(src, OUT / "pack-local", 2, shard_size=shard_size), runs
    )
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    started = time.perf_counter() - t0
    on_ray, _ = median_rate(
        lambda: mixshard_pack(src, OUT / "pack-ray", 2, ray="default", shard_size=shard_size), runs
    )
    ray.shutdown()
    parts, _ = median_rate(lambda: parts_pack(src, OUT / "pack-parts", 2, shard_size), runs)
    print(
        f"pack on one machine vs Ray vs job-array parts; {count} 256 px JPEGs, {shard_size} "
        f"images per shard, median of {runs} runs; {machine()}\n"
    )
    rows = [
        ["local, --workers 2", fmt_rate(local), "100%"],
        ["--ray, local Ray with 2 CPUs", fmt_rate(on_ray), f"{on_ray / local:.0%}"],
        [
            "--part 0/2 + --part 1/2 side by side, then --finish",
            fmt_rate(parts),
            f"{parts / local:.0%}",
        ],
    ]
    print(table(["how", "img/s", "share of local"], rows))
    print(f"\nStarting the local Ray instance (not counted above): {started:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (median reported)")
    parser.add_argument("--count", type=int, help="images per source (3,000; 10,000 with --ray)")
    parser.add_argument("--quick", action="store_true", help="120 images, 1 run (the tests)")
    parser.add_argument("--plot", action="store_true", help="write bench-out/bench_pack.png")
    parser.add_argument("--ray", action="store_true", help="local vs Ray vs job-array parts")
    args = parser.parse_args()
    if args.count is None:
        args.count = 10_000 if args.ray else 3000
    if args.quick:
        args.count, args.runs = 120, 1
    if args.ray:
        ray_benchmark(args.count, args.runs)
    else:
        local_benchmark(args.count, args.runs, args.plot)


if __name__ == "__main__":
    main()

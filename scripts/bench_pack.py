"""Benchmark `mixshard pack` against a naive PIL loop, in one run, whole processes.

Sources: real photographs (`--real`, default ../shared/real-frames: 500 frames, four views
each (whole, mirrored, two 85% crops) resized to 256 px JPEGs like Places365-Standard's small
images), and generated 256x256 (Places365-like) and 640x480 (COCO-like) JPEGs, all made once
into bench-out/src. The baseline is the loop `pack` replaces, one process: PIL open, convert to
RGB, centre crop, resize to 84 bilinear, to numpy. Each run times, as whole processes
(`python -m ...`, start-up included), the baseline, `mixshard pack --workers 1` of the folder,
of its .tar and of its .zip (`--within`), and `--workers 2`; the cells are the medians of
`--runs` runs, interleaved so that a busy neighbour slows every cell alike. Reported: img/s,
img/s per core (workers = cores; the baseline is one core) and the ratio to the baseline.

`--large N` (20,000 by default, 0: none) repeats the folder cells of one worker on N real
256 px photos (more views of each frame, all distinct JPEGs), nearer the size users pack; the
fixed start-up cost matters less there. `--compare REF` adds the same command run by the package
at git revision REF (e.g. `main`) to every table: before and after, in the same run. The package
is byte-compiled first, as an installed one is.

Then, on the large source (else the first), the CPU seconds per image of the pack process
itself and of its decode workers under `--workers 2`: the pack process (journalling whole
shards the workers write; with fewer shards than workers, taking the results, hashing and
writing them) is one process, so it caps a pack on any number of cores; the Places365 table's
last row counts that cap.

`--ray` instead compares, on 10,000 256 px JPEGs (`--count`), the local packer (2 workers)
with `--ray` on a local 2-CPU Ray instance (started once, not timed: a cluster is already
running) and with two job-array parts run side by side plus `--finish`, all with 250 images
per shard (Ray and parts run one shard per task).

    python scripts/bench_pack.py [--runs 3] [--count 2000] [--real DIR] [--quick] [--plot]
        [--large 20000] [--compare main] [--only-real]
    python scripts/bench_pack.py --ray
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from benchlib import OUT, ROOT, bar_chart, fmt_rate, machine, make_sources, median_rate, table
from pack_sources import RUN_TREE, archives, compiled_package, first_images, package_at, real_source
from PIL import Image

from mixshard import pack
from mixshard.writing.pixels.image import load_image
from mixshard.writing.sources.scanning import scan

REAL = ROOT.parent / "shared" / "real-frames"
PLACES365 = 1_803_460 + 36_500  # Places365-Standard train + val images

# The loop `pack` replaces: one process, PIL all the way (what the reference code bases do).
NAIVE = """
import sys
from pathlib import Path
import numpy as np
from PIL import Image
n = 0
for path in sorted(Path(sys.argv[1]).rglob("*.jpg")):
    with Image.open(path) as img:
        img = img.convert("RGB")
        w, h = img.size
        s = min(w, h)
        box = ((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s)
        arr = np.asarray(img.crop(box).resize((84, 84), Image.Resampling.BILINEAR))
    n += 1
print(n)
"""


# `mixshard pack SRC OUT --workers N` in a process that prints, at exit, the CPU seconds the
# pack process itself spent after its imports and those of its decode workers (one line).
SHARE = """
import atexit, os, sys, runpy
import mixshard.cli, mixshard.writing.packing, mixshard.writing.run.localrun
start = os.times()
def report():
    t = os.times()
    own = t.user + t.system - start.user - start.system
    print("SHARE", own, t.children_user + t.children_system, file=sys.stderr)
atexit.register(report)
sys.argv = ["mixshard", "pack", *sys.argv[1:]]
runpy.run_module("mixshard", run_name="__main__", alter_sys=True)
"""


def naive_image(path: Path) -> object:
    """The baseline's work on one image (the loop in NAIVE)."""
    with Image.open(path) as img:
        img = img.convert("RGB")
        w, h = img.size
        s = min(w, h)
        box = ((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s)
        return np.asarray(img.crop(box).resize((84, 84), Image.Resampling.BILINEAR))


def steady_rates(src: Path, runs: int) -> tuple[float, float]:
    """img/s per CPU second of the naive loop and of pack's decode (`load_image`), in this
    process (no start-up, no writing), alternating blocks of 100 images; median of `runs`."""
    paths = [src / p for p, _ in scan(src).items]
    naive, ours = [], []
    for _ in range(runs):
        spent = [0.0, 0.0]
        for start in range(0, len(paths), 100):
            for i, fn in enumerate((naive_image, lambda p: load_image(p, 84))):
                t0 = time.process_time()
                for path in paths[start : start + 100]:
                    fn(path)
                spent[i] += time.process_time() - t0
        naive.append(len(paths) / spent[0])
        ours.append(len(paths) / spent[1])
    return statistics.median(naive), statistics.median(ours)


def timed(cmd: list[str], count: int) -> tuple[float, float]:
    """img/s of one whole process: per second of wall time, and per CPU second (user + system
    of the process and its workers, start-up included): on a machine shared with others the
    CPU seconds are what the work took, the wall time also counts waiting for a core. A pack
    writes into a folder emptied before it starts, untimed (as a first pack does): deleting
    the last run's 42 MB shard under `--overwrite` cost the timed process ~0.03 CPU s."""
    if "--overwrite" in cmd:
        shutil.rmtree(cmd[cmd.index("--overwrite") - 1], ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise RuntimeError(f"{cmd[:4]} failed: {proc.stderr.read().decode()[-2000:]}")
    proc.stderr.close()
    return count / wall, count / (usage.ru_utime + usage.ru_stime)


BASELINE: dict[str, Path] = {}  # label -> the package copy of `--compare REF`


def commands(src: Path, out: str = "pack-ms", archived: bool = True) -> dict:
    """The whole-process command of each cell, on `src` (into bench-out/`out`)."""
    packer = [sys.executable, "-m", "mixshard", "pack"]
    common = [str(OUT / out), "--overwrite", "-q"]
    cells = {
        ("naive PIL loop", 1): [sys.executable, "-c", NAIVE, str(src)],
        ("mixshard pack, folder", 1): [*packer, str(src), *common, "--workers", "1"],
    }
    for label, tree in BASELINE.items():  # the same command, run by the package at REF
        cells[(f"mixshard pack @{label}, folder", 1)] = [
            sys.executable, "-c", RUN_TREE, str(tree), "pack", str(src), *common, "--workers", "1"
        ]  # fmt: skip
    if archived:
        tar, zip_ = archives(src)
        inside = ["--within", src.name, "--workers", "1"]
        cells[("mixshard pack, .tar", 1)] = [*packer, str(tar), *common, *inside]
        cells[("mixshard pack, .zip", 1)] = [*packer, str(zip_), *common, *inside]
    cells[("mixshard pack, folder", 2)] = [*packer, str(src), *common, "--workers", "2"]
    for label, tree in BASELINE.items():
        cells[(f"mixshard pack @{label}, folder", 2)] = [
            sys.executable, "-c", RUN_TREE, str(tree), "pack", str(src), *common, "--workers", "2"
        ]  # fmt: skip
    return cells


SMALL = 20  # images of the run that measures each process's fixed cost


def source_rows(name: str, src: Path, runs: int, large: bool = False) -> tuple[list, list, dict]:
    """Table rows and chart bars of one source, and its per-core rates. `large`: only the
    folder cells of one worker, and no fixed-cost runs."""
    count = len(scan(src).items)
    cells = commands(src, "pack-large" if large else "pack-ms", archived=not large)
    small = {} if large else {
        k: v for k, v in commands(first_images(src, SMALL), "pack-small").items() if k[1] == 1
    }  # fmt: skip
    timed(cells[("naive PIL loop", 1)], count)  # warm the page cache
    walls: dict = {key: [] for key in cells}
    cpus: dict = {key: [] for key in cells}
    fixed: dict = {key: [] for key in small}
    for _ in range(runs):
        for key, cmd in cells.items():
            wall, cpu = timed(cmd, count)
            walls[key].append(wall)
            cpus[key].append(cpu)
            if key in small:
                fixed[key].append(SMALL / timed(small[key], SMALL)[1])  # CPU seconds
    base_wall = statistics.median(walls[("naive PIL loop", 1)])
    base_cpu = statistics.median(cpus[("naive PIL loop", 1)])
    rows, bars, per_core = [], [], {}
    for (packer_name, workers), values in walls.items():
        rate = statistics.median(values)
        cpu = statistics.median(cpus[(packer_name, workers)])
        per_core[(packer_name, workers)] = cpu
        rows.append(
            [name, packer_name, workers, fmt_rate(rate), fmt_rate(rate / workers),
             f"{rate / workers / base_wall:.2f}x", fmt_rate(cpu), f"{cpu / base_cpu:.2f}x"]
        )  # fmt: skip
        bars.append((f"{name}: {packer_name}, {workers} worker(s)", cpu))
    for key, values in cpus.items():  # each run's ratio to the naive run beside it
        pairs = zip(values, cpus[("naive PIL loop", 1)])
        per_core[("paired", key)] = statistics.median(ours / naive for ours, naive in pairs)
    for key, seconds in fixed.items():  # the rate beyond each process's fixed cost
        spent = count / per_core[key] - statistics.median(seconds)
        per_core[("beyond", key[0])] = (count - SMALL) / spent
        per_core[("fixed", key[0])] = statistics.median(seconds)
    return rows, bars, per_core


def places365_time(per_core: float, cores: int) -> str:
    minutes = PLACES365 / (per_core * cores) / 60
    return f"{minutes:.0f} min" if minutes >= 10 else f"{minutes:.1f} min"


def local_benchmark(
    count: int, runs: int, plot: bool, real: Path | None, large: int, only_real: bool = False
) -> None:
    compiled_package()
    load = os.getloadavg()
    sources = {}
    if real is not None and real.is_dir():
        sources["real photos, 256 px"] = real_source(real, count)
    if not only_real:
        sources.update(make_sources(count))
    rows, bars, per_core, steady = [], [], {}, []
    for name, src in sources.items():
        r, b, per_core[name] = source_rows(name, src, runs)
        rows += r
        bars += b
        naive, ours = steady_rates(src, runs)
        per_core[name]["steady"] = ours
        steady.append([name, fmt_rate(naive), fmt_rate(ours), f"{ours / naive:.2f}x"])
    share_src = next(iter(sources.values()))
    if large and real is not None and real.is_dir():
        share_src = real_source(real, large)
        large_rows = source_rows(f"real photos, 256 px, {large:,}", share_src, runs, large=True)[0]
    share = pack_process_share(share_src, runs)
    print(
        f"mixshard pack vs a naive PIL loop; {count} images per source, whole processes, "
        f"median of {runs} interleaved runs; {machine()}; load average {load[0]:.1f} at the "
        f"start, {os.getloadavg()[0]:.1f} at the end\n"
    )
    headers = ["source", "packer", "workers", "img/s", "img/s per core", "ratio to naive",
               "img/s per CPU second", "ratio to naive (CPU)"]  # fmt: skip
    print(table(headers, rows))
    print_paired(per_core)
    if large and real is not None and real.is_dir():
        print(f"\nThe same at {large:,} real photos (more views of the frames, distinct JPEGs):\n")
        print(table(headers, large_rows))
    print(
        "\nThe same per image once running (in one process, no start-up, no writing; CPU "
        "seconds, blocks of 100 images alternating):\n"
    )
    headers = ["source", "naive loop img/s per CPU s", "pack's decode img/s per CPU s", "ratio"]
    print(table(headers, steady))
    print_beyond(per_core, count)
    print_places365_times(per_core, share)
    if plot:
        plot_bars(bars)


def plot_bars(bars: list[tuple[str, float]]) -> None:
    """The chart of each cell's images per CPU second, into bench-out/bench_pack.png."""
    path = OUT / "bench_pack.png"
    labels, values = zip(*bars)
    title = "pack throughput per CPU second (higher is better)"
    bar_chart(path, title, list(labels), list(values), "images per CPU second")
    print(f"\nchart: {path}")


def print_paired(per_core: dict) -> None:
    """The median over runs of each run's CPU ratio to the naive run of the same round: a
    busy neighbour slows both alike, so on a shared machine this moves less than the ratio
    of the medians."""
    rows = []
    for name, rates in per_core.items():
        for key, ratio in rates.items():
            if isinstance(key, tuple) and key[0] == "paired" and key[1][0] != "naive PIL loop":
                rows.append([name, key[1][0], key[1][1], f"{ratio:.2f}x"])
    print("\nPaired: the median over runs of each run's ratio to the naive run beside it (CPU):\n")
    print(table(["source", "packer", "workers", "ratio to naive (CPU), paired"], rows))


def print_beyond(per_core: dict, count: int) -> None:
    """Rates per image beyond each process's fixed start-up cost."""
    print(
        f"\nPer image beyond each process's fixed cost: CPU seconds of the {count:,}-image run "
        f"minus those of a {SMALL}-image run, per image (what a 1.8M-image pack pays):\n"
    )
    beyond = []
    for name, rates in per_core.items():
        base = rates[("beyond", "naive PIL loop")]
        for packer_name in ("naive PIL loop", "mixshard pack, folder",
                            *(f"mixshard pack @{label}, folder" for label in BASELINE),
                            "mixshard pack, .tar", "mixshard pack, .zip"):  # fmt: skip
            rate = rates[("beyond", packer_name)]
            fixed = f"{rates[('fixed', packer_name)]:.2f} s"
            beyond.append([name, packer_name, fixed, fmt_rate(rate), f"{rate / base:.2f}x"])
    headers = ["source", "packer", "fixed cost (CPU)", "img/s per CPU s beyond it", "ratio"]
    print(table(headers, beyond))


def pack_process_share(src: Path, runs: int, workers: int = 2) -> tuple[float, float, int]:
    """CPU seconds per image of the pack process itself (scan, plan, journal; with fewer
    shards than workers also taking the workers' results, hashing and writing the shards; its
    imports left out) and of its `workers` decode processes, medians of `runs` packs of `src`,
    and the shards of `src` at the default size. The pack process is one: whatever the number
    of cores, a pack makes at most 1 / (its share) images/s."""
    count = len(scan(src).items)
    own, workers_cpu = [], []
    for _ in range(runs):
        out = OUT / "pack-share"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-c", SHARE, str(src), str(out), "-q", "--workers", str(workers)]
        err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
        line = next(x for x in err.splitlines() if x.startswith("SHARE "))
        a, b = map(float, line.split()[1:])
        own.append(a / count)
        workers_cpu.append(b / count)
    return statistics.median(own), statistics.median(workers_cpu), -(-count // 10_000)


def print_places365_times(per_core: dict, share: tuple[float, float, int]) -> None:
    """The time to pack all of Places365-Standard from the first source's per-core rates;
    `share`: the pack process's and its workers' CPU seconds per image with 2 workers, and the
    shards of the source they packed."""
    first = next(iter(per_core))
    one = per_core[first][("mixshard pack, .tar", 1)]
    own, decode, shards = share
    print(
        f"\nWith --workers 2 on the {shards}-shard source, per image: the pack process "
        f"itself {own * 1e6:.0f} µs of CPU (scan, plan, journal; where a run has fewer shards "
        "than workers also taking the results, hashing, writing), its decode workers "
        f"{decode * 1e6:.0f} µs. The pack process is one: it caps a pack at {1 / own:,.0f} "
        "images/s on any number of cores (the last row below)."
    )
    print(
        f"\nPacking all of Places365-Standard ({PLACES365:,} images) from its .tar at the "
        f"rate per CPU second of `{first}` ({fmt_rate(one)} img/s, --workers 1), if it scales "
        "with the cores (the disk and the page cache keeping up):\n"
    )
    cores = [1, 2, 8, 16, 32, 64]
    steady_one = per_core[first]["steady"]
    beyond_one = per_core[first][("beyond", "mixshard pack, .tar")]
    times = [
        ["whole process, from the .tar", *(places365_time(one, c) for c in cores)],
        ["beyond the fixed cost, from the .tar", *(places365_time(beyond_one, c) for c in cores)],
        ["pack's decode once running", *(places365_time(steady_one, c) for c in cores)],
    ]
    # N cores share both kinds of work; the pack process is one of them (one core: no workers)
    capped = [min(c / (own + decode), 1 / own) for c in cores[1:]]
    times.append(["--workers N on N cores, capped by the pack process", "-", *(
        places365_time(rate, 1) for rate in capped
    )])  # fmt: skip
    print(table(["rate used \\ cores", *map(str, cores)], times))


def mixshard_pack(src: Path, out: Path, workers: int, **kwargs) -> int:
    result = pack(src, out, workers=workers, overwrite=True, **kwargs)
    return result.manifest.count


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
    parser.add_argument("--count", type=int, help="images per source (2,000; 10,000 with --ray)")
    parser.add_argument("--real", type=Path, default=REAL, help="folder of real photos")
    parser.add_argument("--quick", action="store_true", help="120 images, 1 run (the tests)")
    parser.add_argument("--plot", action="store_true", help="write bench-out/bench_pack.png")
    parser.add_argument("--ray", action="store_true", help="local vs Ray vs job-array parts")
    parser.add_argument(
        "--large", type=int, default=20_000, help="real photos of the large run (0: none)"
    )
    parser.add_argument("--compare", metavar="REF", help="also time the package at git REF")
    parser.add_argument("--only-real", action="store_true", help="the real photos only")
    args = parser.parse_args()
    if args.compare and (tree := package_at(args.compare)) is not None:
        BASELINE[args.compare] = tree
    if args.count is None:
        args.count = 10_000 if args.ray else 2000
    if args.quick:
        args.count, args.runs, args.real, args.large = 120, 1, None, 0
    if args.ray:
        ray_benchmark(args.count, args.runs)
    else:
        local_benchmark(args.count, args.runs, args.plot, args.real, args.large, args.only_real)


if __name__ == "__main__":
    main()

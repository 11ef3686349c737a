"""Benchmark the overlay per training step: reference vs mixshard, in one run.

Per call with float32 obs (N, 9, 84, 84), N = 128 and 256:
  * blend only: the reference formula with `repeat` (on float 0..1 backgrounds as ToTensor
    gives them) vs `mixshard.blend` (uint8 backgrounds), against `obs.clone()`, the floor of
    any op that writes one obs-size output;
  * end to end: the reference (ImageFolder DataLoader with RandomResizedCrop + flip + ToTensor,
    num_workers=0, then the blend) vs `mixshard.Overlay` with the device cache and with the
    stream (num_workers=0), same 256 px JPEG sources packed at 84 px.
Median of --runs timed calls after warm-up; one torch thread (per-core figures) unless
--threads. Each cell runs in a fresh process whose glibc malloc is held in steady state
(MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set, heap grown once), else page faults on
fresh 31-62 MB buffers dominate every ratio. With CUDA: the same on the GPU, plus peak extra
device memory.

    python scripts/bench_overlay.py [--runs 20] [--quick] [--plot]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4000000000"}
if __name__ == "__main__" and any(os.environ.get(k) != v for k, v in MALLOC.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC})

import torch  # noqa: E402
from bench_pack import make_sources  # noqa: E402
from benchlib import OUT, bar_chart, fmt_rate, machine, reference_batches, table  # noqa: E402

import mixshard  # noqa: E402

K = 3  # frames


def reference_blend(x: torch.Tensor, imgs01: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """The seed question's `random_mixup` arithmetic."""
    imgs = imgs01.repeat(1, x.size(1) // 3, 1, 1)
    return ((1 - alpha) * (x / 255.0) + alpha * imgs) * 255.0


def warm_heap(total: int = 512 << 20, block: int = 30 << 20) -> None:
    """Grow glibc's heap once with touched memory. Buffers over the mmap threshold (32 MiB at
    most: the N=256 obs is 62 MiB) are then carved from the heap's free top, as in a long
    training run, instead of each being a fresh mmap that page-faults on every write."""
    blocks = [torch.ones(block, dtype=torch.uint8) for _ in range(total // block)]
    del blocks


def timed(fn, runs: int, device: torch.device) -> float:
    """Median seconds per call of `fn` after 3 warm-up calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_extra(fn, device: torch.device) -> int:
    fn()
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = fn()
    torch.cuda.synchronize(device)
    del out
    return torch.cuda.max_memory_allocated(device) - base


CELLS = ("clone", "reference blend", "blend", "reference e2e", "Overlay device", "Overlay stream")


def run_cell(device: torch.device, n: int, cell: str, runs: int, e2e_runs: int) -> dict:
    """Time one cell, in this (fresh) process: seconds per call, and peak extra CUDA memory."""
    src = make_sources(3000)["256 px (Places365-like)"]
    pack = OUT / "stream-pack"
    g = torch.Generator().manual_seed(n)
    obs = (torch.rand(n, 3 * K, 84, 84, generator=g) * 255).to(device)
    imgs = torch.randint(0, 256, (n, 3, 84, 84), generator=g, dtype=torch.uint8).to(device)
    imgs01 = imgs.float() / 255.0
    if cell == "clone":
        fn = obs.clone
    elif cell == "reference blend":

        def fn():
            return reference_blend(obs, imgs01)
    elif cell == "blend":

        def fn():
            return mixshard.blend(obs, imgs, 0.5)
    elif cell == "reference e2e":
        batches = reference_batches(src, n, workers=0)

        def fn():
            return reference_blend(obs, next(batches).to(device))
    else:
        cache = "device" if cell == "Overlay device" else "stream"
        overlay = mixshard.Overlay(pack, cache=cache, device=device, num_workers=0)

        def fn():
            return overlay(obs)

    warm_heap()
    result = {"seconds": timed(fn, e2e_runs if cell == "reference e2e" else runs, device)}
    if device.type == "cuda" and cell != "reference e2e":
        result["peak_extra"] = peak_extra(fn, device)
        result["obs_bytes"] = obs.nbytes
    return result


def cell_in_subprocess(device: str, n: int, cell: str, runs: int, e2e_runs: int, threads: int):
    """Each cell in its own process, so no cell inherits another's heap layout."""
    args = [
        sys.executable,
        __file__,
        "--cell",
        device,
        str(n),
        cell,
        "--runs",
        str(runs),
        "--e2e-runs",
        str(e2e_runs),
        "--threads",
        str(threads),
    ]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def table_rows(n: int, t: dict[str, dict]) -> tuple[list, list]:
    def s(cell: str) -> float:
        return t[cell]["seconds"]

    def us(cell: str) -> str:
        return f"{s(cell) * 1e6:,.0f}"

    clone, ref_e2e = s("clone"), s("reference e2e")
    rows = [
        [n, "obs.clone() (floor)", us("clone"), "1.00x", "", ""],
        [
            n,
            "reference blend (repeat, 5 ops)",
            us("reference blend"),
            f"{s('reference blend') / clone:.2f}x",
            "",
            "",
        ],
        [
            n,
            "mixshard.blend",
            us("blend"),
            f"{s('blend') / clone:.2f}x",
            f"{s('reference blend') / s('blend'):.1f}x faster than reference blend",
            "",
        ],
        [
            n,
            "reference end to end (ImageFolder + blend)",
            us("reference e2e"),
            f"{ref_e2e / clone:.1f}x",
            fmt_rate(n / ref_e2e),
            "1x",
        ],
        [
            n,
            "Overlay, device cache",
            us("Overlay device"),
            f"{s('Overlay device') / clone:.2f}x",
            fmt_rate(n / s("Overlay device")),
            f"{ref_e2e / s('Overlay device'):,.0f}x",
        ],
        [
            n,
            "Overlay, stream",
            us("Overlay stream"),
            f"{s('Overlay stream') / clone:.2f}x",
            fmt_rate(n / s("Overlay stream")),
            f"{ref_e2e / s('Overlay stream'):,.0f}x",
        ],
    ]
    if "peak_extra" in t["blend"]:
        mib = 2**20
        rows.append(
            [
                n,
                "peak extra device memory, MiB",
                ", ".join(
                    f"{c} {t[c]['peak_extra'] / mib:.0f}"
                    for c in ("reference blend", "blend", "Overlay device")
                ),
                f"obs {t['blend']['obs_bytes'] / mib:.0f}",
                "",
                "",
            ]
        )
    chart = [
        (f"N={n} reference end to end", n / ref_e2e),
        (f"N={n} Overlay device cache", n / s("Overlay device")),
        (f"N={n} Overlay stream", n / s("Overlay stream")),
    ]
    return rows, chart


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--e2e-runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: per core)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", action="store_true", help="write bench-out/bench_overlay_*.png")
    parser.add_argument("--device", action="append", help="cpu and/or cuda (default: all)")
    parser.add_argument("--cell", nargs=3, metavar=("DEVICE", "N", "CELL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.cell:
        device, n, cell = args.cell
        print(json.dumps(run_cell(torch.device(device), int(n), cell, args.runs, args.e2e_runs)))
        return
    runs, e2e_runs = (5, 3) if args.quick else (args.runs, args.e2e_runs)
    src = make_sources(3000)["256 px (Places365-like)"]
    pack = OUT / "stream-pack"
    if not (pack / "index.json").exists():
        mixshard.pack(src, pack, overwrite=True)
    devices = args.device or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    headers = ["N", "per call", "µs", "vs obs.clone()", "overlay img/s", "vs reference e2e"]
    for name in devices:
        rows, chart = [], []
        for n in (128, 256):
            times = {c: cell_in_subprocess(name, n, c, runs, e2e_runs, args.threads) for c in CELLS}
            r, c = table_rows(n, times)
            rows += r
            chart += c
        gpu = f"; {torch.cuda.get_device_name(0)}" if name == "cuda" else ""
        print(
            f"\n{name.upper()}: float32 obs (N, 9, 84, 84), {args.threads} torch thread(s), "
            f"median of {runs} calls (end-to-end reference: {e2e_runs}), each cell in a fresh "
            f"process; {machine()}{gpu}\n"
        )
        print(table(headers, rows))
        if args.plot:
            path = OUT / f"bench_overlay_{name}.png"
            bar_chart(
                path,
                f"overlay images per second on {name} (higher is better)",
                [c[0] for c in chart],
                [c[1] for c in chart],
                "images/s",
            )
            print(f"\nchart: {path}")
    if "cuda" not in devices:
        print("\nCUDA: no GPU on this machine; the CUDA figures are unmeasured.")


if __name__ == "__main__":
    main()

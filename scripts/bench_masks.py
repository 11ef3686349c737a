"""Benchmark the mask builders (`mixshard.masks`) against `obs.clone()` on the CPU.

Each row times one builder on one batch, interleaved with `obs.clone()` of the observations
the mask is for (uint8 RGB, one frame, in the row's layout): each run times the clone and then
the builder, and the row gives the median of both and the median of the per-run ratios (so a
machine that is busy now and then moves both alike). Sizes: 1,024 x 84 x 84 and 4,096 x 128 x
128 (--quick: the first only). Maps as simulators hand them out: ManiSkill3's int16
`(N, H, W, 1)` ids with background 0, MuJoCo's int32 `(N, H, W)` with -1, eight kept ids (the
robot's links), Isaac Lab's float32 `(N, H, W, 1)` depth.

    python scripts/bench_masks.py [--runs 11] [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import torch
from benchlib import machine, paired, table

from mixshard import masks

SIZES = ((1024, 84), (4096, 128))
LINKS = [3, 4, 5, 6, 7, 8, 9, 12]  # a robot's kept ids


def rows_for(n: int, size: int) -> list[tuple[str, Callable[[], object], torch.Tensor]]:
    """(name, call, the obs its clone is timed on), data made here."""
    g = torch.Generator().manual_seed(0)
    last = torch.randint(0, 256, (n, size, size, 3), generator=g, dtype=torch.uint8)
    first = last.permute(0, 3, 1, 2).contiguous()
    ids16 = torch.randint(0, 16, (n, size, size, 1), generator=g, dtype=torch.int16)
    ids32 = ids16[..., 0].int() - 1
    depth = torch.rand(n, size, size, 1, generator=g) * 4
    key, nhwc = "#439f82", {"layout": "NHWC"}
    seg, green = masks.from_segmentation, masks.green_screen
    return [
        ("green_screen uint8 NCHW", lambda: green(first), first),
        ("green_screen uint8 NHWC", lambda: green(last, **nhwc), last),
        ("green_screen NHWC margin=1", lambda: green(last, margin=1, **nhwc), last),
        ("color_key uint8 NCHW", lambda: masks.color_key(first, (0, 200, 0), 40), first),
        ("color_key uint8 NHWC", lambda: masks.color_key(last, (0, 200, 0), 40, **nhwc), last),
        ("blue_dominant uint8 NCHW", lambda: masks.blue_dominant(first), first),
        ("blue_dominant uint8 NHWC", lambda: masks.blue_dominant(last, **nhwc), last),
        ("chroma_key uint8 NCHW", lambda: masks.chroma_key(first, key), first),
        ("chroma_key uint8 NHWC", lambda: masks.chroma_key(last, key, **nhwc), last),
        ("from_segmentation int16, background 0", lambda: seg(ids16, background=0, **nhwc), last),
        ("from_segmentation int32 (N,H,W), bg -1", lambda: seg(ids32, background=-1), last),
        ("from_segmentation int16, 8 kept ids", lambda: seg(ids16, LINKS, **nhwc), last),
        ("from_segmentation int32, 8 kept ids", lambda: seg(ids32, LINKS), last),
        ("from_depth float32 (N,H,W,1)", lambda: masks.from_depth(depth, 2.0, **nhwc), last),
    ]  # fmt: skip


def interleaved(
    fn: Callable[[], object], obs: torch.Tensor, runs: int
) -> tuple[float, float, float]:
    """Median ms of `obs.clone()`, of `fn()`, and the median per-run ratio."""
    sec, base, ratio = paired(fn, obs.clone, runs)
    return base * 1e3, sec * 1e3, ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="1,024 x 84 x 84 only")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    threads = torch.get_num_threads()
    print(f"{machine()}; torch {torch.__version__}, {threads} threads; load {load:.1f}")
    for n, size in SIZES[:1] if args.quick else SIZES:
        results = []
        for name, fn, obs in rows_for(n, size):
            base, took, ratio = interleaved(fn, obs, args.runs)
            results.append([name, f"{took:.2f}", f"{base:.2f}", f"{ratio:.2f}x"])
        print(f"\n{n} x {size} x {size} (median of {args.runs} runs)\n")
        print(table(["builder", "ms", "obs.clone() ms", "ratio"], results))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average at the end: {load:.1f}")


if __name__ == "__main__":
    main()

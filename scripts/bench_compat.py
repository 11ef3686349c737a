"""Benchmark the overlay family per call: the masked paste and each compat drop-in.

Per call with float32 obs (N, 9, 84, 84), N = 128 and 256, against `obs.clone()` (the floor of
any op that writes one obs-size output), each figure the median of --runs timed calls:
  * paste only, backgrounds already on the device: the reference formula of SGQN's
    `attribution_augmentation` (float 0..1 backgrounds `repeat`ed over the frames) vs
    `mixshard.composite` (uint8 backgrounds broadcast through a view), with a per-channel
    float mask and a per-pixel bool mask; MaDi's `splice` as MaDi computes it (kornia's
    `rgb_to_hsv` per frame, `imgs[mask] = x[mask]`; when kornia is installed) vs mixshard's
    (`hsv_above` + `composite`);
  * end to end: each `mixshard.compat` function with a pack kept on the device (what a
    training step calls).

    python scripts/bench_compat.py [--runs 20] [--device cuda] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from benchlib import OUT, call_seconds, machine, table

import mixshard
from mixshard import compat
from mixshard.augment.masks.builders import hsv_above
from mixshard.testdata import make_image_folder

K = 3
# glibc malloc held in steady state (as bench_overlay.py does): else page faults on fresh
# obs-size buffers dominate every CPU figure
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4000000000"}


def reference_attribution(x, mask, imgs01):
    """SGQN's `attribution_augmentation` after its `_get_places_batch`."""
    imgs = imgs01.repeat(1, x.size(1) // 3, 1, 1)
    return ((x * mask) / 255.0 + imgs * (torch.ones_like(mask) - mask)) * 255.0


def reference_splice(x, imgs01, kornia, hue=0.0, sat=0.0, val=0.6):
    """MaDi's `random_overlay(method="splice")` after its `_get_places_batch`."""
    n, c, h, w = x.shape
    imgs = imgs01.repeat(1, c // 3, 1, 1) * 255.0
    thresholds = torch.tensor([hue, sat, val], device=x.device) * 255.0
    thresholds = thresholds.view(1, -1, 1, 1).repeat(n, 3, h, w)
    hsv = torch.cat([kornia.color.rgb_to_hsv(chunk) for chunk in torch.chunk(x, 3, dim=1)], 1)
    mask = (hsv > thresholds).view(n, c // 3, 3, h, w)
    mask = mask.all(dim=2, keepdim=True).repeat(1, 1, 3, 1, 1).view(n, c, h, w)
    imgs[mask] = x[mask]
    return imgs.clamp(0, 255)


def make_pack(root: Path, count: int) -> Path:
    pack = root / "places365_standard"
    if not (pack / "index.json").exists():
        make_image_folder(root / "src", classes=4, per_class=count // 4, seed=0, max_side=128)
        mixshard.pack(root / "src", pack, size=84, workers=1)
    return root


def rows_for(device: torch.device, n: int, runs: int, kornia) -> list[list[object]]:
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randint(0, 256, (n, 3 * K, 84, 84), device=device, generator=g).float()
    imgs = torch.randint(0, 256, (n, 3, 84, 84), device=device, generator=g, dtype=torch.uint8)
    imgs01 = imgs.float() / 255
    per_channel = (torch.rand(n, 3 * K, 84, 84, device=device, generator=g) < 0.1).float()
    per_pixel = torch.rand(n, 1, 84, 84, device=device, generator=g) < 0.1
    thresholds = torch.tensor([0.0, 0.0, 0.6]) * 255.0
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    module = compat.RandomOverlay()
    cells: list[tuple[str, object]] = [
        ("obs.clone()", lambda: x.clone()),
        (
            "reference attribution_augmentation paste",
            lambda: reference_attribution(x, per_channel, imgs01),
        ),
        ("composite, per-channel float mask", lambda: mixshard.composite(x, imgs, per_channel)),
        ("composite, per-pixel bool mask", lambda: mixshard.composite(x, imgs, per_pixel)),
    ]
    if kornia is not None:
        cells.append(
            ("reference MaDi splice (kornia)", lambda: reference_splice(x, imgs01, kornia))
        )
    cells += [
        (
            "mixshard splice (hsv_above + composite)",
            lambda: mixshard.composite(x, imgs, hsv_above(x, thresholds)).clamp_(0, 255),
        ),
        ("compat.random_overlay", lambda: compat.random_overlay(x)),
        ("compat.random_overlay, alpha 0.3", lambda: compat.random_overlay(x, alpha=0.3)),
        ("compat.random_overlay, splice", lambda: compat.random_overlay(x, method="splice")),
        (
            "compat.attribution_augmentation",
            lambda: compat.attribution_augmentation(x, per_channel),
        ),
        ("compat.RandomOverlay", lambda: module(x)),
    ]
    floor = None
    rows = []
    for name, fn in cells:
        seconds = call_seconds(fn, runs, sync=sync)  # type: ignore[arg-type]
        floor = floor or seconds
        rows.append([device.type, n, name, f"{seconds * 1e3:.2f}", f"{seconds / floor:.2f}x"])
    return rows


def main() -> None:
    if any(os.environ.get(k) != v for k, v in MALLOC.items()):  # set before the process starts
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC})
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: per core)")
    parser.add_argument("--quick", action="store_true", help="tiny: N=16, 3 runs (tests)")
    parser.add_argument("--device", action="append", help="cpu and/or cuda (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import kornia  # type: ignore[import-not-found]
    except ImportError:
        kornia = None
    devices = args.device or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    sizes, runs = ((16,), 3) if args.quick else ((128, 256), args.runs)
    root = Path(os.environ.get("MIXSHARD_BENCH_OUT", OUT)) / "compat-data"
    os.environ["MIXSHARD_DATA"] = str(make_pack(root, 40 if args.quick else 400))
    print(f"Command: python scripts/bench_compat.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"Machine: {machine()}; torch {torch.__version__}, {args.threads} thread(s)")
    rows = [r for d in devices for n in sizes for r in rows_for(torch.device(d), n, runs, kornia)]
    print(table(["device", "N", "per call", "ms", "vs obs.clone()"], rows))


if __name__ == "__main__":
    main()

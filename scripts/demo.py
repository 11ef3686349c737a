"""`make demo`: the whole job on an embedded default, no download and no GPU needed.

1. generate a small procedural ImageFolder (5 classes, mixed sizes, formats and modes),
2. `mixshard pack` it into 84 px uint8 shards and print `mixshard inspect`,
3. render frame-stacked observations (a ball rolling over a floor, 3 frames), overlay pack
   images with `mixshard.Overlay` (on CUDA when there is one) and time it,
4. write demo/overlay.png: rows of observation frames | background | blended frames.

    python scripts/demo.py [--out demo] [--quick]
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from benchlib import call_seconds
from PIL import Image

import mixshard
from mixshard.testdata import make_image_folder

ROOT = Path(__file__).resolve().parent.parent
FRAMES, SIZE, ROWS, SCALE = 3, 84, 6, 2


def run(*args: str) -> None:
    """Run `python -m mixshard ARGS`, echoing the command as a user would type it."""
    print(f"$ mixshard {shlex.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "mixshard", *args], check=True)


def render_observations(n: int, seed: int = 0) -> torch.Tensor:
    """`(n, 3 * FRAMES, 84, 84)` float 0..255: a DMC-like scene (sky, checkered floor, a ball
    rolling right across the stacked frames), one random scene per sample."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    out = np.empty((n, FRAMES, SIZE, SIZE, 3), np.float32)
    horizon = 52
    sky = np.linspace(0, 1, horizon)[:, None, None] * np.array([-60, -30, 0]) + [120, 170, 230]
    for i in range(n):
        scene = np.zeros((SIZE, SIZE, 3), np.float32)
        scene[:horizon] = sky
        cell = int(rng.integers(6, 12))
        checker = ((xx[horizon:] // cell + yy[horizon:] // cell) % 2)[..., None]
        scene[horizon:] = np.where(checker, [70, 90, 110], [40, 55, 70])
        color = rng.integers(150, 256, 3)
        radius, x0, speed = rng.integers(7, 11), rng.integers(12, 20), rng.integers(14, 20)
        y = horizon - radius + 2
        for f in range(FRAMES):
            frame = scene.copy()
            cx = x0 + f * speed
            ball = (xx - cx) ** 2 + (yy - y) ** 2 <= radius**2
            frame[ball] = color
            out[i, f] = frame
    return torch.from_numpy(out).permute(0, 1, 4, 2, 3).reshape(n, 3 * FRAMES, SIZE, SIZE)


def figure(obs: torch.Tensor, blended: torch.Tensor, alpha: float, path: Path) -> None:
    """Rows: observation frames | background | blended frames, upscaled for viewing."""
    background = ((blended[:, :3] - (1 - alpha) * obs[:, :3]) / alpha).round().clamp(0, 255)

    thin = np.full((SIZE, 1, 3), 255, np.uint8)

    def tiles(t: torch.Tensor) -> list[np.ndarray]:
        frames = [
            t[3 * f : 3 * f + 3].permute(1, 2, 0).round().clamp(0, 255).byte().numpy()
            for f in range(t.shape[0] // 3)
        ]
        return [part for frame in frames for part in (frame, thin)][:-1]

    gap = np.full((SIZE, 6, 3), 255, np.uint8)
    rows = []
    for i in range(len(obs)):
        parts = tiles(obs[i]) + [gap] + tiles(background[i]) + [gap] + tiles(blended[i])
        rows.append(np.concatenate(parts, axis=1))
        rows.append(np.full((4, rows[-1].shape[1], 3), 255, np.uint8))
    grid = np.concatenate(rows[:-1], axis=0)
    img = Image.fromarray(grid).resize(
        (grid.shape[1] * SCALE, grid.shape[0] * SCALE), Image.Resampling.NEAREST
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


def overlay_rate(overlay: mixshard.Overlay, obs: torch.Tensor, calls: int) -> float:
    """Overlay images per second: median over `calls` calls after warm-up."""
    sync = torch.cuda.synchronize if obs.is_cuda else None
    return len(obs) / call_seconds(lambda: overlay(obs), calls, warmup=3, sync=sync)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "demo", help="demo folder")
    parser.add_argument("--quick", action="store_true", help="fewer images and calls (tests)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    src, pack = args.out / "src", args.out / "pack"
    marker = src / ".complete"
    if not marker.exists():
        print(f"generating a procedural ImageFolder in {src} ...", flush=True)
        per_class = 12 if args.quick else 60
        paths = make_image_folder(src, classes=5, per_class=per_class, seed=0)
        marker.touch()
        print(f"  {len(paths)} images in 5 classes, mixed sizes, formats and modes", flush=True)
    run("pack", str(src), str(pack), "--overwrite", "--quiet")
    run("inspect", str(pack))

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    alpha = 0.5
    overlay = mixshard.Overlay(pack, alpha=alpha, flip=True, device=device, seed=0)
    obs = render_observations(ROWS, seed=1).to(device)
    blended = overlay(obs)
    path = args.out / "overlay.png"
    figure(obs.cpu(), blended.cpu(), alpha, path)
    frame = args.out / "frame.png"  # one observation frame, for `mixshard preview --obs`
    Image.fromarray(obs[0, :3].permute(1, 2, 0).cpu().numpy().astype(np.uint8)).save(frame)
    run("preview", str(pack), "-o", str(args.out / "blended.png"), "--obs", str(frame),
        "--alpha", "0.5", "--count", "8")  # fmt: skip
    batch = render_observations(64 if args.quick else 256, seed=2).to(device)
    rate = overlay_rate(overlay, batch, 5 if args.quick else 30)
    mode = overlay.modes[str(batch.device)]
    print(
        f"overlay: mixshard.Overlay on {device} ({mode} cache), obs {tuple(batch.shape)}: "
        f"{rate:,.0f} images/s (torch threads: {torch.get_num_threads()})"
    )
    print(f"wrote {path}: {ROWS} rows of observation frames | background | blended frames")
    print(f"demo finished in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()

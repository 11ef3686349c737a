"""The whole step of `scripts/bench_backgrounds.py`: the mask and the composite a simulator's
step pays for, against `obs.clone()` of the same observations, timed in the same run.

A step is `Backgrounds.composite(obs, key, layout=...)`: the mask made from the observation (the
DMC-GB green screen, a colour key) or from the simulator's segmentation ids or depth, and the
environments' backgrounds pasted behind it, in one pass (`mixshard.keys`). For comparison, one
row builds the mask first with `mixshard.masks.green_screen` (a pass of its own) and composites
it. The observations are a procedural green-screen scene (`scene`): a shaded green backdrop, an
agent of a few shaded colours and a floor, with the segmentation ids and depth that go with it.
"""

from __future__ import annotations

import torch
from benchlib import paired

import mixshard
from mixshard import keys, masks

GOAL_STEP = 2.0  # the whole step, x obs.clone() (issue 47 §4)
GOAL_RESET = 0.3  # step + a reset of 5% of the environments, x obs.clone()
GREEN = (40, 170, 50)  # the scene's backdrop, about; the colour key keys it out
FAR = 8.0  # the depth from which the background shows (the backdrop is at 10)


def scene(n: int, k: int, side: int, layout: str, dtype: torch.dtype, seed: int = 0):
    """`n` environments' `k` stacked frames of a green-screen scene at `side` px, in `layout`:
    (obs, segmentation ids int16, depth float32), the maps one per frame in the obs's layout."""
    g = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, side).view(1, 1, side, 1)
    x = torch.linspace(0, 1, side).view(1, 1, 1, side)
    rgb = torch.empty(n, k, 3, side, side)
    noise = torch.rand(n, k, 1, side, side, generator=g) * 16 - 8
    for c, (base, slope) in enumerate(((30, 20), (150, 60), (40, 20))):
        rgb[:, :, c] = base + slope * y + noise[:, :, 0]
    centre = torch.rand(n, k, 2, 1, 1, generator=g) * 0.4 + 0.3
    body = ((x - centre[:, :, 0]) / 0.2) ** 2 + ((y - centre[:, :, 1]) / 0.3) ** 2 < 1
    floor = (y > 0.8).expand(n, k, side, side)
    shade = 0.6 + 0.4 * (1 - y)
    for c, colour in enumerate((200, 120, 60)):
        rgb[:, :, c] = torch.where(body, colour * shade + noise[:, :, 0], rgb[:, :, c])
    checker = ((x * 8).floor() + (y * 8).floor()) % 2 * 30
    for c, colour in enumerate((90, 100, 120)):
        rgb[:, :, c] = torch.where(floor & ~body, colour + checker + noise[:, :, 0], rgb[:, :, c])
    seg = torch.where(body, 1, torch.where(floor, 2, 0)).to(torch.int16)
    depth = torch.where(body, 2.5, torch.where(floor, 5.0, 10.0)) + y
    obs = rgb.clamp_(0, 255).round_().reshape(n, 3 * k, side, side)
    if layout == "NHWC":
        obs, seg, depth = (
            obs.permute(0, 2, 3, 1),
            seg.permute(0, 2, 3, 1),
            depth.permute(0, 2, 3, 1),
        )
    return obs.contiguous().to(dtype), seg.contiguous(), depth.contiguous().float()


def step_rows(pack, n: int, k: int, side: int, runs: int) -> list[list[object]]:
    """Rows of the whole step for `n` environments of `k` frames at `side` px: each mask
    source, uint8 and float32, channels-first and channels-last, against obs.clone()."""
    bg = mixshard.Backgrounds(pack, n, frames=k, playback="loop", cache="device")
    rows: list[list[object]] = []
    for layout in ("NCHW", "NHWC"):
        for dtype in (torch.uint8, torch.float32):
            obs, seg, depth = scene(n, k, side, layout, dtype)
            sources = {
                "green screen (keys.green_screen)": keys.green_screen(),
                "colour key (keys.color_key)": keys.color_key(GREEN, 60),
                "segmentation ids (keys.from_segmentation)": keys.from_segmentation(
                    seg, background=[0]
                ),
                "depth (keys.from_depth)": keys.from_depth(depth, FAR),
            }
            rows += key_rows(bg, obs, sources, layout, runs)
            if layout == "NCHW" and dtype == torch.uint8:
                rows.append(separate_passes(bg, obs, runs))
            del obs, seg, depth, sources
    rows.append(reset_row(bg, n, k, side, runs))
    bg.close()
    return rows


def key_rows(bg, obs: torch.Tensor, sources: dict, layout: str, runs: int) -> list[list[object]]:
    """One row per key: `Backgrounds.composite(obs, key)` against `obs.clone()`."""
    rows: list[list[object]] = []
    what = f"{layout} {'x'.join(map(str, obs.shape))} {str(obs.dtype)[6:]}"
    for name, key in sources.items():
        sec, _, ratio = paired(
            lambda key=key: bg.composite(obs, key, layout=layout), obs.clone, runs
        )
        row = [torch.get_num_threads(), f"whole step, {name}, {what}", ms(sec)]
        rows.append([*row, f"{ratio:.2f}x", mark(ratio, GOAL_STEP)])
    return rows


def separate_passes(bg, obs: torch.Tensor, runs: int) -> list[object]:
    """The green screen as two passes: `masks.green_screen` builds the mask, then composite."""
    sec, _, ratio = paired(lambda: bg.composite(obs, masks.green_screen(obs)), obs.clone, runs)
    shape = "x".join(map(str, obs.shape))
    what = f"mask, then composite: masks.green_screen + composite, NCHW {shape} uint8"
    return [torch.get_num_threads(), what, ms(sec), f"{ratio:.2f}x", ""]


def reset_row(bg, n: int, k: int, side: int, runs: int) -> list[object]:
    """`step` + a reset of 5% of the environments (a bool mask), against the clone of uint8
    channels-last obs (the smaller clone: the harder goal)."""
    obs = torch.zeros(n, side, side, 3 * k, dtype=torch.uint8)
    g = torch.Generator().manual_seed(1)
    done = torch.zeros(n, dtype=torch.bool)
    done[torch.randperm(n, generator=g)[: max(1, n // 20)]] = True

    def step_reset() -> None:
        bg.step()
        bg.reset(done)

    sec, _, ratio = paired(step_reset, obs.clone, runs)
    clone = f"{n}x{side}x{side}x{3 * k} uint8"
    what = f"step + reset of {int(done.sum())} of {n} (5%), vs clone of {clone}"
    return [torch.get_num_threads(), what, ms(sec), f"{ratio:.2f}x", mark(ratio, GOAL_RESET)]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def mark(ratio: float, goal: float) -> str:
    return f"<= {goal:g}x: {'met' if ratio <= goal else 'NOT met'}"

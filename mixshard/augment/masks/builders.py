"""Masks for `composite`: which pixels of an observation to keep in front of a background.

Public as `mixshard.masks`. Every builder returns a *keep* mask in `composite`'s convention
(true or 1 where the observation stays, the background shows elsewhere), in the caller's
layout, named by `layout="NCHW"` (the default) or `"NHWC"`, never guessed from the shape:
`(N, frames, H, W)` for `(N, 3 * frames, H, W)` observations, `(N, H, W, frames)` for
`(N, H, W, 3 * frames)` (RGBA `(N, H, W, 4)`: keyed on its RGB, one frame); a segmentation or
depth map gives a mask of its own shape. They are batched tensor ops on the input's device (no
Python loop over pixels or samples, no host sync), on uint8 or float 0..255 observations:

- `green_screen`: DMControl-GB's green screen (its `do_green_screen`, pixel for pixel);
- `color_key`: a chroma key of any colour and tolerance;
- `blue_dominant`: DBC's natural-video key (`b > g and b > r` shows the background);
- `chroma_key`: GreenAug's soft key (a float matte; `chroma_composite` pastes with its spill
  removal), in `chroma.py`;
- `from_segmentation`: the pixels whose segmentation id is kept, or not background (ManiSkill,
  MuJoCo, Isaac Lab, Genesis ids), and `from_depth`: the pixels nearer than a distance (Isaac
  Lab's depth), in `pixelmaps.py`.

`margin=k` on each grows the kept region by `k` pixels (a `(2k + 1)`-square max-pool; `k` at
most the frame's larger side): the agent's anti-aliased edges stay in front. `hsv_above` is
MaDi's `splice` test and `salient_patches` SGQN's random patches of an attribution map.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..inputs.arrays import same_kind
from ..inputs.checks import rgb_frames
from .chroma import chroma_composite, chroma_key
from .greenscreen import PRESETS, keep_table
from .pixelmaps import from_depth, from_segmentation
from .shared import channel_shape, constant, grow, is_finite

__all__ = [
    "blue_dominant",
    "chroma_composite",
    "chroma_key",
    "color_key",
    "from_depth",
    "from_segmentation",
    "green_screen",
    "hsv_above",
    "salient_patches",
]


def hsv_above(obs: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """`(N, k, 1, H, W)` bool: where a frame's pixel has hue, saturation and value all above
    `thresholds` (a `(3,)` tensor: H in radians, S in 0..1, V in the obs's units).

    HSV as kornia's `rgb_to_hsv` defines it, on the obs as given: V = max(R, G, B), S = (V -
    min) / V (0 for black), H from the sextant of the first maximal channel (R, then G, then B)
    in [0, 2 pi), 0 for grey (kornia 0.9's, which folds a hue rounded up to 2 pi back to 0).
    The same float32 arithmetic, so the thresholds split pixels
    exactly where kornia's would.
    """
    n, c, h, w = obs.shape
    rgb = obs.reshape(n, c // 3, 3, h, w)
    rgb = rgb if rgb.dtype == torch.float32 else rgb.float()
    top = rgb.amax(2)
    delta = top - rgb.amin(2)
    sat = delta / torch.where(top == 0, torch.ones_like(top), top + 1e-8)
    delta = torch.where(delta == 0, torch.ones_like(delta), delta)
    # distances below the maximum, per channel: (max - R, max - G, max - B)
    dr, dg, db = (top.unsqueeze(2) - rgb).unbind(2)
    r, g = rgb[:, :, 0], rgb[:, :, 1]
    sextant = torch.where(
        r == top, db - dg, torch.where(g == top, (dr - db) + 2.0 * delta, (dg - dr) + 4.0 * delta)
    )
    hue = 2.0 * math.pi * ((sextant / delta / 6.0) % 1.0)
    hue = hue.masked_fill(hue >= 2.0 * math.pi, 0.0)  # a tiny negative hue wraps to 2 pi: 0
    t = thresholds.to(device=obs.device, dtype=torch.float32)
    keep = (hue > t[0]) & (sat > t[1]) & (top > t[2])
    return keep.unsqueeze(2)


def salient_patches(
    cam: torch.Tensor,
    image_size: int,
    grid: int = 4,
    quantile: float = 0.9,
    patch_proba: float = 0.7,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """`(N, 1, image_size, image_size)` float 0/1: SGQN's random salient patches.

    The attribution map `cam` `(N, H, W)` is average-pooled to a `grid x grid` of patches;
    the patches at or above the sample's `quantile` are kept each with probability
    `patch_proba`, and one of them (uniformly) always is; the kept patches are upsampled
    (nearest) to `image_size`.
    """
    if cam.dim() == 4 and cam.shape[1] == 1:
        cam = cam[:, 0]
    if cam.dim() != 3:
        raise ValueError(f"cam must be (N, H, W) or (N, 1, H, W), got {tuple(cam.shape)}")
    if not 0 <= patch_proba <= 1 or not 0 <= quantile <= 1:
        raise ValueError(
            f"quantile and patch_proba must be in [0, 1], got {quantile}, {patch_proba}"
        )
    pooled = F.adaptive_avg_pool2d(cam.float(), grid).flatten(1)  # (N, grid * grid)
    q = torch.quantile(pooled, quantile, dim=1, keepdim=True)
    salient = pooled >= q
    u = torch.rand(pooled.shape + (2,), device=cam.device, generator=generator)
    keep = salient & (u[..., 0] < patch_proba)
    # the one patch always kept: the salient patch with the largest uniform draw
    one = torch.where(salient, u[..., 1], -1.0).argmax(dim=1, keepdim=True)
    keep.scatter_(1, one, True)
    patches = keep.view(-1, 1, grid, grid).float()
    return F.interpolate(patches, size=(image_size, image_size), mode="nearest")


@same_kind("obs")
def green_screen(
    obs: torch.Tensor, preset: str = "dmcgb", *, margin: int = 0, layout: str = "NCHW"
) -> torch.Tensor:
    """False on exactly the pixels DMControl-GB's `do_green_screen` replaces.

    Args:
        obs: `(N, 3 * frames, H, W)` (or with `layout="NHWC"`, `(N, H, W, 3 * frames)` or RGBA
            `(N, H, W, 4)`) uint8, or float 0..255 (read as the uint8 colours they round to,
            as DMC-GB's renderer gives them).
        preset: `"dmcgb"`: HSV h 100-185 degrees, s 80-255, v 70-255, with DMC-GB's float
            rounding on the bounds.
        margin: grow the kept region by this many pixels.
        layout: `"NCHW"` or `"NHWC"`, the obs's.

    Returns:
        `(N, frames, H, W)` (NHWC: `(N, H, W, frames)`) bool keep mask on the obs's device.

    One gather from a table of all 2**24 colours (16 MB per device, built on the first call
    in about a second on one core): see
    `mixshard.augment.greenscreen`.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    rgb, dim = rgb_frames(obs, layout)
    if rgb.dtype != torch.uint8:
        rgb = rgb.round().clamp_(0, 255).to(torch.uint8)
    r, g, b = rgb.unbind(dim)
    # the colour's table index r << 16 | g << 8 | b, in place on one int32 plane per frame
    # (a weighted sum over the channel dimension is 5-25x slower on CPUs)
    code = r.to(torch.int32, memory_format=torch.contiguous_format)
    code.mul_(256).add_(g).mul_(256).add_(b)
    keep = keep_table(preset, rgb.device).index_select(0, code.view(-1)).view(code.shape)
    return grow(keep, margin, layout)


@same_kind("obs")
def color_key(
    obs: torch.Tensor,
    rgb: Sequence[float],
    tol: float = 0,
    *,
    margin: int = 0,
    layout: str = "NCHW",
) -> torch.Tensor:
    """False where every channel lies within `tol` of `rgb` (`|obs - rgb| <= tol`).

    Args:
        obs: `(N, 3 * frames, H, W)` uint8 or float 0..255 (NHWC: `(N, H, W, 3 * frames)` or
            RGBA `(N, H, W, 4)`).
        rgb: the key colour, three finite numbers on 0..255.
        tol: the tolerance per channel, a finite number on 0..255 (0: that colour exactly).
        margin: grow the kept region by this many pixels.
        layout: `"NCHW"` or `"NHWC"`, the obs's.

    Returns:
        `(N, frames, H, W)` (NHWC: `(N, H, W, frames)`) bool keep mask on the obs's device.
    """
    key = tuple(rgb) if isinstance(rgb, Sequence) else ()
    # (a NaN compares false, so a NaN key or tolerance would key out every pixel)
    if len(key) != 3 or not all(is_finite(c) for c in key):
        raise ValueError(f"rgb must be three finite numbers (R, G, B) on 0..255, got {rgb!r}")
    if not is_finite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    x, dim = rgb_frames(obs, layout)
    lows, highs = tuple(float(c) - tol for c in key), tuple(float(c) + tol for c in key)
    if x.dtype == torch.uint8:
        # for integer colours, x < lo is x < ceil(lo): uint8 bounds compare in uint8
        ints = [(max(math.ceil(lo), 0), min(math.floor(hi), 255)) for lo, hi in zip(lows, highs)]
        return grow(_outside(x.unbind(dim), ints), margin, layout)
    shape = channel_shape(dim)
    lo = constant(lows, torch.float64, x.device).view(shape)
    hi = constant(highs, torch.float64, x.device).view(shape)
    return grow(((x < lo) | (x > hi)).any(dim), margin, layout)


def _outside(planes: Sequence[torch.Tensor], bounds: list[tuple[int, int]]) -> torch.Tensor:
    """Bool: where any uint8 plane lies outside its `[lo, hi]` (0 <= lo, hi <= 255): a
    comparison per plane and bound, none for a bound of 0 or 255, into one reused buffer (a
    broadcast compare of all three channels, then `any`, is 3-5x slower on CPUs)."""
    keep = torch.zeros(planes[0].shape, dtype=torch.bool, device=planes[0].device)
    if any(lo > hi for lo, hi in bounds):  # a channel no value is within: nothing keyed
        return keep.logical_not_()
    scratch = torch.empty_like(keep)
    for plane, (lo, hi) in zip(planes, bounds):
        if lo > 0:
            keep.logical_or_(torch.lt(plane, lo, out=scratch))
        if hi < 255:
            keep.logical_or_(torch.gt(plane, hi, out=scratch))
    return keep


@same_kind("obs")
def blue_dominant(obs: torch.Tensor, *, margin: int = 0, layout: str = "NCHW") -> torch.Tensor:
    """False where blue exceeds both green and red (DBC's natural-video key:
    `b > g and b > r` takes the background).

    Args:
        obs: `(N, 3 * frames, H, W)` uint8 or float (NHWC: `(N, H, W, 3 * frames)` or RGBA
            `(N, H, W, 4)`).
        margin: grow the kept region by this many pixels.
        layout: `"NCHW"` or `"NHWC"`, the obs's.

    Returns:
        `(N, frames, H, W)` (NHWC: `(N, H, W, frames)`) bool keep mask on the obs's device.
    """
    rgb, dim = rgb_frames(obs, layout)
    r, g, b = rgb.unbind(dim)
    return grow((b <= g) | (b <= r), margin, layout)

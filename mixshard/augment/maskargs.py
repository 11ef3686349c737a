"""What the mask builders accept, checked once for all of them: the layout (named, never
guessed from a shape), an observation's colours as a view, a segmentation or depth map's shape
(and that it fits the observation it is for), and the margin a keep mask grows by.

A layout's masks: NCHW observations `(N, 3k, H, W)` give `(N, k, H, W)`, NHWC `(N, H, W, 3k)`
(or RGBA `(N, H, W, 4)`, keyed on RGB) give `(N, H, W, k)`; a map gives a mask of its own
shape, `(N, H, W)`, `(N, k, H, W)` (NCHW) or `(N, H, W, k)` (NHWC).
"""

from __future__ import annotations

import functools
import math
import numbers

import torch
import torch.nn.functional as F

from ..core.checks import is_number
from .inputs import SMALL_CHANNELS, check_obs

LAYOUTS = ("NCHW", "NHWC")


def check_layout(layout: object) -> str:
    """`layout` if it is `"NCHW"` or `"NHWC"`, else `ValueError`."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(
            f"layout must be 'NCHW' or 'NHWC' (it is never guessed from the shape), got {layout!r}"
        )
    return layout


def rgb_frames(obs: object, layout: str) -> tuple[torch.Tensor, int]:
    """`obs` as a view with each frame's R, G, B in one dimension, and that dimension:
    NCHW `(N, 3k, H, W)` as `(N, k, 3, H, W)` (dimension 2), NHWC `(N, H, W, 3k)` as
    `(N, H, W, k, 3)` (dimension 4; RGBA `(N, H, W, 4)`: its RGB as `(N, H, W, 1, 3)`).
    Reducing over that dimension gives the layout's mask shape. uint8 or float, checked."""
    if check_layout(layout) == "NCHW":
        obs = check_obs(obs)
        n, c, h, w = obs.shape
        rgb, dim = obs.reshape(n, c // 3, 3, h, w), 2
    else:
        obs = _check_obs_last(obs)
        n, h, w, c = obs.shape
        rgb = obs[..., :3].unsqueeze(3) if c == 4 else obs.reshape(n, h, w, c // 3, 3)
        dim = 4
    if not (obs.dtype == torch.uint8 or obs.is_floating_point()):
        raise ValueError(f"obs must be uint8 or float 0..255, got {obs.dtype}")
    return rgb, dim


def _check_obs_last(obs: object) -> torch.Tensor:
    """`obs` if it is an `(N, H, W, 3k)` or RGBA `(N, H, W, 4)` tensor, else `TypeError` /
    `ValueError`; channels-first data declared channels-last is refused by its shape (its W
    may be a multiple of 3 and would silently be read as W / 3 frames)."""
    if not isinstance(obs, torch.Tensor):
        kind = f"{type(obs).__module__}.{type(obs).__qualname__}"
        raise TypeError(f"obs must be a torch.Tensor of shape (N, H, W, 3k), got {kind}")
    shape = tuple(obs.shape)
    if obs.dim() == 4 and _looks_first(shape):
        raise ValueError(
            f"obs {shape} look channels-first (N, 3k, H, W) but layout='NHWC' was given: pass "
            f"layout='NCHW' (or obs.permute(0, 2, 3, 1))"
        )
    if obs.dim() != 4 or (shape[3] != 4 and (shape[3] % 3 or shape[3] == 0)):
        raise ValueError(
            f"obs must be (N, H, W, 3k) or RGBA (N, H, W, 4) with layout='NHWC', got {shape}"
        )
    return obs


def _looks_first(shape: tuple[int, ...]) -> bool:
    """A 4-D shape whose second dimension looks like a few channels or frames (at most 30)
    and whose last like an image's side (more): `(N, 3, 84, 84)`, `(N, 1, 64, 64)`. (Images
    of 30 pixels or fewer are not told apart: `obs=` catches those maps.)"""
    return shape[1] <= SMALL_CHANNELS < shape[3]


def _looks_last(shape: tuple[int, ...]) -> bool:
    """The mirror of `_looks_first`: `(N, 64, 64, 1)`, `(N, 84, 84, 3)`."""
    return shape[3] <= SMALL_CHANNELS < shape[1]


def check_map(name: str, x: torch.Tensor, layout: str) -> None:
    """A segmentation or depth map: `(N, H, W)`, or `(N, k, H, W)` (NCHW) or `(N, H, W, k)`
    (NHWC); a 4-D map that looks like the other layout is refused, naming the fix."""
    check_layout(layout)
    shape = tuple(x.shape)
    if x.dim() not in (3, 4):
        raise ValueError(
            f"{name} must be (N, H, W), (N, k, H, W) with layout='NCHW' or (N, H, W, k) with "
            f"layout='NHWC', got {shape}"
        )
    if x.dim() == 4 and layout == "NCHW" and _looks_last(shape):
        raise ValueError(
            f"{name} {shape} looks channels-last (N, H, W, k) but layout='NCHW' was given: "
            f"pass layout='NHWC'"
        )
    if x.dim() == 4 and layout == "NHWC" and _looks_first(shape):
        raise ValueError(
            f"{name} {shape} looks channels-first (N, k, H, W) but layout='NHWC' was given: "
            f"pass layout='NCHW'"
        )


def check_fits(name: str, x: torch.Tensor, obs: object, layout: str) -> None:
    """`x` (a checked map) covers the images of `obs` (same layout): the same N, H and W, and
    one frame or the obs's k."""
    rgb, dim = rgb_frames(obs, layout)
    given = tuple(obs.shape)  # type: ignore[attr-defined]
    if dim == 2:
        n, k, _, h, w = rgb.shape
    else:
        n, h, w, k, _ = rgb.shape
    shape = tuple(x.shape)
    if x.dim() == 3:
        fits = shape == (n, h, w)
    elif layout == "NCHW":
        fits = shape[0] == n and shape[1] in (1, k) and shape[2:] == (h, w)
    else:
        fits = shape[:3] == (n, h, w) and shape[3] in (1, k)
    if not fits:
        frames = f"1 or {k}" if k > 1 else "1"
        expected = (
            f"({n}, {h}, {w}) or ({n}, {frames}, {h}, {w})"
            if layout == "NCHW"
            else f"({n}, {h}, {w}) or ({n}, {h}, {w}, {frames})"
        )
        raise ValueError(
            f"{name} {shape} does not fit obs {given} (layout={layout!r}): expected {expected}, "
            f"the images' size"
        )


def grow(keep: torch.Tensor, margin: int, layout: str = "NCHW") -> torch.Tensor:
    """`keep` (a builder's mask, bool or float) with every kept pixel's `(2 * margin + 1)`-
    square neighbourhood kept too: a max-pool, each frame on its own, in either layout."""
    if not isinstance(margin, numbers.Integral) or isinstance(margin, bool) or margin < 0:
        raise ValueError(f"margin must be an int >= 0 (pixels), got {margin!r}")
    margin = int(margin)
    last = keep.dim() == 4 and layout == "NHWC"
    side = max(keep.shape[1:3] if last else keep.shape[-2:])
    if margin > side:  # (margin side - 1 already spreads one kept pixel over the whole frame)
        raise ValueError(
            f"margin must be at most the frame's larger side ({side} pixels), got {margin}"
        )
    if margin == 0:
        return keep
    # contiguous (N, k, H, W) planes for max_pool2d: (torch 2.14's channels-last max-pool
    # of uint8 fails on a large batch: "Expected input_depth * input_height * ...")
    n, h, w, k = keep.shape if last else (keep.shape[0], *keep.shape[-2:], 0)
    if keep.dim() == 3 or (last and k == 1):
        planes = keep.reshape(n, 1, h, w)  # a view
    else:
        planes = keep.permute(0, 3, 1, 2).contiguous() if last else keep
    values = planes if planes.is_floating_point() else planes.to(torch.uint8)
    grown = F.max_pool2d(values, 2 * margin + 1, stride=1, padding=margin)
    grown = grown if keep.is_floating_point() else grown.bool()
    if last and k > 1:
        return grown.permute(0, 2, 3, 1).contiguous()
    return grown.view(keep.shape)


def is_finite(x: object) -> bool:
    """A real number (numpy's too), not a bool, NaN or infinite."""
    return is_number(x) and math.isfinite(float(x))  # type: ignore[arg-type]


@functools.lru_cache(maxsize=64)
def constant(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small flat constant tensor on `device`, made once (a fresh `torch.tensor(...,
    device=...)` per call is a blocking host-to-device copy)."""
    return torch.tensor(values, dtype=dtype).to(device)


def channel_shape(dim: int) -> tuple[int, ...]:
    """The shape that puts three per-channel values on `rgb_frames`' channel dimension."""
    return (1, 1, 3, 1, 1) if dim == 2 else (3,)

"""Masks for `composite`: which pixels of an observation to keep in front of a background.

Public as `mixshard.masks`. Every builder returns a *keep* mask in `composite`'s convention
(true where the observation stays, the background shows elsewhere), bool and shaped
`(N, frames, H, W)` for `(N, 3 * frames, H, W)` observations, which `composite` and
`Backgrounds.composite` take as they are. They are batched tensor ops on the input's device (no
Python loop over pixels or samples, no host sync), on uint8 or float 0..255 observations:

- `green_screen`: DMControl-GB's green screen (its `do_green_screen`, pixel for pixel);
- `color_key`: a chroma key of any colour and tolerance;
- `blue_dominant`: DBC's natural-video key (`b > g and b > r` shows the background);
- `from_segmentation`: the pixels whose segmentation id is kept (ManiSkill's way).

`margin=k` on each grows the kept region by `k` pixels (a `(2k + 1)`-square max-pool; `k` at
most the frame's larger side): the agent's anti-aliased edges stay in front. `hsv_above` is
MaDi's `splice` test and `salient_patches` SGQN's random patches of an attribution map.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..core.checks import is_number
from .greenscreen import PRESETS, keep_table
from .inputs import check_obs

__all__ = [
    "blue_dominant",
    "color_key",
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


def green_screen(obs: torch.Tensor, preset: str = "dmcgb", *, margin: int = 0) -> torch.Tensor:
    """False on exactly the pixels DMControl-GB's `do_green_screen` replaces.

    Args:
        obs: `(N, 3 * frames, H, W)` uint8, or float 0..255 (read as the uint8 colours they
            round to, as DMC-GB's renderer gives them).
        preset: `"dmcgb"`: HSV h 100-185 degrees, s 80-255, v 70-255, with DMC-GB's float
            rounding on the bounds.
        margin: grow the kept region by this many pixels.

    Returns:
        `(N, frames, H, W)` bool keep mask on the obs's device.

    One gather from a table of all 2**24 colours (16 MB per device, built on the first call
    in about a second on one core): see
    `mixshard.augment.greenscreen`.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    rgb = _frames(obs)
    if rgb.dtype != torch.uint8:
        rgb = rgb.round().clamp_(0, 255).to(torch.uint8)
    # the colour's table index r << 16 | g << 8 | b, in place on one int32 plane per frame
    # (a weighted sum over the channel dimension is 5-25x slower on CPUs)
    code = rgb[:, :, 0].to(torch.int32)
    code.mul_(256).add_(rgb[:, :, 1]).mul_(256).add_(rgb[:, :, 2])
    keep = keep_table(preset, obs.device).index_select(0, code.flatten()).view(code.shape)
    return grow(keep, margin)


def color_key(
    obs: torch.Tensor, rgb: Sequence[float], tol: float = 0, *, margin: int = 0
) -> torch.Tensor:
    """False where every channel lies within `tol` of `rgb` (`|obs - rgb| <= tol`).

    Args:
        obs: `(N, 3 * frames, H, W)` uint8 or float 0..255.
        rgb: the key colour, three finite numbers on 0..255.
        tol: the tolerance per channel, a finite number on 0..255 (0: that colour exactly).
        margin: grow the kept region by this many pixels.

    Returns:
        `(N, frames, H, W)` bool keep mask on the obs's device.
    """
    key = tuple(rgb) if isinstance(rgb, Sequence) else ()
    # (a NaN compares false, so a NaN key or tolerance would key out every pixel)
    if len(key) != 3 or not all(_is_finite(c) for c in key):
        raise ValueError(f"rgb must be three finite numbers (R, G, B) on 0..255, got {rgb!r}")
    if not _is_finite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    x = _frames(obs)
    lo = _constant(tuple(float(c) - tol for c in key), torch.float64, obs.device)
    hi = _constant(tuple(float(c) + tol for c in key), torch.float64, obs.device)
    return grow(((x < lo) | (x > hi)).any(2), margin)


def blue_dominant(obs: torch.Tensor, *, margin: int = 0) -> torch.Tensor:
    """False where blue exceeds both green and red (DBC's natural-video key:
    `b > g and b > r` takes the background).

    Returns:
        `(N, frames, H, W)` bool keep mask on the obs's device.
    """
    r, g, b = _frames(obs).unbind(2)
    return grow((b <= g) | (b <= r), margin)


def from_segmentation(
    seg: torch.Tensor,
    ids: int | Sequence[int] | torch.Tensor | np.ndarray,
    *,
    margin: int = 0,
) -> torch.Tensor:
    """True where the segmentation id is one of `ids` (ManiSkill's kept actors and links).

    Args:
        seg: integer ids `(N, frames, H, W)`, or `(N, H, W)` for one frame.
        ids: the ids to keep: an int, a sequence of ints, or an integer tensor or numpy array
            (numpy integers count as ints; bools and floats are refused).
        margin: grow the kept region by this many pixels.

    Returns:
        `(N, frames, H, W)` bool keep mask (`(N, 1, H, W)` for a 3-D `seg`) on seg's device.
    """
    if not isinstance(seg, torch.Tensor):
        raise TypeError(f"seg must be a torch.Tensor of integer ids, got {type(seg).__name__}")
    if seg.dtype == torch.bool or seg.is_floating_point() or seg.is_complex():
        raise TypeError(f"seg must hold integer ids, got {seg.dtype}")
    if seg.dim() not in (3, 4):
        raise ValueError(f"seg must be (N, frames, H, W) or (N, H, W), got {tuple(seg.shape)}")
    kept = _kept_ids(ids, seg.device)
    keep = torch.isin(seg if seg.dim() == 4 else seg.unsqueeze(1), kept)
    return grow(keep, margin)


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _kept_ids(ids: object, device: torch.device) -> torch.Tensor:
    """`from_segmentation`'s `ids` as a flat int64 tensor on `device`, checked."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise TypeError(f"ids must be integers, got a {ids.dtype} tensor")
        return ids.to(device).flatten()
    if isinstance(ids, np.ndarray):
        if ids.dtype.kind not in "iu":  # (a bool array is a mask, not a list of ids)
            raise TypeError(f"ids must be integers, got a numpy array of {ids.dtype}")
        if ids.dtype == np.uint64 and ids.size and int(ids.max()) > _INT64[1]:
            raise ValueError(f"ids must fit in int64, got a numpy uint64 id of {ids.max()}")
        return torch.from_numpy(ids.astype(np.int64).ravel()).to(device)
    values = (ids,) if _is_id(ids) or not isinstance(ids, Iterable) else tuple(ids)
    if not all(_is_id(i) for i in values):
        raise TypeError(
            "ids must be an int, a sequence of ints or a tensor (or numpy array) of integers, "
            f"got {ids!r}"
        )
    values = tuple(int(i) for i in values)  # (numpy integers: one cache key per value)
    if not all(_INT64[0] <= i <= _INT64[1] for i in values):
        raise ValueError(f"ids must fit in int64, got {ids!r}")
    return _constant(values, torch.int64, device, per_channel=False)


def _is_id(x: object) -> bool:
    """An int or a numpy integer, not a bool (numpy's bool is no `numbers.Integral`)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def grow(keep: torch.Tensor, margin: int) -> torch.Tensor:
    """`keep` `(N, frames, H, W)` bool with every kept pixel's `(2 * margin + 1)`-square
    neighbourhood kept too (a max-pool, each frame on its own)."""
    if not isinstance(margin, numbers.Integral) or isinstance(margin, bool) or margin < 0:
        raise ValueError(f"margin must be an int >= 0 (pixels), got {margin!r}")
    margin = int(margin)
    side = max(keep.shape[-2:])
    if margin > side:  # (margin side - 1 already spreads one kept pixel over the whole frame)
        raise ValueError(
            f"margin must be at most the frame's larger side ({side} pixels), got {margin}"
        )
    if margin == 0:
        return keep
    size = 2 * margin + 1
    grown = F.max_pool2d(keep.to(torch.uint8), size, stride=1, padding=margin)
    return grown.bool()


def _frames(obs: object) -> torch.Tensor:
    """`obs` `(N, 3k, H, W)` as a `(N, k, 3, H, W)` view, checked."""
    obs = check_obs(obs)
    if not (obs.dtype == torch.uint8 or obs.is_floating_point()):
        raise ValueError(f"obs must be uint8 or float 0..255, got {obs.dtype}")
    n, c, h, w = obs.shape
    return obs.reshape(n, c // 3, 3, h, w)


def _is_finite(x: object) -> bool:
    """A real number (numpy's too), not a bool, NaN or infinite."""
    return is_number(x) and math.isfinite(float(x))  # type: ignore[arg-type]


@functools.lru_cache(maxsize=64)
def _constant(
    values: tuple, dtype: torch.dtype, device: torch.device, per_channel: bool = True
) -> torch.Tensor:
    """A small constant tensor on `device`, made once (a fresh `torch.tensor(...,
    device=...)` per call is a blocking host-to-device copy); `per_channel`: shaped
    `(1, 1, 3, 1, 1)` against `(N, k, 3, H, W)` frames."""
    t = torch.tensor(values, dtype=dtype).to(device)
    return t.view(1, 1, 3, 1, 1) if per_channel else t

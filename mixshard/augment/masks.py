"""Masks for `composite`: which pixels of an observation to keep in front of a background.

`hsv_above` is MaDi's `splice` test (keep the bright, coloured pixels: the agent in front of a
plain DMC floor and sky); `salient_patches` is SGQN's random patches of an attribution map.
Both are batched and stay on the input's device.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .inputs import check_weights


def broadcast_mask(
    mask: object, n: int, k: int, h: int, w: int, device: torch.device
) -> torch.Tensor:
    """`mask` (for `composite`) as a view that broadcasts against `(N, k, 3, H, W)`, checked:
    `(N, 1, H, W)` per pixel, `(N, 3k, H, W)` per channel or any 5-D shape that broadcasts."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.device != device:
        raise ValueError(f"obs is on {device} but mask on {mask.device}")
    check_weights("mask", mask, bool_ok=True)
    shape = tuple(mask.shape)
    if mask.dim() == 4 and shape[1] in (1, 3 * k):
        frames, chans = (1, 1) if shape[1] == 1 else (k, 3)
        mask = mask.reshape(shape[0], frames, chans, shape[2], shape[3])
    if mask.dim() != 5 or any(m not in (1, s) for m, s in zip(mask.shape, (n, k, 3, h, w))):
        raise ValueError(
            f"mask {shape} does not broadcast to obs {(n, 3 * k, h, w)}: give (N, 1, H, W) per "
            f"pixel, (N, 3k, H, W) per channel or (N, k, 1, H, W) per frame"
        )
    return mask


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

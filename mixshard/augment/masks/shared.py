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

from ...core.checks import is_number


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

"""`blend_frames`: a CPU's `composite` and `blend` as one pass of compiled code (`_lerp.c`).

The torch path (`pasting._masked_lerp`, `ops._blend_one_pass`) is what every other device
runs: a gather, a cast, the weights and a `torch.lerp`, each a pass of its own. On a GPU those
passes overlap; on a CPU each one's compute adds to the others' (2x `obs.clone()` at best).
`_lerp.c` makes each output value from its inputs at once, with torch's lerp as its vector
kernel computes it, so it gives the torch path's bytes. Where the module is not built, or for
what it does not take (not float32, another device, gradients, lines wider than 4,096),
callers run the torch path; the tests run both and compare them.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import torch

_lerp: ModuleType | None
try:  # built where the install had a C compiler
    from . import _lerp
except ImportError:  # pragma: no cover - the torch path does it
    _lerp = None

_KINDS = {None: 0, torch.uint8: 1, torch.float32: 2}  # no mask, a bool one, a float one


def usable(obs: torch.Tensor, frames: torch.Tensor, out: torch.Tensor, *weights) -> bool:
    """Whether `blend_frames` takes these: float32 obs and a contiguous out, uint8 frames, on a
    CPU, and nothing (obs, the mask and alpha in `weights`) requiring grad."""
    tensors = [t for t in (obs, frames, *weights) if isinstance(t, torch.Tensor)]
    return (
        _lerp is not None
        and obs.dtype == out.dtype == torch.float32
        and frames.dtype == torch.uint8
        and out.is_contiguous()
        and obs.shape[-1] <= 4096
        and all(t.device.type == "cpu" for t in tensors)
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
    )


def blend_images(out, obs, imgs, keep, alpha) -> None:
    """`blend_frames` with `imgs` `(N, 3, H, W)` (a background for all of a sample's frames) or
    `(N, 3k, H, W)` (one per frame), as `composite` and `blend` take them."""
    n, c, h, w = obs.shape
    per_sample = imgs.shape[1] // 3
    index = torch.arange(n).unsqueeze(1) * per_sample
    index = index + torch.arange(c // 3) if per_sample > 1 else index.expand(n, c // 3)
    blend_frames(out, obs, imgs.reshape(-1, 3, h, w), index, keep, alpha)


def blend_frames(
    out: torch.Tensor,
    obs: torch.Tensor,
    frames: torch.Tensor,
    index: torch.Tensor,
    keep: torch.Tensor | None,
    alpha: float | torch.Tensor,
    flipped: torch.Tensor | None = None,
) -> None:
    """`out` `(N, 3k, H, W)` = `lerp(obs, background, alpha * (1 - keep))`, the background of
    sample n's frame f being `frames[index[n, f]]` (`(F, 3, H, W)` uint8), mirrored where
    `flipped[n]`; `keep` None (blend everywhere) or a mask broadcasting to `(N, k, 3, H, W)`.
    At a float alpha of 1 with a mask the weight is the mask itself, as in `_masked_lerp`."""
    n, c, h, w = obs.shape
    if obs.numel() == 0:  # nothing to blend (and no mask row to check the size of)
        return
    k = c // 3
    plain = keep is not None and not isinstance(alpha, torch.Tensor) and float(alpha) == 1.0
    strides = (0, 0, 0)
    if keep is not None:
        keep = keep.to(torch.float32) if keep.dtype != torch.bool else keep.view(torch.uint8)
        if tuple(keep.shape[-2:]) != (h, w):
            # `_lerp.c` walks a row's pixels as one contiguous plane: a mask broadcast over H
            # or W (rare) is made whole over the plane only, its sample, frame and channel
            # dimensions left broadcast (at most obs's pixels; the usual masks skip this)
            keep = keep.expand(*keep.shape[:-2], h, w)
        keep = keep.contiguous()  # the broadcast dims then have stride 0 in the expanded view
        sn, sk, sc, *_ = keep.expand(n, k, 3, h, w).stride()
        strides = (sn, sk, sc)
    alphas = (
        alpha.detach().to(torch.float32).reshape(-1).contiguous()
        if isinstance(alpha, torch.Tensor)
        else torch.tensor([float(alpha)], dtype=torch.float32)
    )
    _lerp.blend_frames(  # type: ignore[union-attr]
        _array(out),
        _array(obs.contiguous()),
        _array(frames.contiguous()),
        _array(index.to(torch.int64).contiguous()),
        None if flipped is None else _array(flipped.contiguous().view(torch.uint8)),
        None if keep is None else _array(keep),
        strides,
        _KINDS[None if keep is None else keep.dtype],
        _array(alphas),
        int(alphas.numel() > 1),
        plain,
        n,
        k,
        h,
        w,
        torch.get_num_threads(),
    )


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()

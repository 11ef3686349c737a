"""`composite`: backgrounds pasted behind the masked part of observations, in one pass.

The masked counterpart of `ops.blend` (SGQN's, MaDi's and SODA's pastes, `Backgrounds`'s
green screen): the same checks, broadcast over frames through a view, and on a CPU the same
chunks of samples whose float backgrounds stay in cache (`ops.CPU_SCRATCH_BYTES`).
"""

from __future__ import annotations

import torch

from . import ops
from .masks import broadcast_mask
from .ops import blend, check_blend_args, frames_of


def composite(
    obs: torch.Tensor,
    imgs: torch.Tensor,
    mask: torch.Tensor | None = None,
    alpha: float | torch.Tensor = 1.0,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Paste backgrounds behind the masked part of frame-stacked observations, in one pass.

    Each output pixel is `lerp(obs, img, alpha * (1 - mask))`: where `mask` is 1 the
    observation stays exactly, where it is 0 the background shows (weight `alpha`), fractional
    masks blend. `mask=None` is `blend(obs, imgs, alpha)`.

    Args:
        obs: `(N, 3k, H, W)` float in 0..255, or uint8.
        imgs: `(N, 3, H, W)` backgrounds, uint8 or float 0..255, the same on every frame; or
            `(N, 3k, H, W)`, a background per frame.
        mask: bool or float, broadcast against the observations: `(N, 1, H, W)` per pixel,
            `(N, 3k, H, W)` per channel, `(N, k, 1, H, W)` per frame and pixel (or any shape
            that broadcasts to `(N, k, 3, H, W)`; a leading 1 shares a mask across samples).
            Float masks hold weights in [0, 1]; integer masks (a 0/255 uint8) are refused.
        alpha: the backgrounds' weight where the mask is 0: a float or an `(N,)` float tensor.
        out: where to write (`out=obs` works in place); not when anything requires grad.

    The values of a float mask and an alpha tensor are checked on the CPU (in [0, 1], no NaN);
    on another device they are not, as that would wait for the device on every call.

    Returns:
        A tensor like `obs` (uint8 obs rounded half up). Differentiable in obs, imgs, mask and
        alpha when they require grad (out of place then).
    """
    if mask is None:
        return blend(obs, imgs, alpha, out=out)
    k = check_blend_args(obs, imgs, alpha, out)
    n, _, h, w = obs.shape
    five = (n, k, 3, h, w)
    dtype = obs.dtype if obs.is_floating_point() else torch.float32
    keep = broadcast_mask(mask, n, k, h, w, obs.device)
    grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (obs, imgs, mask, alpha)
    )
    if grad:
        if out is not None:
            raise ValueError("out= cannot be used when obs, imgs, mask or alpha require grad")
        return _composite_rows(obs.view(five), imgs, keep, alpha, dtype).view(obs.shape)
    result = torch.empty_like(obs) if out is None else out
    # uint8 obs under a bool mask at full weight: a plain paste, a select with no float math
    # (for float obs the lerp below, the mask its weight, measured faster than a select)
    paste = keep.dtype == torch.bool and not isinstance(alpha, torch.Tensor) and alpha == 1.0
    paste = paste and obs.dtype == imgs.dtype == torch.uint8
    # On a CPU, chunks of samples, so that each chunk's float backgrounds and weights stay in
    # cache (as `blend` does); elsewhere one chunk of all.
    frames = imgs.shape[1] // 3
    rows = n
    if obs.device.type == "cpu":
        rows = max(1, ops.CPU_SCRATCH_BYTES // (3 * frames * h * w * torch.finfo(dtype).bits // 8))
    for lo in range(0, n, rows):
        hi = min(lo + rows, n)
        part = slice(lo, hi)
        m = keep[part] if keep.shape[0] != 1 else keep
        a = alpha[part] if isinstance(alpha, torch.Tensor) else alpha
        dst = result.view(five)[part]
        if paste:
            background = frames_of(imgs[part].to(obs.dtype), hi - lo, h, w)
            torch.where(m, obs.view(five)[part], background, out=dst)
        elif obs.dtype == dtype:
            _composite_rows(obs.view(five)[part], imgs[part], m, a, dtype, out=dst)
        else:
            mixed = _composite_rows(obs.view(five)[part], imgs[part], m, a, dtype)
            dst.copy_(mixed.add_(0.5).floor_())
    return result


def _composite_rows(
    src: torch.Tensor,
    imgs: torch.Tensor,
    keep: torch.Tensor,
    alpha: float | torch.Tensor,
    dtype: torch.dtype,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """`lerp(obs, img, alpha * (1 - mask))` of some samples: `src` `(n, k, 3, H, W)`."""
    n, _, _, h, w = src.shape
    src = src if src.dtype == dtype else src.to(dtype)
    background = frames_of(imgs.to(dtype), n, h, w)  # one frame: broadcast through the view
    keep = keep.to(dtype)
    if isinstance(alpha, torch.Tensor) or float(alpha) != 1.0:
        a = alpha.to(dtype).reshape(-1, 1, 1, 1, 1) if isinstance(alpha, torch.Tensor) else alpha
        start, end, weight = src, background, (1 - keep) * a
    else:  # the plain paste: lerp(img, obs, mask), the mask itself the weight (no temporary)
        start, end, weight = background, src, keep
    if out is None:
        return torch.lerp(start, end, weight)
    return torch.lerp(start, end, weight, out=out)

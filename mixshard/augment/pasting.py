"""`composite`: backgrounds pasted behind the masked part of observations, in one pass.

The masked counterpart of `ops.blend` (SGQN's, MaDi's and SODA's pastes, `Backgrounds`'s
green screen): the same checks, the backgrounds broadcast over frames through a view; on a CPU
one compiled pass (`fused.py`), elsewhere (and where it is not built) the torch ops.
"""

from __future__ import annotations

import torch

from . import fused
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
        return _composite_autograd(obs.view(five), imgs, keep, alpha, dtype).view(obs.shape)
    result = torch.empty_like(obs) if out is None else out
    if fused.usable(obs, imgs, result, mask, alpha):  # a CPU's one pass
        fused.blend_images(result, obs, imgs, keep, alpha)
        return result
    src, dst = obs.view(five), result.view(five)
    if keep.dtype == torch.bool and _full_weight(alpha) and obs.dtype == imgs.dtype == torch.uint8:
        torch.where(keep, src, frames_of(imgs, n, h, w), out=dst)  # a plain paste, no floats
    else:
        _masked_lerp(src, imgs, keep, alpha, dst)
    return result


def _full_weight(alpha: float | torch.Tensor) -> bool:
    """A float alpha of 1: where the mask is 0 the background replaces the observation."""
    return not isinstance(alpha, torch.Tensor) and float(alpha) == 1.0


def _masked_lerp(src, imgs, keep, alpha, dst) -> None:
    """`dst` = `lerp(src, img, alpha * (1 - keep))` in torch ops (what a GPU runs): `src` and
    `dst` `(N, k, 3, H, W)`, `keep` a checked mask broadcasting to them.

    At full weight (alpha 1.0) the mask itself is the weight, `lerp(img, obs, keep)`; else the
    weights are `keep * -alpha + alpha` (a bool mask) or `(-keep + 1) * alpha`, made at the
    mask's own shape (never per channel). With a bool mask they are 0 and 1 (or 0 and alpha),
    so the lerp returns the observation or the background (or their plain blend) exactly. uint8
    obs are blended as floats, rounded half up."""
    n, _, _, h, w = src.shape
    dtype = src.dtype if src.is_floating_point() else torch.float32
    background = frames_of(imgs, n, h, w).to(dtype)
    weight = torch.empty(keep.shape, dtype=dtype, device=src.device).copy_(keep)
    obs = src if src.dtype == dtype else src.to(dtype)
    mixed = dst if dst.dtype == dtype else torch.empty_like(obs)
    if _full_weight(alpha):
        torch.lerp(background, obs, weight, out=mixed)
    else:
        a = alpha.to(dtype).reshape(-1, 1, 1, 1, 1) if isinstance(alpha, torch.Tensor) else alpha
        # (out of place: a mask shared by all samples meets a per-sample alpha)
        if keep.dtype == torch.bool:
            weight = weight.mul(-a).add_(a)  # 0 where kept, alpha elsewhere: -a + a is +0
        else:
            weight = weight.neg_().add_(1).mul(a)  # (-x + 1 is 1 - x exactly)
        torch.lerp(obs, background, weight, out=mixed)
    if mixed is not dst:
        dst.copy_(mixed.add_(0.5).floor_())


def _composite_autograd(
    src: torch.Tensor,
    imgs: torch.Tensor,
    keep: torch.Tensor,
    alpha: float | torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """`lerp(obs, img, alpha * (1 - mask))`, out of place, so autograd can differentiate it
    (a fused `out=` write cannot be recorded): `src` `(n, k, 3, H, W)`."""
    n, _, _, h, w = src.shape
    src = src if src.dtype == dtype else src.to(dtype)
    background = frames_of(imgs.to(dtype), n, h, w)  # one frame: broadcast through the view
    keep = keep.to(dtype)
    if isinstance(alpha, torch.Tensor) or float(alpha) != 1.0:
        a = alpha.to(dtype).reshape(-1, 1, 1, 1, 1) if isinstance(alpha, torch.Tensor) else alpha
        return torch.lerp(src, background, (1 - keep) * a)
    return torch.lerp(background, src, keep)  # the plain paste: the mask itself the weight

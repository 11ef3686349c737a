"""`composite`: backgrounds pasted behind the masked part of observations, in one pass.

The masked counterpart of `ops.blend` (SGQN's, MaDi's and SODA's pastes, `Backgrounds`'s
green screen): observations channels-first or channels-last (`layouts.py`), the backgrounds
broadcast over frames through a view; the mask a tensor or a key (`keys.py`), made in the same
pass. `paste` is the one implementation, shared with `Backgrounds.composite`: on a CPU one
compiled pass (`fused.py`), elsewhere (and where it is not built) the torch ops.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..inputs.arrays import same_kind
from ..inputs.checks import check_alpha_out, warn_if_unit_range_at_site
from ..inputs.layouts import Geometry, keep_view, obs_geometry
from ..masks.keys import Key
from . import fused

Backgrounds5 = Callable[[], torch.Tensor]  # the torch path's `(N, 1 or k, 3, H, W)` backgrounds


@same_kind("obs", "imgs", "mask", "out")
def composite(
    obs: torch.Tensor,
    imgs: torch.Tensor,
    mask: torch.Tensor | Key | None = None,
    alpha: float | torch.Tensor = 1.0,
    *,
    layout: str = "NCHW",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Paste backgrounds behind the masked part of frame-stacked observations, in one pass.

    Each output pixel is `lerp(obs, img, alpha * (1 - mask))`: where `mask` is 1 the
    observation stays exactly, where it is 0 the background shows (weight `alpha`), fractional
    masks blend. `mask=None` is `blend(obs, imgs, alpha)`.

    Args:
        obs: `layout="NCHW"` (the default): `(N, 3k, H, W)`, k RGB frames; `"NHWC"`:
            `(N, H, W, C*k)`, k frames of RGB (C = 3) or RGBA (C = 4, the alpha comes back
            unchanged). uint8, or float in 0..255. How many frames channels-last obs hold is
            told by imgs or the mask, never guessed (`mixshard.augment.layouts`).
        imgs: backgrounds in obs's layout: 3 channels (one for all of a sample's frames) or
            3k (one per frame), uint8 or float 0..255.
        mask: a keep mask, bool or float in [0, 1]: `(N, H, W)` in either layout;
            channels-first `(N, 1, H, W)` per pixel, `(N, k, H, W)` per frame (what
            `mixshard.masks` builds), `(N, 3k, H, W)` per channel or 5-D shapes broadcasting
            to `(N, k, 3, H, W)`; channels-last `(N, H, W, 1)` or `(N, H, W, k)`. A 1 in N,
            H or W broadcasts. Integer masks (a 0/255 uint8) are refused. Or a key
            (`mixshard.keys.green_screen()`, ...): the builder's mask, made in the same pass.
        alpha: the backgrounds' weight where the mask is 0: a float or an `(N,)` float tensor.
        layout: `"NCHW"` or `"NHWC"`, of obs, imgs, out and the mask.
        out: where to write (`out=obs` works in place); not when anything requires grad.

    The values of a float mask and an alpha tensor are checked on the CPU (in [0, 1], no NaN);
    on another device they are not, as that would wait for the device on every call. Float
    obs within 0..1 are warned about once per calling line.

    Returns:
        A tensor of obs's layout, shape, dtype and device (uint8 obs rounded half up); no
        permuted copy of obs is made. Differentiable in obs, imgs, mask and alpha when they
        require grad (out of place then).
    """
    geom = _check(obs, imgs, mask, alpha, out, layout)
    warn_if_unit_range_at_site(obs)
    return composite_checked(geom, obs, imgs, mask, alpha, out)


def composite_checked(
    geom: Geometry,
    obs: torch.Tensor,
    imgs: torch.Tensor,
    mask: torch.Tensor | Key | None,
    alpha: float | torch.Tensor,
    out: torch.Tensor | None,
) -> torch.Tensor:
    """`composite` of checked obs (`geom`), imgs and alpha (`Overlay`'s call, which checks
    them once); the mask is checked by `paste`."""
    imgs5 = geom.five(imgs, 3)
    backdrop = fused.images(imgs5, geom.n, geom.frames) if imgs.dtype == torch.uint8 else None
    return paste(geom, obs, mask, alpha, out, backdrop, lambda: imgs5, imgs)


def _check(obs, imgs, mask, alpha, out, layout) -> Geometry:
    """`obs_geometry`, then imgs, alpha and out checked against it."""
    told = imgs.shape[-1 if layout == "NHWC" else 1] if _is_4d(imgs) else None
    geom = obs_geometry(obs, layout, imgs_channels=told, mask=mask)
    if not _is_4d(imgs):
        what = tuple(imgs.shape) if isinstance(imgs, torch.Tensor) else type(imgs).__name__
        raise ValueError(f"imgs must be {geom.shape(3, 1)} or {geom.shape(3)}, got {what}")
    if tuple(imgs.shape) not in (geom.shape(3, 1), geom.shape(3)):
        raise ValueError(
            f"imgs {tuple(imgs.shape)} do not fit obs {tuple(obs.shape)} (layout={layout!r}): "
            f"give {geom.shape(3, 1)} (one background for every frame) or {geom.shape(3)} "
            "(one per frame), of obs's N, H and W (mixshard.Overlay resizes backgrounds)"
        )
    if imgs.device != obs.device:
        raise ValueError(f"obs is on {obs.device} but imgs on {imgs.device}")
    if not (imgs.dtype == torch.uint8 or imgs.is_floating_point()):
        raise ValueError(f"imgs must be uint8 (or float 0..255), got {imgs.dtype}")
    check_alpha_out(alpha, out, obs)
    return geom


def _is_4d(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() == 4


def paste(
    geom: Geometry,
    obs: torch.Tensor,
    mask: torch.Tensor | Key | None,
    alpha: float | torch.Tensor,
    out: torch.Tensor | None,
    backdrop: fused.Backdrop | None,
    backgrounds: Backgrounds5,
    imgs: torch.Tensor | None = None,
) -> torch.Tensor:
    """The composite of checked `obs` (`geom`): the compiled pass from `backdrop` where it
    takes them, else the torch ops over `backgrounds()`. `mask` is checked here."""
    key = mask if isinstance(mask, Key) else None
    if key is not None:
        key.check(geom, obs.device)
    keep5 = None if mask is None or key is not None else keep_view(mask, geom, obs.device)
    if torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (obs, imgs, mask, alpha)
    ):
        if out is not None:
            raise ValueError("out= cannot be used when obs, imgs, mask or alpha require grad")
        keep5 = keep5 if key is None else key.keep5(obs, geom)
        return _composite_autograd(geom, obs, backgrounds(), keep5, alpha)
    result = torch.empty_like(obs) if out is None else out
    src5, dst5 = geom.five(obs), geom.five(result)
    if backdrop is not None and fused.usable(obs, backdrop.frames, result, keep5, alpha):
        compiled = None if key is None else key.compiled(geom)
        # (a key the pass cannot make, one with a margin: the builder's mask, then the pass)
        if (key is None or compiled is not None) and fused.run(
            dst5, src5, backdrop, keep5, compiled, alpha
        ):
            return result
    if key is not None:
        keep5 = key.keep5(obs, geom)
    _torch_paste(src5, backgrounds(), keep5, alpha, dst5)
    return result


def _full_weight(alpha: float | torch.Tensor) -> bool:
    """A float alpha of 1: where the mask is 0 the background replaces the observation."""
    return not isinstance(alpha, torch.Tensor) and float(alpha) == 1.0


def _torch_paste(src5, imgs5, keep5, alpha, dst5) -> None:
    """The torch ops' composite (what a GPU runs) of `(N, k, C, H, W)` views: RGB blended,
    RGBA's alpha copied."""
    in_place = dst5.data_ptr() == src5.data_ptr() and dst5.stride() == src5.stride()
    if src5.shape[2] == 4 and not in_place:
        dst5[:, :, 3:].copy_(src5[:, :, 3:])
    rgb, out = src5[:, :, :3], dst5[:, :, :3]
    plain = keep5 is not None and keep5.dtype == torch.bool and _full_weight(alpha)
    if plain and src5.dtype == imgs5.dtype == torch.uint8:
        torch.where(keep5, rgb, imgs5, out=out)  # a plain paste, no floats
    else:
        _masked_lerp(src5, imgs5, keep5, alpha, dst5)


def _masked_lerp(src5, imgs5, keep, alpha, dst5) -> None:
    """`dst` = `lerp(src, img, alpha * (1 - keep))` in torch ops over the RGB channels of
    `(N, k, C, H, W)` views, `keep` a checked mask broadcasting to them, or None (blend
    everywhere at alpha).

    At full weight (alpha 1.0) the mask itself is the weight, `lerp(img, obs, keep)`; else the
    weights are `keep * -alpha + alpha` (a bool mask) or `(-keep + 1) * alpha`, made at the
    mask's own shape (never per channel). With a bool mask they are 0 and 1 (or 0 and alpha),
    so the lerp returns the observation or the background (or their plain blend) exactly. uint8
    obs are blended as floats in the obs's own memory order, rounded half up."""
    dtype = src5.dtype if src5.is_floating_point() else torch.float32
    background = imgs5.to(dtype)
    obs, dst = src5[:, :, :3], dst5[:, :, :3]
    if src5.dtype != dtype:  # in the obs's memory order (channels-last stays so), blended there
        obs = torch.empty_like(src5, dtype=dtype)[:, :, :3].copy_(obs)
    mixed = dst if dst.dtype == dtype else obs
    a = alpha.to(dtype).reshape(-1, 1, 1, 1, 1) if isinstance(alpha, torch.Tensor) else alpha
    if keep is None:
        torch.lerp(obs, background, a, out=mixed)
    elif _full_weight(alpha):
        torch.lerp(background, obs, keep.to(dtype), out=mixed)
    else:
        # (out of place: a mask shared by all samples meets a per-sample alpha)
        if keep.dtype == torch.bool:
            weight = keep.to(dtype).mul(-a).add_(a)  # 0 where kept, alpha elsewhere: -a + a is +0
        else:
            weight = keep.to(dtype).neg().add_(1).mul(a)  # (-x + 1 is 1 - x exactly)
        torch.lerp(obs, background, weight, out=mixed)
    if mixed is not dst:
        dst.copy_(mixed.add_(0.5).floor_())


def _composite_autograd(geom, obs, imgs5, keep5, alpha) -> torch.Tensor:
    """`lerp(obs, img, alpha * (1 - mask))`, out of place, so autograd can differentiate it
    (a fused `out=` write cannot be recorded)."""
    src5 = geom.five(obs)
    dtype = obs.dtype if obs.is_floating_point() else torch.float32
    rgb = src5[:, :, :3].to(dtype)
    background = imgs5.to(dtype)  # one frame: broadcast through the view
    if keep5 is None:
        keep5 = torch.zeros((), dtype=dtype, device=obs.device)
    keep = keep5.to(dtype)
    if isinstance(alpha, torch.Tensor) or float(alpha) != 1.0:
        a = alpha.to(dtype).reshape(-1, 1, 1, 1, 1) if isinstance(alpha, torch.Tensor) else alpha
        mixed = torch.lerp(rgb, background, (1 - keep) * a)
    else:
        mixed = torch.lerp(background, rgb, keep)  # the plain paste: the mask itself the weight
    if geom.channels == 4:
        mixed = torch.cat([mixed, src5[:, :, 3:].to(dtype)], dim=2)
    return geom.four(mixed)

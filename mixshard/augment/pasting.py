"""`composite`: backgrounds pasted behind the masked part of observations, in one pass.

The masked counterpart of `ops.blend` (SGQN's, MaDi's and SODA's pastes, `Backgrounds`'s
green screen): the same checks, broadcast over frames through a view, and on a CPU the same
chunks of samples whose float backgrounds stay in cache (`ops.CPU_SCRATCH_BYTES`).
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from . import fused, ops
from .inputs import check_weights
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
    # On a CPU, chunks of samples, so that each chunk's float backgrounds and weights stay in
    # cache from the pass that makes them to the blend that reads them (as `blend` does);
    # elsewhere one chunk of all.
    rows = chunk_rows(obs, imgs.shape[1] // 3, dtype)
    src, dst = obs.view(five), result.view(five)
    if keep.dtype == torch.bool and _full_weight(alpha) and obs.dtype == imgs.dtype == torch.uint8:
        # uint8 obs under a bool mask at full weight: a plain paste, a select with no float
        # math (for float obs the lerp below, the mask its weight, measured faster)
        for lo in range(0, n, rows):
            part = slice(lo, lo + rows)
            m = keep[part] if keep.shape[0] != 1 else keep
            background = frames_of(imgs[part], min(rows, n - lo), h, w)
            torch.where(m, src[part], background, out=dst[part])
        return result
    MaskedLerp(obs, keep, alpha, rows).run(src, imgs, dst)
    return result


WEIGHT_BYTES = 2 << 20  # the weights made at a time (a block of chunks)


def chunk_rows(obs: torch.Tensor, frames: int, dtype: torch.dtype) -> int:
    """Samples per chunk: on a CPU as many as `ops.CPU_SCRATCH_BYTES` of float backgrounds
    (`frames` a sample) hold; elsewhere all."""
    n, _, h, w = obs.shape
    if obs.device.type != "cpu":
        return max(1, n)
    per_sample = 3 * frames * h * w * torch.finfo(dtype).bits // 8
    return max(1, min(n, ops.CPU_SCRATCH_BYTES // per_sample))


def _full_weight(alpha: float | torch.Tensor) -> bool:
    """A float alpha of 1: where the mask is 0 the background replaces the observation."""
    return not isinstance(alpha, torch.Tensor) and float(alpha) == 1.0


def masked_lerp(
    obs: torch.Tensor, mask, alpha, frames: int, size: int, device: torch.device
) -> MaskedLerp | None:
    """`composite`'s masked lerp for float obs of `size` px, made once for all the groups a
    caller (`Backgrounds`) blends (the checks `composite` makes per call made once here);
    None for the rest (no mask, uint8 obs, resized backgrounds, gradients), which call
    `composite` per group."""
    n, _, h, w = obs.shape
    grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (obs, mask, alpha)
    )
    if mask is None or not obs.is_floating_point() or (h, w) != (size, size) or grad:
        return None
    keep = broadcast_mask(mask, n, frames, h, w, device)
    if isinstance(alpha, torch.Tensor):
        check_weights("alpha", alpha, bool_ok=False)
    return MaskedLerp(obs, keep, alpha, chunk_rows(obs, frames, obs.dtype))


class MaskedLerp:
    """`lerp(obs, img, alpha * (1 - mask))` over chunks of `rows` samples, its scratch (the
    float backgrounds, the weights, uint8 obs as floats) allocated once and reused; `run` may
    be called for consecutive groups of samples (`Backgrounds` gathers a group at a time).

    At full weight (alpha 1.0) the mask itself is the weight, `lerp(img, obs, mask)`; a bool
    mask becomes it by a copy of its bytes (bool to float directly is a slower conversion
    here). The weights are made for a block of chunks at a time (`WEIGHT_BYTES`), at the
    mask's own shape (`(rows, 1 or k, 1, H, W)` for a per-pixel mask), never per channel. With
    a bool mask they are 0 or 1 (or 0 and alpha), so the lerp returns the observation or the
    background (or their plain blend) exactly.

    `keep` is a checked mask broadcasting to `(N, k, 3, H, W)` (`masks.broadcast_mask`).
    """

    def __init__(
        self, obs: torch.Tensor, keep: torch.Tensor, alpha: float | torch.Tensor, rows: int
    ) -> None:
        _, c, h, w = obs.shape
        dtype = obs.dtype if obs.is_floating_point() else torch.float32
        self.keep, self.dtype, self.rows, self.plain = keep, dtype, rows, _full_weight(alpha)
        self.alpha = (
            alpha.to(dtype).reshape(-1, 1, 1, 1, 1) if isinstance(alpha, torch.Tensor) else alpha
        )
        self.new = functools.partial(torch.empty, dtype=dtype, device=obs.device)
        self.backgrounds: torch.Tensor | None = None  # made at the first uint8 backgrounds
        self.floats = None if obs.dtype == dtype else self.new((rows, c // 3, 3, h, w))
        self.shared = keep.shape[0] == 1 and not isinstance(alpha, torch.Tensor)
        # the weights are made for a block of chunks at once (fewer small ops), as many rows
        # as WEIGHT_BYTES hold
        per_row = math.prod(keep.shape[1:]) * torch.finfo(dtype).bits // 8
        self.block = rows * max(1, WEIGHT_BYTES // (rows * per_row))
        self.weights = None
        if not (self.plain and keep.dtype == dtype):  # else the mask is the weight as it is
            self.weights = self.new((1 if self.shared else self.block, *keep.shape[1:]))
            if self.shared:
                self._fill(keep, self.alpha, self.weights)

    def _fill(self, keep: torch.Tensor, alpha, out: torch.Tensor) -> torch.Tensor:
        """`out` = the weights: `keep` at full weight, else `(1 - keep) * alpha`."""
        if keep.dtype == torch.bool:
            out.copy_(keep.view(torch.uint8))
            if not self.plain:  # 0 where kept, alpha elsewhere: -alpha + alpha is +0 exactly
                out.mul_(-alpha).add_(alpha)
            return out
        out.copy_(keep)
        if not self.plain:
            out.neg_().add_(1).mul_(alpha)  # (-x + 1 is 1 - x exactly)
        return out

    def run(self, src: torch.Tensor, imgs: torch.Tensor, dst: torch.Tensor, lo: int = 0) -> None:
        """`dst` = the blend of `src` `(n, k, 3, H, W)`, samples `lo .. lo + n - 1`, and their
        `imgs` `(n, 3 or 3k, H, W)`."""
        n, block = src.shape[0], self.block
        if imgs.dtype != self.dtype and self.backgrounds is None:  # uint8 ones as floats
            self.backgrounds = self.new((self.rows, imgs.shape[1] // 3, 3, *src.shape[3:]))
        for b in range(0, n, block):
            part = slice(b, b + block)
            self._run_block(src[part], imgs[part], dst[part], lo + b)

    def _run_block(self, src: torch.Tensor, imgs: torch.Tensor, dst: torch.Tensor, lo: int):
        n, rows = src.shape[0], self.rows
        # the chunks' views made at once (a Python slice per chunk and tensor costs more)
        backgrounds = frames_of(imgs, n, *src.shape[3:]).split(rows)
        weights = self._weights(lo, n)
        chunk_weights = weights.split(rows) if weights.shape[0] != 1 else itertools.repeat(weights)
        cast = self.backgrounds if imgs.dtype != self.dtype else None
        for obs, background, out, weight in zip(
            src.split(rows), backgrounds, dst.split(rows), chunk_weights
        ):
            r = obs.shape[0]
            if cast is not None:
                background = (cast if r == rows else cast[:r]).copy_(background)
            if self.floats is not None:  # uint8 obs: blended as floats, rounded half up
                mixed = (self.floats if r == rows else self.floats[:r]).copy_(obs)
                self._lerp(mixed, background, weight, mixed)
                out.copy_(mixed.add_(0.5).floor_())
            else:
                self._lerp(obs, background, weight, out)

    def _weights(self, lo: int, n: int) -> torch.Tensor:
        """The weights of samples `lo .. lo + n - 1` (or one for all, shape[0] 1)."""
        keep = self.keep if self.keep.shape[0] == 1 else self.keep[lo : lo + n]
        if self.weights is None:
            return keep
        if self.shared:
            return self.weights
        alpha = self.alpha[lo : lo + n] if isinstance(self.alpha, torch.Tensor) else self.alpha
        return self._fill(keep, alpha, self.weights[:n])

    def _lerp(self, obs, background, weight, out) -> None:
        if self.plain:
            torch.lerp(background, obs, weight, out=out)
        else:
            torch.lerp(obs, background, weight, out=out)


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

"""GreenAug's soft chroma key (chromakey 0.2.1's `chromakey.torch.chroma_key`, which GreenAug's
`GreenAugRandom` and `GreenAugGenerative` call): the matte, and its composite with spill
removal.

The rule (docs/design.md, "Keep masks", states it) is chromakey's YCbCr distance with its
floors, in the same float32 operations in the same order, so the floors fall on the same side
for every colour (`scripts/compare_greenaug.py` runs both).
"""

from __future__ import annotations

from typing import cast

import torch

from ..inputs.arrays import same_kind
from ..inputs.checks import rgb_frames
from .shared import constant, grow, is_finite

Tol = float | torch.Tensor


@same_kind("obs")
def chroma_key(
    obs: torch.Tensor,
    key: str | tuple[float, float, float] | torch.Tensor,
    tola: Tol = 10,
    tolb: Tol = 30,
    *,
    margin: int = 0,
    layout: str = "NCHW",
) -> torch.Tensor:
    """GreenAug's soft key as a keep matte: 0 on the key colour, 1 far from it.

    Args:
        obs: `(N, 3 * frames, H, W)` uint8 or float 0..255 (NHWC: `(N, H, W, 3 * frames)` or
            RGBA `(N, H, W, 4)`, keyed on its RGB); computed in float32.
        key: the key colour: `"#rrggbb"` (GreenAug's `"#439f82"`), three numbers (R, G, B) on
            0..255, or a float or integer tensor `(3,)`, or `(N, 3)` for a colour per sample.
        tola: the (Cb, Cr) distance up to which a pixel is all background: a number >= 0, or
            an `(N,)` tensor per sample.
        tolb: the distance from which it is all observation: a number >= `tola`, or `(N,)`.
        margin: grow the kept region by this many pixels (a max-pool of the matte).
        layout: `"NCHW"` or `"NHWC"`, the obs's.

    Returns:
        `(N, frames, H, W)` (NHWC: `(N, H, W, frames)`) float32 in [0, 1] on the obs's device:
        `composite`'s keep mask, 1 minus chromakey's background mask (equal to it within
        float32 rounding, 6e-8).
    """
    rgb, dim = rgb_frames(obs, layout)
    n = rgb.shape[0]
    keys = key_colours(key, n, rgb.device)
    lo, hi = check_tolerances(tola, tolb, n)
    r, g, b = (c if c.dtype in (torch.uint8, torch.float32) else c.float() for c in rgb.unbind(dim))
    keep = keep_matte(r, g, b, keys, lo, hi, finite=rgb.dtype == torch.uint8)
    return grow(keep, margin, layout)


@same_kind("obs", "imgs")
def chroma_composite(
    obs: torch.Tensor,
    imgs: torch.Tensor,
    key: str | tuple[float, float, float] | torch.Tensor,
    tola: Tol = 10,
    tolb: Tol = 30,
    *,
    margin: int = 0,
    layout: str = "NCHW",
) -> torch.Tensor:
    """GreenAug's composite: backgrounds behind `chroma_key`'s matte, the key colour's spill
    removed (`obs - a * key + a * img`, `a = 1 - keep`, clipped to 0..255).

    Args:
        obs: as `chroma_key`'s.
        imgs: the backgrounds, uint8 or float 0..255: `(N, 3, H, W)` the same on every frame,
            or `(N, 3 * frames, H, W)` one per frame (NHWC: `(N, H, W, 3)` or
            `(N, H, W, 3 * frames)`; for RGBA obs `(N, H, W, 3)`).
        key, tola, tolb, margin, layout: as `chroma_key`'s.

    Returns:
        A new tensor like `obs` (uint8 rounded half up; an RGBA obs's alpha unchanged).
    """
    keep = chroma_key(obs, key, tola, tolb, margin=margin, layout=layout)
    rgb, dim = rgb_frames(obs, layout)
    background = _backgrounds(imgs, rgb, dim, layout)
    keys = key_colours(key, rgb.shape[0], rgb.device)
    keys = keys.view(-1, 1, 3, 1, 1) if dim == 2 else keys.view(-1, 1, 1, 1, 3)
    alpha = keep.neg_().add_(1).unsqueeze(dim)  # (1 - keep, in place: keep is ours)
    out = despill(rgb.float(), alpha, keys, background.float()).clamp_(0, 255)
    result = obs.clone(memory_format=torch.contiguous_format)
    target, _ = rgb_frames(result, layout)
    target.copy_(out if obs.is_floating_point() else out.add_(0.5).floor_())
    return result


def keep_matte(
    r: torch.Tensor,
    g: torch.Tensor,
    b: torch.Tensor,
    keys: torch.Tensor,
    lo: Tol,
    hi: Tol,
    finite: bool = False,
) -> torch.Tensor:
    """The keep matte of R, G, B planes on 0..255 (4-D, `(N, ...)`) against `keys` `(1 or N,
    3)`: 1 minus chromakey's background weight, in the planes' float dtype (float32 for
    uint8); a NaN or inf colour gives 0 (chromakey's background), a pass saved when the
    caller knows there is none (`finite`: from uint8)."""
    cb, cr = _floored_chroma(r, g, b)
    kcb, kcr = (c.view(-1, 1, 1, 1) for c in _floored_chroma(*keys.unbind(1)))
    dist = cb.sub_(kcb).square_().add_(cr.sub_(kcr).square_()).sqrt_()
    keep = _ramp(dist, lo, hi)
    return keep if finite else keep.nan_to_num_(nan=0.0)


def despill(
    x: torch.Tensor, alpha: torch.Tensor, key: torch.Tensor, background: torch.Tensor | None
) -> torch.Tensor:
    """`x - alpha * key (+ alpha * background)`, float32, chromakey's operations in its order
    (so the drop-in in `mixshard.compat` gives its values bit for bit)."""
    out = x - alpha * key
    if background is not None:
        out += alpha * background
    return out


def _floored_chroma(
    r: torch.Tensor, g: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """floor(Cb), floor(Cr) of R, G, B on 0..255 (uint8, or float: computed in that dtype,
    float32 for uint8): chromakey's (kornia's) YCbCr, the same operations in the same order
    (no fused multiply-add, which rounds once where they round twice and would move a colour
    across a floor). Two new tensors, the planes left as they are; uint8 planes are read as
    float32 by each operation (no converted copies)."""
    y = torch.mul(r, 0.299)
    scratch = torch.mul(g, 0.587)
    y += scratch
    torch.mul(b, 0.114, out=scratch)
    y += scratch
    cb = torch.sub(b, y, out=scratch).mul_(0.564).add_(128.0).floor_()
    cr = torch.sub(r, y, out=y).mul_(0.713).add_(128.0).floor_()
    return cb, cr


def _ramp(dist: torch.Tensor, lo: Tol, hi: Tol) -> torch.Tensor:
    """The keep matte from the distances, in place: 0 below `lo`, 1 from `hi`, linear
    between (chromakey's `(dist - tola) / (tolb - tola)`)."""
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        # (a number stays a number: a tensor made of it on a GPU would be a blocking copy)
        lo_t, hi_t = (
            t.to(dist).reshape(-1, 1, 1, 1) if isinstance(t, torch.Tensor) else t for t in (lo, hi)
        )
        span = cast(torch.Tensor, hi_t - lo_t)  # (one of them is a tensor)
        ramp = ((dist - lo_t) / span).clamp_(0, 1)
        # where tola == tolb the ramp is 0 / 0: a hard key at tolb
        return torch.where(span > 0, ramp, (dist >= hi_t).float())
    if lo == hi:
        return dist.ge_(hi)  # (in place: 1.0 or 0.0, float)
    return dist.sub_(lo).div_(hi - lo).clamp_(0, 1)


def _backgrounds(imgs: object, rgb: torch.Tensor, dim: int, layout: str) -> torch.Tensor:
    """`imgs` as a view that broadcasts against the obs's `rgb_frames` view, checked."""
    if not isinstance(imgs, torch.Tensor):
        raise TypeError(f"imgs must be a torch.Tensor, got {type(imgs).__name__}")
    if not (imgs.dtype == torch.uint8 or imgs.is_floating_point()):
        raise ValueError(f"imgs must be uint8 or float 0..255, got {imgs.dtype}")
    if imgs.device != rgb.device:
        raise ValueError(f"obs is on {rgb.device} but imgs on {imgs.device}")
    if dim == 2:
        n, k, _, h, w = rgb.shape
        shapes = ((n, 3, h, w), (n, 3 * k, h, w))
    else:
        n, h, w, k, _ = rgb.shape
        shapes = ((n, h, w, 3), (n, h, w, 3 * k))
    if tuple(imgs.shape) not in shapes:
        want = " or ".join(str(s) for s in dict.fromkeys(shapes))
        raise ValueError(f"imgs must be {want} for these obs ({layout}), got {tuple(imgs.shape)}")
    return imgs.reshape(n, -1, 3, h, w) if dim == 2 else imgs.reshape(n, h, w, -1, 3)


def key_colours(key: object, n: int, device: torch.device) -> torch.Tensor:
    """`key` as a `(1, 3)` or `(n, 3)` float32 tensor on `device`, checked."""
    if isinstance(key, str):
        digits = key[1:] if key.startswith("#") else ""
        if len(digits) == 3:
            digits = "".join(c * 2 for c in digits)
        try:
            if len(digits) != 6:
                raise ValueError
            values = tuple(int(digits[i : i + 2], 16) for i in (0, 2, 4))
        except ValueError:
            raise ValueError(f"key must be '#rrggbb' (or '#rgb'), got {key!r}") from None
        return constant(values, torch.float32, device).view(1, 3)
    if isinstance(key, torch.Tensor):
        if key.dtype == torch.bool or key.is_complex() or tuple(key.shape) not in ((3,), (n, 3)):
            raise ValueError(
                f"key must be a (3,) or ({n}, 3) tensor of R, G, B on 0..255, got a "
                f"{tuple(key.shape)} {key.dtype} tensor"
            )
        keys = key.to(device=device, dtype=torch.float32).reshape(-1, 3)
        if keys.device.type == "cpu" and not bool(((keys >= 0) & (keys <= 255)).all()):
            raise ValueError("key must hold R, G, B on 0..255, none NaN")
        return keys
    values = tuple(key) if isinstance(key, (tuple, list)) else ()
    if len(values) != 3 or not all(is_finite(c) and 0 <= c <= 255 for c in values):
        raise ValueError(
            f"key must be '#rrggbb', three numbers (R, G, B) on 0..255 or a tensor, got {key!r}"
        )
    return constant(tuple(float(c) for c in values), torch.float32, device).view(1, 3)


def check_tolerances(tola: object, tolb: object, n: int) -> tuple[Tol, Tol]:
    """`tola` and `tolb`, checked: finite numbers with `0 <= tola <= tolb`, or real tensors of
    one value or `(n,)` (their values checked on the CPU only: elsewhere that would be a host
    sync)."""
    for name, tol in (("tola", tola), ("tolb", tolb)):
        if not isinstance(tol, torch.Tensor):
            if not is_finite(tol) or tol < 0:  # type: ignore[operator]
                raise ValueError(f"{name} must be a finite number >= 0, got {tol!r}")
        elif tol.dtype == torch.bool or tol.is_complex() or tol.dim() > 1:
            raise ValueError(f"{name} must be a number or an ({n},) tensor, got {tol!r}")
        elif tol.numel() not in (1, n):
            raise ValueError(f"{name} must be a number or an ({n},) tensor, got {tuple(tol.shape)}")
        elif tol.device.type == "cpu" and not bool(((tol >= 0) & tol.isfinite()).all()):
            raise ValueError(f"{name} must hold finite numbers >= 0, got {tol.tolist()}")
    on_device = any(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in (tola, tolb))
    if not on_device and not bool(torch.as_tensor(tola <= tolb).all()):  # type: ignore[operator]
        raise ValueError(f"tola must be at most tolb, got tola={tola!r}, tolb={tolb!r}")
    return tola, tolb  # type: ignore[return-value]

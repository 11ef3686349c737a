"""`run`: a CPU's `composite` and `blend` as one pass of compiled code (`_lerp.c`).

`_lerp.c` makes each output value from its inputs at once, with torch's lerp as its vector
kernel computes it, so it gives the torch path's bytes (`pasting._masked_lerp`,
`ops._blend_one_pass`, what every other device runs); it reads every tensor through strides
over (sample, frame, channel, pixel), so channels-last data are read where they lie. Where the
module is not built, or for what it does not take (obs not uint8 or float32, backgrounds not
uint8, another device, gradients, lines wider than 4,096), callers run the torch path.
docs/design.md, "Backgrounds per environment" (*composite*), says why a CPU gets its own pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..masks.keys import Compiled
from .compiled import Region
from .compiled import lerp as _lerp
from .compiled import region as _region

_KEEPS = {None: 0, torch.bool: 1, torch.float32: 2}  # no mask, a bool one, a float one
_TYPES = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4}
_TYPES |= {torch.float32: 5, torch.float64: 6}
# `_lerp.c`'s parameters, in its order (a name per slot; strides take several)
_SLOTS = (
    ["n", "k", "c", "h", "w", "u8"]
    + ["obs"] * 4
    + ["out"] * 4
    + ["bg"] * 5
    + ["count", "keep"]
    + ["keep_s"] * 4
    + ["key", "key_type"]
    + ["key_s"] * 3
    + ["invert", "ids", "plain", "alpha_step", "threads"]
)
_AT = {name: _SLOTS.index(name) for name in _SLOTS}
MAX_LINE = 4096
MAX_FRAMES = 64  # (the compiled pass's frame pointers a sample)


@dataclass(frozen=True)
class Backdrop:
    """Where each frame's background lies: `frames` (uint8) at element strides (index unit,
    sample, frame, channel, pixel), the frame of sample n's frame f being `index[n, f]` when
    there is an index (`count` frames), mirrored where `flipped[n]`."""

    frames: torch.Tensor
    strides: tuple[int, int, int, int, int]
    index: torch.Tensor | None = None
    count: int = 0
    flipped: torch.Tensor | None = None


def store(frames: torch.Tensor, index: torch.Tensor, flipped: torch.Tensor | None) -> Backdrop:
    """A frame store `(F, 3, H, W)` read by `(N, k)` index (`Backgrounds`)."""
    f, _, h, w = frames.shape
    return Backdrop(frames, (3 * h * w, 0, 0, h * w, 1), index, f, flipped)


def images(imgs5: torch.Tensor, n: int, k: int) -> Backdrop | None:
    """Backgrounds `(N, 1 or k, 3, H, W)` (a view of the caller's images in either layout), or
    None where their pixels are not one stride apart."""
    strides = _plane_strides(imgs5.expand(n, k, *imgs5.shape[2:]))
    if strides is None:
        return None
    return Backdrop(imgs5, (0, *strides))  # type: ignore[arg-type]


def usable(obs: torch.Tensor, frames: torch.Tensor, out: torch.Tensor, *weights) -> bool:
    """Whether `run` takes these: uint8 or float32 obs and an out like them, uint8 frames, on a
    CPU, and nothing (obs, the mask and alpha in `weights`) requiring grad."""
    tensors = [t for t in (obs, frames, *weights) if isinstance(t, torch.Tensor)]
    return (
        _lerp is not None
        and obs.dtype in (torch.uint8, torch.float32)
        and out.dtype == obs.dtype
        and frames.dtype == torch.uint8
        and max(obs.shape[-1], obs.shape[-2]) <= MAX_LINE
        and all(t.device.type == "cpu" for t in tensors)
        and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
    )


def run(
    out5: torch.Tensor,
    obs5: torch.Tensor,
    backdrop: Backdrop,
    keep5: torch.Tensor | None,
    key: Compiled | None,
    alpha: float | torch.Tensor,
) -> bool:
    """`out5` = `lerp(obs5, background, alpha * (1 - keep))` in one compiled pass, `out5` and
    `obs5` `(N, k, C, H, W)` views (channels from the 4th copied), the keep weights a mask
    `keep5` broadcasting to them, or made by `key`, or none (blend everywhere). At a float alpha
    of 1 with a mask the weight is the mask itself, as in `_masked_lerp`. False (nothing
    written) where a view's pixels are not one stride apart or there are over 64 frames: the
    caller runs the torch path."""
    n, k, c, h, w = obs5.shape
    obs_strides, out_strides = _plane_strides(obs5), _plane_strides(out5)
    if obs_strides is None or out_strides is None or k > MAX_FRAMES:
        return False
    keep_buf, keep_strides, kind = _keep(keep5, (n, k, 3, h, w))
    p = np.zeros(len(_SLOTS), np.int64)
    _put(p, "n", [n, k, c, h, w, obs5.dtype == torch.uint8])
    _put(p, "obs", obs_strides)
    _put(p, "out", out_strides)
    _put(p, "bg", [*backdrop.strides, backdrop.count, kind, *keep_strides])
    source = _key_params(p, key, (n, k, 1, h, w))
    full = not isinstance(alpha, torch.Tensor) and float(alpha) == 1.0
    alphas = (
        alpha.detach().to(torch.float32).reshape(-1).contiguous()
        if isinstance(alpha, torch.Tensor)
        else torch.tensor([float(alpha)], dtype=torch.float32)
    )
    # at full weight the mask (or the key's) is the weight itself
    plain = full and (keep5 is not None or key is not None)
    _put(p, "plain", [plain, alphas.numel() > 1, torch.get_num_threads()])
    _lerp.composite(  # type: ignore[union-attr]
        _region(out5),
        _region(obs5),
        _region(backdrop.frames),
        None if backdrop.index is None else _region(backdrop.index.to(torch.int64).contiguous()),
        None
        if backdrop.flipped is None
        else _region(backdrop.flipped.contiguous().view(torch.uint8)),
        keep_buf,
        source,
        None if key is None else key.values,
        None if key is None else key.ids,
        _region(alphas),
        p,
    )
    return True


def _keep(keep5: torch.Tensor | None, full: tuple[int, ...]) -> tuple[Region | None, list, int]:
    """The mask's buffer, its (sample, frame, channel, pixel) strides and kind."""
    if keep5 is None:
        return None, [0, 0, 0, 0], 0
    bool_mask = keep5.dtype == torch.bool
    keep, strides = _whole(keep5.view(torch.uint8) if bool_mask else keep5.to(torch.float32), full)
    return _region(keep), strides, _KEEPS[torch.bool if bool_mask else torch.float32]


def _key_params(p: np.ndarray, key: Compiled | None, full: tuple[int, ...]) -> Region | None:
    """The key's kind, map and constants into the parameters; its map's buffer."""
    if key is None:
        return None
    _put(p, "key", [key.kind])
    _put(p, "invert", [key.invert, 0 if key.ids is None else len(key.ids)])
    if key.source is None:
        return None
    source, strides = _whole(key.source, full)
    _put(p, "key_type", [_TYPES[source.dtype], strides[0], strides[1], strides[3]])
    return _region(source)


def _whole(view: torch.Tensor, full: tuple[int, ...]) -> tuple[torch.Tensor, list[int]]:
    """A mask or map `view` and its strides against `full` (its broadcast dimensions stride
    0); one broadcast over H or W (rare) made whole over the plane first, as the compiled pass
    walks a plane's pixels with one stride."""
    strides = _plane_strides(view.expand(full))
    if strides is None:
        view = view.expand(*view.shape[:3], *full[3:]).contiguous()
        strides = _plane_strides(view.expand(full))
    return view, strides or []


def _put(p: np.ndarray, first: str, values: list) -> None:
    """`values` into the parameters from slot `first` on."""
    at = _AT[first]
    p[at : at + len(values)] = [int(v) for v in values]


def _plane_strides(view: torch.Tensor) -> list[int] | None:
    """A 5-D view's element strides over (sample, frame, channel, pixel), the pixel p of
    (y, x) being y * W + x; None when its pixels are not one stride apart."""
    sn, sf, sc, sy, sx = view.stride()
    h, w = view.shape[-2:]
    if min(view.stride()) < 0 or (h > 1 and w > 1 and sy != w * sx):
        return None
    return [sn, sf, sc, sx if w > 1 else sy]

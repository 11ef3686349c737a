"""Keep masks from what a simulator renders beside the image: segmentation ids and depth.

Where the background is, by simulator (docs/simulators.md): id -1 in MuJoCo's segmentation
(dm_control, MuJoCo Warp, MJX, Genesis's index map), id 0 in ManiSkill3's; depth `inf` where a
ray hits nothing in Isaac Lab (or, by its `depth_clipping_behavior`, the far clipping distance,
or 0), the far plane (1.0) in MuJoCo's raw z-buffer (gymnasium's `depth_array`).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from ...core.checks import is_number
from ..inputs.arrays import same_kind
from ..inputs.checks import check_map
from .shared import constant, grow

_INT64 = (-(1 << 63), (1 << 63) - 1)
# Up to this many ids a mask is one comparison per id; above, one gather from a table of the
# ids' range (one pass whatever their number), or torch.isin when the range is too wide.
_FEW = 3
_TABLE = 1 << 16

IdsLike = int | Sequence[int] | torch.Tensor | np.ndarray


@same_kind("seg", "obs")
def from_segmentation(
    seg: torch.Tensor,
    ids: IdsLike | None = None,
    *,
    background: IdsLike | None = None,
    margin: int = 0,
    layout: str = "NCHW",
    obs: torch.Tensor | None = None,
) -> torch.Tensor:
    """True where the segmentation id is one of `ids` (the kept actors and links), or, given
    `background` instead, where it is none of those (ManiSkill3's id 0, MuJoCo's -1).

    Args:
        seg: integer ids of any integer dtype (int16, int32, int64, ...): `(N, H, W)`, or per
            frame `(N, frames, H, W)` (`layout="NCHW"`) or `(N, H, W, frames)` (`"NHWC"`;
            ManiSkill3's and Isaac Lab's `(N, H, W, 1)`). A map with two ids per pixel, such as
            dm_control's and MuJoCo Warp's `(..., H, W, 2)` (geom id, object type), is sliced
            first: `seg[..., 0]` is the geom ids, a view.
        ids: the ids to keep: an int, a sequence of ints, or an integer tensor or numpy array
            (numpy and 0-d tensor integers count as ints; bools and floats are refused).
            Negative ids are ids like any other.
        background: the ids to replace, in the same forms; exactly one of `ids` and
            `background` is given.
        margin: grow the kept region by this many pixels.
        layout: `"NCHW"` or `"NHWC"`, for a 4-D `seg` (a 3-D one is the same in both).
        obs: the observations the mask is for (in the same layout), checked only: a `seg` of
            another N, H or W, or another number of frames than 1 or the obs's, is an error.

    Returns:
        A bool keep mask of `seg`'s shape, on seg's device.
    """
    if not isinstance(seg, torch.Tensor):
        raise TypeError(f"seg must be a torch.Tensor of integer ids, got {type(seg).__name__}")
    if seg.dtype == torch.bool or seg.is_floating_point() or seg.is_complex():
        raise TypeError(f"seg must hold integer ids, got {seg.dtype}")
    if (ids is None) == (background is None):
        given = "both" if ids is not None else "neither"
        raise TypeError(
            "from_segmentation takes exactly one of ids (the ids to keep) and background (the "
            f"ids to replace), got {given}"
        )
    check_map("seg", seg, layout, obs)
    name, values = ("ids", ids) if ids is not None else ("background", background)
    member = _members(seg, id_values(name, values), invert=background is not None)
    return grow(member, margin, layout)


@same_kind("depth", "obs")
def from_depth(
    depth: torch.Tensor,
    far: float,
    *,
    margin: int = 0,
    layout: str = "NCHW",
    obs: torch.Tensor | None = None,
) -> torch.Tensor:
    """True where something was hit nearer than `far`: the background is where depth is at
    least `far`, not finite (NaN, inf) or not positive (0: no hit), the three ways Isaac Lab's
    cameras mark a miss (`depth_clipping_behavior` "none": inf; "max": the far clipping
    distance; "zero": 0).

    Args:
        depth: float depth in metres (any float dtype): `(N, H, W)`, or per frame
            `(N, frames, H, W)` (`layout="NCHW"`) or `(N, H, W, frames)` (`"NHWC"`; Isaac
            Lab's `(N, H, W, 1)`). Integer depth is refused: ManiSkill3's int16 is in
            millimetres, pass `depth / 1000` (a float tensor in metres). MuJoCo's raw z-buffer
            (gymnasium's `depth_array`, in [0, 1], 1.0 where nothing is hit) works with
            `far=1.0` to key out what is not hit; to cut at `d` metres give
            `far=(1 - near / d) / (1 - near / zfar)`, near and zfar being
            `model.vis.map.znear` and `.zfar` times `model.stat.extent`.
        far: the distance from which the background shows, in depth's unit: a number > 0
            (`math.inf`: only the pixels that hit nothing, or are NaN or 0, are background).
        margin: grow the kept region by this many pixels.
        layout: `"NCHW"` or `"NHWC"`, for a 4-D `depth`.
        obs: the observations the mask is for (same layout), checked only, as in
            `from_segmentation`.

    Returns:
        A bool keep mask of `depth`'s shape, on depth's device.
    """
    if not isinstance(depth, torch.Tensor):
        raise TypeError(f"depth must be a torch.Tensor, got {type(depth).__name__}")
    if not depth.is_floating_point():
        raise TypeError(
            f"depth must be a float tensor in metres, got {depth.dtype} (integer depth has a "
            f"unit of its own: ManiSkill3's int16 is millimetres, pass depth / 1000)"
        )
    if not (is_number(far) and float(far) > 0):  # (NaN > 0 is false)
        raise ValueError(f"far must be a number > 0 (math.inf allowed), got {far!r}")
    check_map("depth", depth, layout, obs)
    # (NaN compares false both times; inf and -inf fail one test each)
    keep = torch.gt(depth, 0).logical_and_(torch.lt(depth, float(far)))
    return grow(keep, margin, layout)


def id_values(name: str, ids: object) -> tuple[int, ...] | torch.Tensor:
    """`ids` (or `background`) checked: a tuple of Python ints when they are on the host
    (a CPU tensor's or numpy array's values among them), a flat integer tensor when they
    are on another device (read there, without a host sync)."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise TypeError(f"{name} must be integers, got a {ids.dtype} tensor")
        return tuple(ids.flatten().tolist()) if ids.device.type == "cpu" else ids.flatten()
    if isinstance(ids, np.ndarray):
        if ids.dtype.kind not in "iu":  # (a bool array is a mask, not a list of ids)
            raise TypeError(f"{name} must be integers, got a numpy array of {ids.dtype}")
        if ids.dtype == np.uint64 and ids.size and int(ids.max()) > _INT64[1]:
            raise ValueError(f"{name} must fit in int64, got a numpy uint64 id of {ids.max()}")
        return tuple(ids.ravel().tolist())
    values = (ids,) if _is_id(ids) or not isinstance(ids, Iterable) else tuple(ids)
    if not all(_is_id(i) for i in values):
        raise TypeError(
            f"{name} must be an int, a sequence of ints or a tensor (or numpy array) of "
            f"integers, got {ids!r}"
        )
    values = tuple(int(i) for i in values)
    if not all(_INT64[0] <= i <= _INT64[1] for i in values):
        raise ValueError(f"{name} must fit in int64, got {ids!r}")
    return values


def _is_id(x: object) -> bool:
    """An int or a numpy integer, not a bool (numpy's bool is no `numbers.Integral`)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _members(
    seg: torch.Tensor, values: tuple[int, ...] | torch.Tensor, invert: bool
) -> torch.Tensor:
    """Bool like `seg`: whether each id is among `values` (with `invert`, is not)."""
    if isinstance(values, torch.Tensor):  # on a device: compared there (isin promotes dtypes)
        return torch.isin(seg, values.to(seg.device), invert=invert)
    info = torch.iinfo(seg.dtype)
    # an id outside seg's dtype matches no pixel (and would wrap if cast to it)
    inside = sorted({v for v in values if info.min <= v <= info.max})
    if len(inside) <= _FEW:
        return _compare(seg, inside, invert)
    lo, hi = inside[0], inside[-1]
    if hi - lo < _TABLE:
        return _lookup(seg, tuple(inside), invert)
    return torch.isin(seg, constant(tuple(inside), seg.dtype, seg.device), invert=invert)


def _compare(seg: torch.Tensor, values: list[int], invert: bool) -> torch.Tensor:
    """One comparison per id, in seg's own dtype (no widened copy of seg)."""
    if not values:
        return torch.full_like(seg, invert, dtype=torch.bool)
    out = torch.ne(seg, values[0]) if invert else torch.eq(seg, values[0])
    for v in values[1:]:
        if invert:
            out.logical_and_(torch.ne(seg, v))
        else:
            out.logical_or_(torch.eq(seg, v))
    return out


def _lookup(seg: torch.Tensor, values: tuple[int, ...], invert: bool) -> torch.Tensor:
    """One gather from a table of the ids' range `[lo - 1, hi + 1]`: ids outside it are
    clamped onto its two ends, which hold no id."""
    info = torch.iinfo(seg.dtype)
    lo, hi = max(values[0] - 1, info.min), min(values[-1] + 1, info.max)
    table = _table(values, lo, hi, invert, seg.device)
    index = seg.clamp(lo, hi)
    # the offset from lo fits in int32 (the range is under _TABLE), which indexes a gather;
    # (int16 - lo could overflow int16: widened first)
    if seg.dtype == torch.int64:
        index = index.sub_(lo).to(torch.int32)
    else:
        index = index.to(torch.int32).sub_(lo)
    # (reshape: a sliced or permuted seg, dm_control's seg[..., 0], has no flat view)
    return table.index_select(0, index.reshape(-1)).view(seg.shape)


@functools.lru_cache(maxsize=32)
def _table(
    values: tuple[int, ...], lo: int, hi: int, invert: bool, device: torch.device
) -> torch.Tensor:
    """`_lookup`'s bool table over `[lo, hi]`, made once per ids and device (a fresh copy to
    the device per call would be a blocking host-to-device copy)."""
    table = torch.full((hi - lo + 1,), invert, dtype=torch.bool)
    table[torch.tensor(values, dtype=torch.int64) - lo] = not invert
    return table.to(device)

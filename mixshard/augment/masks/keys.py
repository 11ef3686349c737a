"""Keys: a keep mask made inside the composite's own pass (public as `mixshard.keys`).

`composite(obs, imgs, key)` and `Backgrounds.composite(obs, key)` take, where a mask tensor
goes, a key: `green_screen()`, `color_key(rgb, tol)`, `from_segmentation(seg, ids)` or
`from_depth(depth, far)`. It stands for the mask the `mixshard.masks` builder of that name
makes, pixel for pixel: the compiled pass (`_lerp.c`, on a CPU) makes it from the very value it
blends, elsewhere and with `margin=` the builder makes the mask (docs/design.md, "Keys: the
whole step in one pass", says why).

The segmentation or depth map lies in the obs's layout: `(N, H, W)`, or `(N, k, H, W)` /
`(N, 1, H, W)` channels-first, `(N, H, W, k)` / `(N, H, W, 1)` channels-last.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..inputs.arrays import same_kind
from ..inputs.layouts import Geometry, map_view, obs_geometry
from . import builders as masks
from .greenscreen import PRESETS
from .pixelmaps import id_values
from .shared import is_finite

GREEN, RANGE, IDS, DEPTH = 1, 2, 3, 4  # the compiled pass's key kinds (`_lerp.c`)
ID_TYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
DEPTH_TYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class Compiled:
    """A key as the compiled pass takes it: its kind, the map it reads (a 5-D view) and its
    constants (the green screen's or the colour key's bounds, the far plane, sorted ids)."""

    kind: int
    source: torch.Tensor | None = None
    values: np.ndarray | None = None
    ids: np.ndarray | None = None
    invert: bool = False


class Key:
    """A keep mask to make when observations are composited (true keeps the observation)."""

    margin: int = 0

    def mask(self, obs: torch.Tensor, layout: str = "NCHW") -> torch.Tensor:
        """The mask this key stands for, as a tensor: `(N, k, H, W)` for channels-first obs,
        `(N, H, W, k)` for channels-last ones (a map's keys: the map's frames)."""
        geom = obs_geometry(obs, layout)
        self.check(geom, obs.device)
        keep = self.keep5(obs, geom)[:, :, 0]
        return keep if layout == "NCHW" else keep.permute(0, 2, 3, 1)

    def check(self, geom: Geometry, device: torch.device) -> None:
        """Refuse a map of another size, layout or device than the obs (none by default)."""

    def keep5(self, obs: torch.Tensor, geom: Geometry) -> torch.Tensor:
        """The mask by the `masks` builder (what a GPU runs): `(N|1, k|1, 1, H, W)` bool."""
        raise NotImplementedError

    def compiled(self, geom: Geometry) -> Compiled | None:
        """The key for the compiled pass, or None where the pass cannot make it."""
        return None


def _rgb_views(obs: torch.Tensor, geom: Geometry) -> list[torch.Tensor]:
    """The obs as `(N, 3k, H, W)`-shaped views the builders take: one of all frames (RGB, a
    permute for channels-last), or one per frame (RGBA: its alpha left out). No copies."""
    if geom.channels == 3:
        return [obs if geom.layout == "NCHW" else obs.permute(0, 3, 1, 2)]
    five = geom.five(obs)
    return [five[:, f, :3] for f in range(geom.frames)]


def _per_frame(build, obs: torch.Tensor, geom: Geometry) -> torch.Tensor:
    keeps = [build(view) for view in _rgb_views(obs, geom)]
    keep = keeps[0] if len(keeps) == 1 else torch.cat(keeps, dim=1)
    return keep.unsqueeze(2)


@dataclass(frozen=True)
class GreenScreen(Key):
    """`masks.green_screen(obs, preset, margin=margin)`."""

    preset: str = "dmcgb"
    margin: int = 0

    def keep5(self, obs: torch.Tensor, geom: Geometry) -> torch.Tensor:
        return _per_frame(
            lambda v: masks.green_screen(v, self.preset, margin=self.margin), obs, geom
        )

    def compiled(self, geom: Geometry) -> Compiled | None:
        if self.margin:
            return None
        bounds = np.array([b for pair in PRESETS[self.preset] for b in pair], np.float64)
        return Compiled(GREEN, values=bounds)


@dataclass(frozen=True)
class ColorKey(Key):
    """`masks.color_key(obs, rgb, tol, margin=margin)`."""

    rgb: tuple[float, ...]
    tol: float = 0
    margin: int = 0

    def keep5(self, obs: torch.Tensor, geom: Geometry) -> torch.Tensor:
        build = lambda v: masks.color_key(v, self.rgb, self.tol, margin=self.margin)  # noqa: E731
        return _per_frame(build, obs, geom)

    def compiled(self, geom: Geometry) -> Compiled | None:
        if self.margin:
            return None
        bounds = [float(c) - self.tol for c in self.rgb] + [float(c) + self.tol for c in self.rgb]
        return Compiled(RANGE, values=np.array(bounds, np.float64))


@dataclass(frozen=True, eq=False)
class Segmentation(Key):
    """`masks.from_segmentation(seg, ids, margin=margin)`, or with `invert` the pixels whose
    id is not one of `ids` (the ids listed are the background's)."""

    seg: torch.Tensor
    ids: tuple[int, ...]  # (the builder keeps them on each device once: no copy per call)
    invert: bool = False
    margin: int = 0

    def check(self, geom: Geometry, device: torch.device) -> None:
        _check_map("seg", self.seg, geom, device)

    def keep5(self, obs: torch.Tensor, geom: Geometry) -> torch.Tensor:
        seg = map_view(self.seg, geom, "seg", per_channel=False)[:, :, 0]
        if self.invert:
            keep = masks.from_segmentation(seg, background=self.ids, margin=self.margin)
        else:
            keep = masks.from_segmentation(seg, self.ids, margin=self.margin)
        return keep.unsqueeze(2)

    def compiled(self, geom: Geometry) -> Compiled | None:
        if self.margin or self.seg.dtype not in ID_TYPES:
            return None
        source = map_view(self.seg, geom, "seg", per_channel=False)
        ids = np.unique(np.array(self.ids, np.int64))  # sorted: the pass searches them
        return Compiled(IDS, source=source, ids=ids, invert=self.invert)


@dataclass(frozen=True, eq=False)
class Depth(Key):
    """Keep where `masks.from_depth` keeps: the depth is above 0 (no hit is 0) and nearer than
    `far` (NaN and inf are background)."""

    depth: torch.Tensor
    far: float
    margin: int = 0

    def check(self, geom: Geometry, device: torch.device) -> None:
        _check_map("depth", self.depth, geom, device)

    def keep5(self, obs: torch.Tensor, geom: Geometry) -> torch.Tensor:
        d = map_view(self.depth, geom, "depth", per_channel=False)[:, :, 0]
        return masks.from_depth(d, self.far, margin=self.margin).unsqueeze(2)

    def compiled(self, geom: Geometry) -> Compiled | None:
        if self.margin or self.depth.dtype not in DEPTH_TYPES:
            return None
        source = map_view(self.depth, geom, "depth", per_channel=False)
        return Compiled(DEPTH, source=source, values=np.array([self.far], np.float64))


def _check_map(name: str, t: torch.Tensor, geom: Geometry, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but obs on {device}")
    map_view(t, geom, name, per_channel=False)  # its shape, or the error naming it


# -- the public builders of keys (`mixshard.keys`) -------------------------------------------


def green_screen(preset: str = "dmcgb", *, margin: int = 0) -> Key:
    """DMControl-GB's green screen, `masks.green_screen(obs, preset, margin=margin)`, made in
    the composite's pass.

    Example: `bg.composite(obs, mixshard.keys.green_screen(), layout="NHWC")`.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    return GreenScreen(preset, _margin(margin))


def color_key(rgb: Any, tol: float = 0, *, margin: int = 0) -> Key:
    """A chroma key, `masks.color_key(obs, rgb, tol, margin=margin)`, made in the composite's
    pass: false where every channel lies within `tol` of `rgb`."""
    key = tuple(rgb) if isinstance(rgb, (tuple, list)) else ()
    if len(key) != 3 or not all(is_finite(c) for c in key):
        raise ValueError(f"rgb must be three finite numbers (R, G, B) on 0..255, got {rgb!r}")
    if not is_finite(tol) or tol < 0:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    return ColorKey(tuple(float(c) for c in key), float(tol), _margin(margin))


@same_kind("seg")
def from_segmentation(
    seg: torch.Tensor, ids: Any = None, *, background: Any = None, margin: int = 0
) -> Key:
    """Keep the pixels whose segmentation id is one of `ids` (`masks.from_segmentation`), or,
    with `background=` instead, those whose id is not one of those (ManiSkill: id 0 is the
    background); made in the composite's pass.

    Args:
        seg: integer ids in the obs's layout (see the module's note), any integer dtype,
            negative ids too (MJWarp's -1).
        ids, background: an int, a sequence of ints, or an integer tensor or numpy array:
            exactly one of the two.
        margin: grow the kept region by this many pixels.
    """
    if not isinstance(seg, torch.Tensor):
        raise TypeError(f"seg must be a torch.Tensor of integer ids, got {type(seg).__name__}")
    if seg.dtype == torch.bool or seg.is_floating_point() or seg.is_complex():
        raise TypeError(f"seg must hold integer ids, got {seg.dtype}")
    if (ids is None) == (background is None):
        raise ValueError("from_segmentation: pass the ids to keep or background=, one of the two")
    listed = id_values(
        "ids" if background is None else "background", ids if background is None else background
    )
    if isinstance(listed, torch.Tensor):  # ids on an accelerator: read once, here
        listed = tuple(listed.tolist())
    return Segmentation(seg, listed, background is not None, _margin(margin))


@same_kind("depth")
def from_depth(depth: torch.Tensor, far: float, *, margin: int = 0) -> Key:
    """Keep where `masks.from_depth` keeps (above 0, nearer than `far`; NaN, inf and 0, no
    hit, are background), made in the composite's pass.

    Args:
        depth: float depths in the obs's layout (see the module's note).
        far: the depth from which the background shows (`float("inf")`: only where nothing
            was hit or the depth is not finite).
        margin: grow the kept region by this many pixels.
    """
    if not isinstance(depth, torch.Tensor) or not depth.is_floating_point():
        what = depth.dtype if isinstance(depth, torch.Tensor) else type(depth).__name__
        raise TypeError(f"depth must be a float torch.Tensor, got {what}")
    if not (isinstance(far, numbers.Real) and not isinstance(far, bool) and float(far) > 0):
        raise ValueError(f"far must be a number > 0 (math.inf allowed), got {far!r}")
    return Depth(depth, float(far), _margin(margin))


def _margin(margin: Any) -> int:
    if not isinstance(margin, numbers.Integral) or isinstance(margin, bool) or margin < 0:
        raise ValueError(f"margin must be an int >= 0 (pixels), got {margin!r}")
    return int(margin)

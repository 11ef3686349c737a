"""Observation layouts: channels-first `(N, C*k, H, W)` and channels-last `(N, H, W, C*k)`.

`composite` and `Backgrounds` take either, named by `layout=` ("NCHW", the default, or "NHWC")
and never guessed from the shape. A `Geometry` says how a batch holds its frames; `five` views
any tensor of that layout as `(N, k, C, H, W)` (a view: no permuted copy), which is all the
torch path and the compiled pass read. `keep_view` is the one check of a composite's mask,
shared by `composite` and `Backgrounds.composite`.

Channels-first frames are RGB; channels-last ones RGB or RGBA, and how many frames a batch holds
is told, not guessed (docs/design.md, "Channels-last observations and keys", has the rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checks import SMALL_CHANNELS, check_layout, check_tensor, check_weights


@dataclass(frozen=True)
class Geometry:
    """How a batch of observations holds its frames: `n` samples of `frames` frames of
    `channels` (3 RGB, 4 RGBA) at `h` x `w`, in `layout`."""

    layout: str
    n: int
    frames: int
    channels: int
    h: int
    w: int

    def shape(self, per_frame: int | None = None, frames: int | None = None) -> tuple[int, ...]:
        """The shape of a tensor of this layout (the obs's by default)."""
        c = (per_frame or self.channels) * (frames or self.frames)
        return (self.n, c, self.h, self.w) if self.layout == "NCHW" else (self.n, self.h, self.w, c)

    def five(self, t: torch.Tensor, per_frame: int | None = None) -> torch.Tensor:
        """`t` (this layout, `per_frame` channels a frame, the obs's by default) as a
        `(N, frames, per_frame, H, W)` view: channels-last ones through a permute, no copy."""
        per_frame = per_frame or self.channels
        if self.layout == "NCHW":
            return t.unflatten(1, (t.shape[1] // per_frame, per_frame))
        return t.unflatten(3, (t.shape[3] // per_frame, per_frame)).permute(0, 3, 4, 1, 2)

    def four(self, t5: torch.Tensor) -> torch.Tensor:
        """The inverse of `five`: a `(N, k, C, H, W)` tensor in this layout's shape (a view
        where `t5` lies in this layout's order, as `five`'s views and their like do)."""
        n, k, c, h, w = t5.shape
        if self.layout == "NCHW":
            return t5.reshape(n, k * c, h, w)
        return t5.permute(0, 3, 4, 1, 2).reshape(n, h, w, k * c)


def obs_geometry(
    obs: object,
    layout: object,
    *,
    frames: int | None = None,
    imgs_channels: int | None = None,
    mask: object = None,
) -> Geometry:
    """`obs`'s geometry in `layout`, checked: a 4-D uint8 or float tensor with whole frames.

    `frames` (a `Backgrounds`'s) fixes the frames; else for channels-last obs the backgrounds'
    channels `imgs_channels` (3k: one per frame) or a per-frame mask `(N, H, W, k)` say them.

    Raises:
        TypeError: obs is no torch tensor.
        ValueError: another dtype or shape, or channels that are no whole frames.
    """
    layout = check_layout(layout)
    obs = check_tensor(obs)
    if not (obs.dtype == torch.uint8 or obs.is_floating_point()):
        raise ValueError(f"obs must be float (0..255) or uint8, got {obs.dtype}")
    if obs.dim() != 4:
        want = "(N, 3k, H, W)" if layout == "NCHW" else "(N, H, W, C*k)"
        raise ValueError(f"obs must be {want} for layout={layout!r}, got {tuple(obs.shape)}")
    _refuse_the_other_layout(tuple(obs.shape), layout)
    if layout == "NCHW":
        n, c, h, w = obs.shape
        if c % 3 or c == 0:
            raise ValueError(
                f"obs have {c} channels, not a multiple of 3: channels-first frames are RGB "
                "(RGBA frames are taken channels-last, layout='NHWC')"
            )
        return Geometry(layout, n, c // 3, 3, h, w)
    n, h, w, c = obs.shape
    told = frames or _told_frames((h, w), imgs_channels, mask)
    k = told or _frames_of(c)
    if c % k or c // k not in (3, 4):
        how = (
            f"Backgrounds has frames={frames}: {3 * k} (RGB) or {4 * k} (RGBA) channels"
            if frames
            else f"{k} frames"
            if told
            else "no whole RGB (3) or RGBA (4) frames"
        )
        raise ValueError(
            f"obs {tuple(obs.shape)} hold {c} channels-last channels, but {how}; channels-last "
            "obs are (N, H, W, 3k) or (N, H, W, 4k)"
        )
    return Geometry(layout, n, k, c // k, h, w)


def _refuse_the_other_layout(shape: tuple[int, ...], layout: str) -> None:
    """A shape that is plainly the other layout's is an error that says so, never a guess: a
    frame stack has at most `SMALL_CHANNELS` channels, an image's side is more than its
    frame stack's channels."""
    rgb = shape[1] % 3 == 0 and 0 < shape[1] <= SMALL_CHANNELS  # an RGB stack channels-first
    if layout == "NCHW" and _stack(shape[3]) and not rgb and shape[1] > shape[3]:
        raise ValueError(
            f"obs {shape} look channels-last (N, H, W, C*k) but layout='NCHW' (the default) "
            "takes (N, 3k, H, W): pass layout='NHWC'"
        )
    if layout == "NHWC" and rgb and not _stack(shape[3]) and shape[3] > shape[1]:
        raise ValueError(
            f"obs {shape} look channels-first (N, 3k, H, W) but layout='NHWC' takes "
            "(N, H, W, C*k): pass layout='NCHW'"
        )


def _stack(c: int) -> bool:
    """Could be a frame stack's channels: RGB or RGBA frames, at most `SMALL_CHANNELS`."""
    return 0 < c <= SMALL_CHANNELS and (c % 3 == 0 or c % 4 == 0)


def _told_frames(size: tuple[int, int], imgs_channels: int | None, mask: object) -> int | None:
    """Frames of channels-last obs as backgrounds per frame `(N, H, W, 3k)` or a per-frame
    mask `(N, H, W, k)` give them (None: neither says)."""
    if imgs_channels is not None and imgs_channels > 3 and imgs_channels % 3 == 0:
        return imgs_channels // 3
    if isinstance(mask, torch.Tensor) and mask.dim() == 4 and tuple(mask.shape[1:3]) == size:
        return int(mask.shape[3]) if mask.shape[3] > 1 else None
    return None


def _frames_of(c: int) -> int:
    """Frames of `c` channels-last channels with nothing else to tell: RGB when only 3
    divides c, RGBA when only 4 does; refused when both do."""
    rgb, rgba = c % 3 == 0 and c > 0, c % 4 == 0 and c > 0
    if rgb and rgba:
        raise ValueError(
            f"obs with {c} channels-last channels hold {c // 3} RGB frames or {c // 4} RGBA "
            f"frames: say which with backgrounds per frame (N, H, W, 3k) or a mask per frame "
            f"(N, H, W, k), or use Backgrounds(frames=k)"
        )
    return c // 3 if rgb else c // 4 if rgba else 1


def keep_view(mask: object, geom: Geometry, device: torch.device) -> torch.Tensor:
    """`mask` checked and viewed as `(N|1, k|1, 1|3, H|1, W|1)` against the obs's frames: the
    masks `composite` and `Backgrounds.composite` take, with the same errors.

    Both layouts: `(N, H, W)`, one mask for every frame. Channels-first: `(N, 1, H, W)` per
    pixel, `(N, k, H, W)` per frame, `(N, 3k, H, W)` per channel, or a 5-D shape that
    broadcasts to `(N, k, 3, H, W)`. Channels-last: `(N, H, W, 1)` per pixel, `(N, H, W, k)`
    per frame. A 1 in N, H or W broadcasts. Bool, or float weights in [0, 1].

    Raises:
        TypeError: no tensor, or an integer one.
        ValueError: another device, a value out of [0, 1] (on a CPU), or a shape of neither
            kind, named with the shapes this obs takes.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask must be a torch.Tensor, a mixshard.keys key or None, got {type(mask).__name__}"
        )
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but obs on {device}")
    check_weights("mask", mask, bool_ok=True)
    return map_view(mask, geom, "mask")


def map_view(t: torch.Tensor, geom: Geometry, name: str, per_channel: bool = True) -> torch.Tensor:
    """`t` (a mask, or a segmentation or depth map when not `per_channel`) viewed as
    `(N|1, k|1, 1|3, H|1, W|1)` against the obs's frames; `ValueError` naming `name` and the
    shapes this obs takes when it does not fit."""
    view = _as_five(t, geom)
    want = (geom.n, geom.frames, 3 if per_channel else 1, geom.h, geom.w)
    if view is None or any(m not in (1, s) for m, s in zip(view.shape, want)):
        raise ValueError(_mask_error(name, tuple(t.shape), geom))
    return view


def _as_five(mask: torch.Tensor, geom: Geometry) -> torch.Tensor | None:
    """The mask as a 5-D view in its layout's reading, or None for a shape of neither kind."""
    shape, k = tuple(mask.shape), geom.frames
    if mask.dim() == 3:
        return mask.unsqueeze(1).unsqueeze(1)
    if mask.dim() == 4 and geom.layout == "NHWC":
        return mask.permute(0, 3, 1, 2).unsqueeze(2) if shape[3] in (1, k) else None
    if mask.dim() == 4 and shape[1] in (1, k, 3 * k):
        frames, chans = (shape[1], 1) if shape[1] in (1, k) else (k, 3)
        return mask.reshape(shape[0], frames, chans, shape[2], shape[3])
    return mask if mask.dim() == 5 and geom.layout == "NCHW" else None


def _mask_error(name: str, shape: tuple[int, ...], geom: Geometry) -> str:
    n, k, h, w = geom.n, geom.frames, geom.h, geom.w
    if geom.layout == "NCHW":
        if len(shape) == 4 and shape[1:3] == (h, w) and shape[3] in (1, k):
            return (
                f"{name} {shape} is channels-last (N, H, W, k) but obs {geom.shape()} are "
                f"channels-first (layout='NCHW'): pass it as (N, k, H, W) "
                f"({name}.permute(0, 3, 1, 2)), or layout='NHWC' with channels-last obs"
            )
        return (
            f"{name} {shape} does not broadcast to obs {geom.shape()}: give (N, H, W) or "
            f"(N, 1, H, W) per pixel, (N, k, H, W) per frame, (N, 3k, H, W) per channel or "
            f"(N, k, 1, H, W); here N={n}, k={k}, H={h}, W={w}"
        )
    if len(shape) == 4 and shape[2:] == (h, w) and shape[1] in (1, k, 3 * k):
        return (
            f"{name} {shape} is channels-first (N, k, H, W) but obs {geom.shape()} are "
            f"channels-last (layout='NHWC'): pass it as (N, H, W, k) "
            f"({name}.permute(0, 2, 3, 1))"
        )
    return (
        f"{name} {shape} does not broadcast to channels-last obs {geom.shape()}: give (N, H, W) "
        f"or (N, H, W, 1) per pixel, or (N, H, W, k) per frame; here N={n}, k={k}, H={h}, W={w}"
    )

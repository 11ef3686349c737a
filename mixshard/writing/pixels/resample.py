"""Resize of decoded uint8 pixels into the stored CHW layout: bilinear as banded matrix
products, and PIL's bicubic (`bicubic.py`).

This module is about the two bilinear filters, PIL's (antialiased) and F.interpolate's /
tf.image.resize's without antialias; docs/design.md, "Resize filters", states each filter's
rule and how close it comes to its reference.

Each output has a few non-zero taps out of a whole row or column, so the outputs of an axis are
cut into bands of `_BAND` pixels, each a small dense matrix over the window of inputs it needs;
the windows start at a fixed step, so they are one strided view and one `np.matmul` runs every
band. The weights are cached per (input size, output size, window). Where the install had a C
compiler, `_resize.c` runs the same passes with the same weights as loops over each output's
non-zero taps (`_taps`), without numpy's calls and layout copies; its sums add left to right,
BLAS's in its own order, so a few pixels differ by a level between the two, each the same on
every run.
"""

from __future__ import annotations

import functools
import threading
from types import ModuleType
from typing import NamedTuple, Optional

import numpy as np

from ...core.constants import RESAMPLE, RESAMPLE_MODES
from .bicubic import bicubic_into, numpy_bicubic_into

_resize: Optional[ModuleType]
try:  # the same passes compiled (`_resize.c`), where the install had a C compiler
    from . import _resize
except ImportError:  # pragma: no cover - only where the extension could not be built
    _resize = None

BICUBIC = RESAMPLE_MODES[2]  # PIL's, in `bicubic.py`
_BAND = 12  # output pixels per band: fewer BLAS calls against less wasted work (measured)
_F32 = 4  # bytes per float32


class _Axis(NamedTuple):
    """One axis's resampling: window `k` reads inputs `[first + k * step, + length)` of the
    `span` inputs from `first`, and `weights[k]` (`(_BAND, length)`) maps them to outputs
    `[k * _BAND, (k + 1) * _BAND)`; rows past the output size are zero."""

    first: int
    step: int
    length: int
    bands: int
    span: int
    weights: np.ndarray  # (bands, _BAND, length)


@functools.lru_cache(maxsize=1024)
def _axis(insize: int, outsize: int, lo: float, hi: float, antialias: bool = True) -> _Axis:
    """The bands of PIL's bilinear weights for the window `[lo, hi)` of `insize` pixels
    resized to `outsize`: a triangle widened by the shrink factor (unless not `antialias`),
    its taps clipped to the image, normalised to sum to 1. (PIL also cuts each output's taps at
    the rounded bounds `[trunc(centre - support + 0.5), trunc(centre + support + 0.5))`; the
    triangle is zero outside them already, so only the image's edge needs a mask.)"""
    scale = (hi - lo) / outsize
    support = max(scale, 1.0) if antialias else 1.0  # widened when shrinking: the antialiasing
    bands = -(-outsize // _BAND)
    # per band: its first output's first tap and its last output's end (few; in Python)
    firsts = [max(int(lo + (k * _BAND + 0.5) * scale - support + 0.5), 0) for k in range(bands)]
    last = [min((k + 1) * _BAND, outsize) - 1 for k in range(bands)]
    stops = [min(int(lo + (i + 0.5) * scale + support + 0.5), insize) for i in last]
    # the largest step that starts every window at or before its band's first tap
    step = min(((f - firsts[0]) // k for k, f in enumerate(firsts) if k), default=0)
    starts = [firsts[0] + k * step for k in range(bands)]
    length = max(e - s for s, e in zip(starts, stops))
    # the triangle at each output's centre, in units of the support
    centre = _rows(outsize) * (scale / support) + (lo + 0.5 * scale) / support
    pixel = (np.array(starts, np.float64)[:, None] + _offsets(length)) / support
    w = pixel[:, None, :] - centre  # (bands, _BAND, length)
    np.abs(w, out=w)
    np.subtract(1.0, w, out=w)
    np.maximum(w, 0.0, out=w)
    if starts[-1] + length > insize:  # taps past the image's edge (zero padding) do not count
        w *= pixel[:, None, :] < insize / support
    w /= w.sum(axis=2, keepdims=True)
    weights = w.astype(np.float32)
    weights.flags.writeable = False  # shared through the cache
    span = (bands - 1) * step + length
    return _Axis(firsts[0], step, length, bands, span, weights)


@functools.lru_cache(maxsize=64)
def _rows(outsize: int) -> np.ndarray:
    """`(bands, _BAND, 1)` output indices; rows past the output repeat the last one (their
    results are dropped), so that every row has taps."""
    bands = -(-outsize // _BAND)
    return np.minimum(np.arange(bands * _BAND), outsize - 1).reshape(bands, _BAND, 1)


@functools.lru_cache(maxsize=64)
def _offsets(length: int) -> np.ndarray:
    return np.arange(length) + 0.5  # pixel centres


class _Taps(NamedTuple):
    """Both axes of one (image size, output size, window), and the views their products use."""

    rows: _Axis
    cols: _Axis
    have: tuple[int, int]  # the rows and columns of the image inside the windows' spans
    pad: bool  # whether the spans run past the image (zeros there)
    tall: int  # output rows, padded to whole bands
    rows_view: tuple[tuple[int, ...], tuple[int, ...]]  # shape and strides: row windows
    cols_view: tuple[tuple[int, ...], tuple[int, ...]]  # shape and strides: column windows
    # of the work arrays: the input (HWC), pass 1's result, that columns first, pass 2's result
    shapes: tuple[tuple[int, ...], ...]


@functools.lru_cache(maxsize=1024)
def _plan(
    height: int, width: int, shape: tuple[int, int], box: tuple[float, ...], antialias: bool
) -> _Taps:
    ya = _axis(height, shape[0], float(box[1]), float(box[3]), antialias)
    xa = _axis(width, shape[1], float(box[0]), float(box[2]), antialias)
    have = min(ya.span, height - ya.first), min(xa.span, width - xa.first)
    line = xa.span * 3 * _F32  # bytes of one row of the pass-1 input (HWC)
    tall = ya.bands * _BAND
    column = 3 * tall * _F32  # bytes of one column of the pass-2 input (all rows, channels)
    return _Taps(
        ya,
        xa,
        have,
        have != (ya.span, xa.span),
        tall,
        ((ya.bands, ya.length, xa.span * 3), (ya.step * line, line, _F32)),
        ((xa.bands, xa.length, 3 * tall), (xa.step * column, column, _F32)),
        (
            (ya.span, xa.span, 3),
            (ya.bands, _BAND, xa.span * 3),
            (xa.span, 3, tall),
            (xa.bands, _BAND, 3 * tall),
        ),
    )


def _view(base: np.ndarray, view: tuple[tuple[int, ...], tuple[int, ...]]) -> np.ndarray:
    """Overlapping windows of `base` (float32), without a copy."""
    return np.ndarray(view[0], np.float32, base, 0, view[1])


class _Work(NamedTuple):
    """One thread's work arrays for one plan, and every view of them a resize uses."""

    src: np.ndarray  # the input, float32 HWC (zeroed first when the spans pass the edges)
    fill: np.ndarray  # the part of `src` that the image fills
    rows: np.ndarray  # `src` as the row windows of pass 1
    mid: np.ndarray  # pass 1's result
    turned: np.ndarray  # `mid` seen columns first
    cols: np.ndarray  # its columns-first copy
    windows: np.ndarray  # `cols` as the column windows of pass 2
    res: np.ndarray  # pass 2's result
    picked: np.ndarray  # `res` seen as the CHW output


def _work(p: _Taps) -> _Work:
    """This thread's `_Work` for `p`, reused from one image to the next (a centre crop of
    images of one size uses one plan throughout). Two buffers hold the four arrays: each
    pass's result goes where the array before its input was (the columns-first copy where the
    input was, pass 2's result where pass 1's was), ~200 KB for a 256 px JPEG at 3/8 that
    stay in the core's cache beside the decoder's; fresh arrays for every image cost a pack
    ~25% more time in the resize (measured)."""
    held = getattr(_local, "work", None)
    if held is not None and held[0] is p:
        return held[1]
    sizes = [int(np.prod(shape)) for shape in p.shapes]
    first = np.empty(max(sizes[0], sizes[2]), np.float32)
    second = np.empty(max(sizes[1], sizes[3]), np.float32)
    src, mid, cols, res = (
        (first if k % 2 == 0 else second)[:n].reshape(shape)
        for k, (n, shape) in enumerate(zip(sizes, p.shapes))
    )
    wide = p.cols.bands * _BAND  # output columns, padded to whole bands
    work = _Work(
        src,
        src[: p.have[0], : p.have[1]],
        _view(src, p.rows_view),
        mid,
        mid.reshape(p.tall, p.cols.span, 3).transpose(1, 2, 0),
        cols,
        _view(cols, p.cols_view),
        res,
        res.reshape(wide, 3, p.tall).transpose(1, 2, 0),
    )
    _local.work = (p, work)
    return work


_local = threading.local()


def resize_into(
    out: np.ndarray, pixels: np.ndarray, box: tuple[float, ...], resample: str = RESAMPLE
) -> None:
    """Resize the window `box` (left, top, right, bottom, in pixels, fractions allowed) of
    `pixels` (uint8 `(height, width, 3)`) to `out` (uint8 `(3, rows, columns)`) with the filter
    `resample` (`RESAMPLE_MODES`): by the compiled passes where they were built, else by
    `numpy_resize_into` (the same weights and roundings; the sums' order differs, so ~0.1% of
    pixels may differ by a level); `"bicubic"` by `bicubic.py` (PIL's bytes either way)."""
    if resample == BICUBIC:
        bicubic_into(out, pixels, box)
        return
    antialias = _antialias(resample)
    if _resize is None or not (out.flags.c_contiguous and pixels.flags.c_contiguous):
        numpy_resize_into(out, pixels, box, resample)
        return
    rows = _taps(pixels.shape[0], out.shape[1], float(box[1]), float(box[3]), antialias)
    cols = _taps(pixels.shape[1], out.shape[2], float(box[0]), float(box[2]), antialias)
    _resize.resize(out, pixels, pixels.shape[0], pixels.shape[1], *rows, *cols, antialias)


def _antialias(resample: str) -> bool:
    """Whether the filter `resample` widens when shrinking (and rounds between its passes, as
    PIL does): `"bilinear"` does, `"bilinear-no-antialias"` does not (`"bicubic"` is
    `bicubic.py`'s)."""
    if resample not in RESAMPLE_MODES:
        raise ValueError(
            f"unknown resample filter {resample!r}; use one of {', '.join(RESAMPLE_MODES)}"
        )
    return resample == RESAMPLE_MODES[0]


@functools.lru_cache(maxsize=1024)
def _taps(
    insize: int, outsize: int, lo: float, hi: float, antialias: bool
) -> tuple[np.ndarray, np.ndarray]:
    """`_axis`'s weights as the compiled passes take them: per output its first input (int32
    `(outsize,)`) and `k` taps from there (float32 `(outsize, k)`), `k` the most non-zero taps
    any output has; an output near the image's end starts earlier, with zeros first."""
    a = _axis(insize, outsize, lo, hi, antialias)
    w = a.weights.reshape(-1, a.length)[:outsize]
    base = a.first + np.arange(outsize) // _BAND * a.step  # each output's window start
    live = w > 0
    first, end = live.argmax(axis=1), a.length - live[:, ::-1].argmax(axis=1)
    k = int((end - first).max())
    start = np.minimum(base + first, insize - k)
    at = start[:, None] - base[:, None] + np.arange(k)  # the taps' places in the windows
    inside = (at >= 0) & (at < a.length)
    taps = np.where(inside, np.take_along_axis(w, np.clip(at, 0, a.length - 1), axis=1), 0)
    start, taps = start.astype(np.int32), np.ascontiguousarray(taps, np.float32)
    start.flags.writeable = taps.flags.writeable = False  # shared through the cache
    return start, taps


def numpy_resize_into(
    out: np.ndarray, pixels: np.ndarray, box: tuple[float, ...], resample: str = RESAMPLE
) -> None:
    """`resize_into` with numpy's products (and BLAS's sums); numpy's integer passes for
    `"bicubic"`."""
    if resample == BICUBIC:
        numpy_bicubic_into(out, pixels, box)
        return
    antialias = _antialias(resample)
    rows, cols = out.shape[1:]
    p = _plan(pixels.shape[0], pixels.shape[1], (rows, cols), tuple(box), antialias)
    w = _work(p)
    ya, xa = p.rows, p.cols
    # the pixels the windows read, as float32, zero past the image's edges
    if p.pad:
        w.src[...] = 0.0
    w.fill[...] = pixels[ya.first : ya.first + p.have[0], xa.first : xa.first + p.have[1]]
    # pass 1, over rows: one product per band of rows, all columns and channels at once
    np.matmul(ya.weights, w.rows, out=w.mid)
    # to whole levels, as PIL's 8-bit intermediate (no clip: see the end), columns first;
    # without antialias, as F.interpolate, the fractions are kept
    if antialias:
        np.add(w.mid, 0.5, out=w.mid)
        np.floor(w.turned, out=w.cols)
    else:
        w.cols[...] = w.turned
    # pass 2, over columns: one product per band of columns, all rows of all channels at once
    np.matmul(xa.weights, w.windows, out=w.res)
    # round half up into CHW. No clip: the weights are >= 0 and sum to 1, so a value lies in
    # 0..255 (float error ~1e-4), and the cast's truncation of x + 0.5 gives 0..255.
    np.add(w.picked[:, :rows, :cols], 0.5, out=out, casting="unsafe")

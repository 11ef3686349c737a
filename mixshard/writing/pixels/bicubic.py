"""PIL's bicubic resize (`Image.resize(size, Image.BICUBIC, box=...)`, PIL's default for RGB
images) reproduced byte for byte: the `"bicubic"` filter of `resample.py`. docs/design.md,
"Resize filters", states PIL's rule (the kernel, its taps in 22-bit fixed point, two passes
columns first) and where Pillow versions differ.

This module computes the taps as PIL does (the same float64 operations in the same order, so
the same integers) and runs the passes in integer arithmetic: compiled in `_resize.c`
(`fixed`) where it was built, else in numpy (`numpy_bicubic_into`); both give PIL's bytes.
"""

from __future__ import annotations

import functools
import math
from types import ModuleType
from typing import Optional

import numpy as np

_resize: Optional[ModuleType]
try:  # the passes compiled (`_resize.c`), where the install had a C compiler
    from . import _resize
except ImportError:  # pragma: no cover - only where the extension could not be built
    _resize = None

PRECISION_BITS = 22  # PIL's: 32 - 8 bits of the pixel - 2 bits of headroom
_ONE = float(1 << PRECISION_BITS)
_HALF = 1 << (PRECISION_BITS - 1)
_A = -0.5  # PIL's bicubic kernel
_SUPPORT = 2.0


def cubic(x: np.ndarray) -> np.ndarray:
    """PIL's `bicubic_filter` (`a = -0.5`) at `x`, float64, its operations in its order."""
    x = np.abs(x)
    near = ((_A + 2.0) * x - (_A + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * _A
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def pil_coefficients(
    insize: int, outsize: int, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PIL's `precompute_coeffs` and `normalize_coeffs_8bpc` for one axis: each output's first
    input (`xmin`, int64), its count of taps (`xmax`) and its fixed-point weights (int64
    `(outsize, ksize)`, zero past its count). The window's bounds are float32, as PIL's."""
    lo32, hi32 = np.float32(lo), np.float32(hi)
    scale = float(np.float32(hi32 - lo32)) / outsize
    filterscale = max(scale, 1.0)
    support = _SUPPORT * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    centre = float(lo32) + (np.arange(outsize) + 0.5) * scale
    xmin = np.maximum(np.trunc(centre - support + 0.5), 0).astype(np.int64)
    xmax = np.minimum(np.trunc(centre + support + 0.5), insize).astype(np.int64) - xmin
    x = np.arange(ksize)
    at = (x + xmin[:, None]).astype(np.float64) - centre[:, None] + 0.5
    w = cubic(at * (1.0 / filterscale))
    w[x >= xmax[:, None]] = 0.0
    total = np.zeros(outsize)
    for t in range(ksize):  # PIL's sum, tap after tap (numpy's own sums pairwise)
        total += w[:, t]
    np.divide(w, total[:, None], out=w, where=total[:, None] != 0.0)
    fixed = np.trunc(np.where(w < 0, -0.5, 0.5) + w * _ONE).astype(np.int64)
    return xmin, xmax, fixed


@functools.lru_cache(maxsize=1024)
def taps(insize: int, outsize: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """`pil_coefficients` as the passes take them: per output its first input (int32
    `(outsize,)`) and `k` fixed-point weights from there (int32 `(outsize, k)`), `k` the most
    taps any output has; an output near the image's end starts earlier, zeros first (a zero
    tap adds nothing, so the sums are PIL's)."""
    xmin, xmax, fixed = pil_coefficients(insize, outsize, lo, hi)
    k = max(int(xmax.max()), 1)
    start = np.minimum(xmin, max(insize - k, 0))
    shift = xmin - start
    out = np.zeros((outsize, k), np.int32)
    for i in range(outsize):  # (once per axis and size: cached)
        n = int(xmax[i])
        out[i, shift[i] : shift[i] + n] = fixed[i, :n]
    start = start.astype(np.int32)
    start.flags.writeable = out.flags.writeable = False  # shared through the cache
    return start, out


def bicubic_into(out: np.ndarray, pixels: np.ndarray, box: tuple[float, ...]) -> None:
    """PIL's bicubic resize of the window `box` (left, top, right, bottom) of `pixels` (uint8
    `(height, width, 3)`) into `out` (uint8 `(3, rows, columns)`): compiled where it was
    built, else `numpy_bicubic_into` (the same bytes)."""
    if _resize is None or not (out.flags.c_contiguous and pixels.flags.c_contiguous):
        numpy_bicubic_into(out, pixels, box)
        return
    rows = taps(pixels.shape[0], out.shape[1], float(box[1]), float(box[3]))
    cols = taps(pixels.shape[1], out.shape[2], float(box[0]), float(box[2]))
    _resize.fixed(out, pixels, pixels.shape[0], pixels.shape[1], *rows, *cols)


def _settle(acc: np.ndarray) -> np.ndarray:
    """A pass's sums to levels, as PIL's `clip8`: plus a half, shifted down, clipped."""
    return np.clip((acc + _HALF) >> PRECISION_BITS, 0, 255)


def numpy_bicubic_into(out: np.ndarray, pixels: np.ndarray, box: tuple[float, ...]) -> None:
    """`bicubic_into` in numpy's integer arithmetic, a tap at a time."""
    ys, yk = taps(pixels.shape[0], out.shape[1], float(box[1]), float(box[3]))
    xs, xk = taps(pixels.shape[1], out.shape[2], float(box[0]), float(box[2]))
    first, last = int(ys.min()), int(ys.max()) + yk.shape[1]
    src = pixels[first:last].astype(np.int64)  # the rows the second pass reads
    acc = np.zeros((last - first, len(xs), 3), np.int64)
    for t in range(xk.shape[1]):  # columns first, as PIL
        acc += src[:, xs + t] * xk[:, t, None]
    mid = _settle(acc)
    acc = np.zeros((len(ys), len(xs), 3), np.int64)
    for t in range(yk.shape[1]):
        acc += mid[ys - first + t] * yk[:, t, None, None]
    out[...] = _settle(acc).transpose(2, 0, 1)

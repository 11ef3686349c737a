"""DMC-GB's green-screen rule as a table of every uint8 colour, for `masks.green_screen`.

DMControl-GB (`src/env/wrappers.py`, `do_green_screen`) replaces a pixel when its HSV lies in
h 100-185 degrees, s 80-255, v 70-255, with the HSV computed in Python floats (float64) from
`r / 255.`, `g / 255.`, `b / 255.` as `colorsys` does, then scaled by 360 and 255. Where the
exact hue or saturation sits on a bound (hue exactly 100 or 185 degrees, saturation exactly
80) the float rounding decides, one way for some colours and the other way for others: no
integer rewrite of the rule agrees with it on all of them (4,712 of the 16.7M colours differ).

So the rule is evaluated once, in the same float64 operations in the same order, for all
2**24 colours, and kept as a bool table (16 MB) per device: a mask is then one gather, exact
by construction and the same on every device. The table is built on the CPU (IEEE float64
division and multiplication are correctly rounded there, as in Python) and copied to other
devices; the first call takes about 1.5 s on one core, later calls none.
"""

from __future__ import annotations

import threading

import torch

# name -> ((h_min, h_max) degrees, (s_min, s_max) on 0..255, (v_min, v_max) on 0..255)
PRESETS: dict[str, tuple[tuple[float, float], tuple[float, float], tuple[float, float]]] = {
    "dmcgb": ((100, 185), (80, 255), (70, 255)),
}

COLOURS = 1 << 24
_CHUNK = 1 << 18  # 256k colours at a time: about 30 MB of float64 temporaries
_TABLES: dict[tuple[str, torch.device], torch.Tensor] = {}
_LOCK = threading.Lock()


def replaced(rgb: torch.Tensor, preset: str = "dmcgb") -> torch.Tensor:
    """Bool, shaped like `rgb[..., 0]`: the colours `do_green_screen` replaces.

    `rgb` is an integer tensor `(..., 3)` of 0..255 values. The same float64 steps as
    DMC-GB's `rgb_to_hsv`: V is the maximum, grey (max == min) is h = s = 0, S = (max - min) /
    max, the hue from the first maximal channel (R, then G, then B), `(h / 6.0) % 1.0`.
    """
    (h_lo, h_hi), (s_lo, s_hi), (v_lo, v_hi) = PRESETS[preset]
    r, g, b = (c.to(torch.float64) / 255.0 for c in rgb.unbind(-1))
    top = torch.maximum(torch.maximum(r, g), b)
    low = torch.minimum(torch.minimum(r, g), b)
    span = top - low
    grey = span == 0
    sat = span / top  # 0/0 for black: grey, overwritten below
    rc, gc, bc = (top - r) / span, (top - g) / span, (top - b) / span
    hue = torch.where(r == top, bc - gc, torch.where(g == top, (2.0 + rc) - bc, (4.0 + gc) - rc))
    hue = torch.remainder(hue / 6.0, 1.0)  # Python's float %: the sign of the divisor
    hue = torch.where(grey, 0.0, hue) * 360
    sat = torch.where(grey, 0.0, sat) * 255
    val = top * 255
    return ((hue >= h_lo) & (hue <= h_hi) & (sat >= s_lo) & (sat <= s_hi) & (val >= v_lo)) & (
        val <= v_hi
    )


def _build(preset: str) -> torch.Tensor:
    """The keep table on the CPU: entry `r << 16 | g << 8 | b` is False where DMC-GB replaces."""
    table = torch.empty(COLOURS, dtype=torch.bool)
    for lo in range(0, COLOURS, _CHUNK):
        code = torch.arange(lo, lo + _CHUNK, dtype=torch.int32)
        rgb = torch.stack([code >> 16, (code >> 8) & 255, code & 255], dim=-1)
        torch.logical_not(replaced(rgb, preset), out=table[lo : lo + _CHUNK])
    return table


def keep_table(preset: str, device: torch.device) -> torch.Tensor:
    """The `(2**24,)` bool keep table of `preset` on `device`, built once per process."""
    table = _TABLES.get((preset, device))
    if table is None:
        with _LOCK:  # one build, however many threads ask at once
            cpu = torch.device("cpu")
            if (preset, cpu) not in _TABLES:
                _TABLES[(preset, cpu)] = _build(preset)
            if (preset, device) not in _TABLES:
                _TABLES[(preset, device)] = _TABLES[(preset, cpu)].to(device)
            table = _TABLES[(preset, device)]
    return table

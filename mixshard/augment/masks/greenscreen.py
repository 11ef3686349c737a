"""DMC-GB's green-screen rule as a table of every uint8 colour, for `masks.green_screen`.

DMControl-GB's `do_green_screen` decides in Python floats, and where a colour's exact hue or
saturation sits on a bound the float rounding decides, so no integer rewrite agrees with it on
every colour. The rule is evaluated once, in the same float64 operations in the same order, for
every colour it may replace (an exact integer form of the rule finds them), and kept as a bool
table per device, built on the CPU and copied: a mask is one gather, exact by construction.
docs/design.md, "Keep masks", gives the rule, its bounds and the figures.
"""

from __future__ import annotations

import threading

import torch

# name -> ((h_min, h_max) degrees, (s_min, s_max) on 0..255, (v_min, v_max) on 0..255),
# integers (the exact form of the rule in `_maybe_replaced` compares integers)
PRESETS: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    "dmcgb": ((100, 185), (80, 255), (70, 255)),
}

COLOURS = 1 << 24
_CHUNK = 1 << 20  # a million colours at a time: about 40 MB of int32 temporaries
_TABLES: dict[tuple[str, torch.device], torch.Tensor] = {}
_LOCK = threading.Lock()


def replaced(
    red: torch.Tensor, green: torch.Tensor, blue: torch.Tensor, preset: str = "dmcgb"
) -> torch.Tensor:
    """Bool, shaped like the channels: the colours `do_green_screen` replaces.

    The channels are integer tensors of 0..255 values. The same float64 steps as
    DMC-GB's `rgb_to_hsv`: V is the maximum, grey (max == min) is h = s = 0, S = (max - min) /
    max, the hue from the first maximal channel (R, then G, then B), `(h / 6.0) % 1.0`.
    """
    (h_lo, h_hi), (s_lo, s_hi), (v_lo, v_hi) = PRESETS[preset]
    r, g, b = (c.to(torch.float64) / 255.0 for c in (red, green, blue))
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


def _maybe_replaced(
    red: torch.Tensor, green: torch.Tensor, blue: torch.Tensor, preset: str
) -> torch.Tensor:
    """Bool like the channels: where the rule holds in exact (integer) arithmetic, bounds
    included. It contains every colour the float rule replaces: off a bound the exact hue
    (a multiple of 1/d degrees, d <= 255), saturation (of 1/max) and value (an integer) lie at
    least 1/255 from it, far beyond the float64 steps' error (~1e-13); on a bound, where
    the rounding decides, it says yes. So the float rule need only run on these colours (a
    fifth of all for "dmcgb")."""
    (h_lo, h_hi), (s_lo, s_hi), (v_lo, v_hi) = PRESETS[preset]
    r, g, b = (c.to(torch.int32) for c in (red, green, blue))
    top = torch.maximum(torch.maximum(r, g), b)
    span = top - torch.minimum(torch.minimum(r, g), b)
    # the hue in degrees times span, from the first maximal channel (R, then G, then B)
    from_r = 60 * (b - g)
    from_r = torch.where(from_r < 0, from_r + 360 * span, from_r)
    hue = torch.where(
        r == top,
        from_r,
        torch.where(g == top, 120 * span + 60 * (b - r), 240 * span + 60 * (r - g)),
    )
    coloured = (span > 0) & (hue >= h_lo * span) & (hue <= h_hi * span)
    coloured &= (255 * span >= s_lo * top) & (255 * span <= s_hi * top)
    grey = (span == 0) & (h_lo <= 0 <= h_hi) & (s_lo <= 0 <= s_hi)  # hue and saturation 0
    return (coloured | grey) & (top >= v_lo) & (top <= v_hi)


def _build(preset: str) -> torch.Tensor:
    """The keep table on the CPU: entry `r << 16 | g << 8 | b` is False where DMC-GB replaces."""
    table = torch.ones(COLOURS, dtype=torch.bool)
    for lo in range(0, COLOURS, _CHUNK):
        code = torch.arange(lo, lo + _CHUNK, dtype=torch.int32)
        r, g, b = code >> 16, (code >> 8) & 255, code & 255
        candidates = _maybe_replaced(r, g, b, preset).nonzero().squeeze(1)
        table[lo + candidates] = ~replaced(r[candidates], g[candidates], b[candidates], preset)
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

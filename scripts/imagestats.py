"""Per-image statistics of overlay images, to compare mixshard's with the reference's.

numpy only, so tests import it (with `scripts/` on `sys.path`). Every function takes a uint8
(or float, 0..255) batch `(N, 3, H, W)`, RGB, the layout `Overlay.sample` returns.

Definitions (what the known answers in `tests/test_imagestats.py` follow from):

* mean, std: of the image's 3 x H x W RGB values (0..255), one number per image each; a table
  reports their average over the draws (`std` is then the mean contrast within an image, not
  the spread between images).
* grey: ITU-R BT.601 luma, `0.299 R + 0.587 G + 0.114 B` (weights sum to 1, so a grey pixel
  keeps its value).
* detail: the mean absolute 4-neighbour Laplacian of the grey image over its interior pixels,
  `|g[y-1,x] + g[y+1,x] + g[y,x-1] + g[y,x+1] - 4 g[y,x]|` for `1 <= y < H-1, 1 <= x < W-1`:
  how much high-frequency energy survives. A flat image or a linear ramp gives 0; a 1-pixel
  0/255 checkerboard gives `4 * 255 = 1020`.
* colour-histogram distance: per channel, the total-variation distance `0.5 * sum |p - q|`
  between the normalised histograms (`bins` equal bins over 0..255) of all pixels of all
  draws pooled, averaged over the 3 channels: 0 for the same colours, 1 for disjoint ones.
"""

from __future__ import annotations

import numpy as np

LUMA = np.array([0.299, 0.587, 0.114])
QUANTILES = (0.1, 0.5, 0.9)


def _check(imgs: np.ndarray) -> np.ndarray:
    imgs = np.asarray(imgs)
    if imgs.ndim != 4 or imgs.shape[1] != 3:
        raise ValueError(f"images must be (N, 3, H, W), got {imgs.shape}")
    return imgs


def channel_stats(imgs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per image: the mean and the standard deviation of its RGB values, each `(N,)`."""
    flat = _check(imgs).reshape(len(imgs), -1).astype(np.float64)
    return flat.mean(axis=1), flat.std(axis=1)


def grey(imgs: np.ndarray) -> np.ndarray:
    """ITU-R BT.601 luma of each image, `(N, H, W)` float64."""
    return np.einsum("nchw,c->nhw", _check(imgs).astype(np.float64), LUMA)


def detail(imgs: np.ndarray) -> np.ndarray:
    """Per image: the mean |4-neighbour Laplacian| of the grey image's interior, `(N,)`."""
    g = grey(imgs)
    if g.shape[1] < 3 or g.shape[2] < 3:
        raise ValueError(f"detail needs images of at least 3x3 pixels, got {g.shape[1:]}")
    lap = g[:, :-2, 1:-1] + g[:, 2:, 1:-1] + g[:, 1:-1, :-2] + g[:, 1:-1, 2:] - 4 * g[:, 1:-1, 1:-1]
    return np.abs(lap).mean(axis=(1, 2))


def colour_histograms(imgs: np.ndarray, bins: int = 32) -> np.ndarray:
    """`(3, bins)`: per channel, the normalised histogram of all pixels of all images."""
    imgs = _check(imgs)
    edges = np.linspace(0, 256, bins + 1)
    hists = [np.histogram(imgs[:, c], bins=edges)[0].astype(np.float64) for c in range(3)]
    return np.stack([h / max(h.sum(), 1.0) for h in hists])


def histogram_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Total-variation distance of two `(3, bins)` histograms, averaged over the channels."""
    if p.shape != q.shape:
        raise ValueError(f"histograms differ in shape: {p.shape} and {q.shape}")
    return float(0.5 * np.abs(p - q).sum(axis=1).mean())


def summary(imgs: np.ndarray, bins: int = 32) -> dict:
    """Everything a fidelity table needs about one batch of draws.

    Returns:
        `mean`, `std` (averages over the images of the per-image values), `detail` (the
        per-image values, for plots), `detail_q` (their 10th, 50th and 90th percentiles) and
        `hist` (the pooled colour histograms).
    """
    mean, std = channel_stats(imgs)
    d = detail(imgs)
    return {
        "mean": float(mean.mean()),
        "std": float(std.mean()),
        "detail": d,
        "detail_q": tuple(float(v) for v in np.quantile(d, QUANTILES)),
        "hist": colour_histograms(imgs, bins),
    }

"""scripts/imagestats.py: the fidelity statistics, on constructed images with known answers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import imagestats  # noqa: E402


def grey_batch(planes: np.ndarray) -> np.ndarray:
    """(N, H, W) grey values -> (N, 3, H, W) uint8 with R = G = B."""
    return np.repeat(planes[:, None], 3, axis=1).astype(np.uint8)


def checkerboard(size: int = 8) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size]
    return ((xx + yy) % 2) * 255


def test_flat_images_and_ramps_have_no_detail():
    flat = np.full((2, 3, 10, 12), 77, dtype=np.uint8)
    assert imagestats.detail(flat).tolist() == [0.0, 0.0]
    ramp = grey_batch(np.tile(np.arange(0, 240, 20), (10, 1))[None])  # linear in x
    assert imagestats.detail(ramp).tolist() == [0.0]


def test_checkerboard_and_stripes_have_known_detail():
    # each interior pixel differs from its 4 neighbours by 255: |4 * 255|
    assert imagestats.detail(grey_batch(checkerboard()[None])).tolist() == [1020.0]
    # 1-pixel vertical stripes: the 2 horizontal neighbours differ, the vertical ones do not
    stripes = np.tile([0, 255], (8, 4))
    assert imagestats.detail(grey_batch(stripes[None])).tolist() == [510.0]


def test_grey_is_bt601_luma():
    img = np.zeros((1, 3, 3, 3), dtype=np.uint8)
    img[0, 0] = 100  # red only
    assert imagestats.grey(img)[0, 1, 1] == pytest.approx(29.9)
    img[0, 1], img[0, 2] = 100, 100
    assert imagestats.grey(img)[0, 1, 1] == pytest.approx(100.0)


def test_mean_and_std_per_image():
    half = np.zeros((1, 3, 4, 4), dtype=np.uint8)
    half[..., 2:] = 200
    mean, std = imagestats.channel_stats(np.concatenate([half, np.full_like(half, 50)]))
    assert mean.tolist() == [100.0, 50.0] and std.tolist() == [100.0, 0.0]
    s = imagestats.summary(np.concatenate([half, np.full_like(half, 50)]))
    assert s["mean"] == 75.0 and s["std"] == 50.0  # averages over the images


def test_histogram_distance():
    black = np.zeros((4, 3, 6, 6), dtype=np.uint8)
    white = np.full((4, 3, 6, 6), 255, dtype=np.uint8)
    hb, hw = imagestats.colour_histograms(black), imagestats.colour_histograms(white)
    assert hb.shape == (3, 32) and np.allclose(hb.sum(axis=1), 1.0)
    assert imagestats.histogram_distance(hb, hb) == 0.0
    assert imagestats.histogram_distance(hb, hw) == 1.0
    mixed = imagestats.colour_histograms(np.concatenate([black, white]))
    assert imagestats.histogram_distance(hb, mixed) == pytest.approx(0.5)


def test_quantiles_and_errors():
    planes = np.stack([np.full((5, 5), 0), checkerboard(5)] * 5)
    q = imagestats.summary(grey_batch(planes))["detail_q"]
    assert q[0] == 0.0 and q[2] == 1020.0
    with pytest.raises(ValueError, match=r"images must be \(N, 3, H, W\)"):
        imagestats.detail(np.zeros((2, 5, 5)))
    with pytest.raises(ValueError, match="at least 3x3"):
        imagestats.detail(np.zeros((1, 3, 2, 5)))

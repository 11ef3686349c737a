"""writing/resample.py: PIL's bilinear filter as banded matrix products."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mixshard.writing import resample
from mixshard.writing.resample import resize_into


def pil_resize(pixels: np.ndarray, box: tuple[float, ...], size: int) -> np.ndarray:
    img = Image.fromarray(pixels).resize((size, size), Image.Resampling.BILINEAR, box=box)
    return np.asarray(img).transpose(2, 0, 1).astype(int)


def resized(pixels: np.ndarray, box: tuple[float, ...], size: int) -> np.ndarray:
    out = np.empty((3, size, size), np.uint8)
    resize_into(out, pixels, box)
    return out


@pytest.mark.parametrize(
    "shape, box, size",
    [
        ((96, 96), (0, 0, 96, 96), 84),  # a 256 px JPEG at 3/8, centre crop
        ((96, 128), (16, 0, 112, 96), 84),  # a landscape one
        ((180, 240), (3.3, 10.7, 160.2, 170.1), 84),  # a random window, fractional
        ((300, 200), (0, 0, 200, 300), 64),  # squashed (`--crop full`)
        ((50, 60), (10, 5, 50, 45), 100),  # upscaled
        ((96, 96), (40, 40, 96, 96), 13),  # a size that is no whole number of bands
        ((20, 20), (0, 0, 20, 20), 1),
        ((1, 1), (0, 0, 1, 1), 5),
        ((500, 400), (0, 50, 400, 450), 24),  # shrunk 16x: wide windows
    ],
)
def test_resize_is_pils_bilinear_to_rounding(shape, box, size):
    rng = np.random.default_rng(sum(shape) + size)
    pixels = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    got = resized(pixels, box, size).astype(int)
    want = pil_resize(pixels, box, size)
    diff = np.abs(got - want)
    assert diff.max() <= 2  # float32 against PIL's fixed point, passes in the other order
    if size > 1:  # noise, the worst case for rounding: most pixels still equal
        assert (diff == 0).mean() >= 0.7 and diff.mean() < 0.3


def test_flat_images_stay_flat_and_the_range_holds():
    for value in (0, 1, 128, 254, 255):
        pixels = np.full((70, 90, 3), value, np.uint8)
        assert (resized(pixels, (5.5, 0, 75.25, 70), 33) == value).all()
    stripes = np.zeros((40, 40, 3), np.uint8)
    stripes[:, ::2] = 255
    out = resized(stripes, (0, 0, 40, 40), 17)
    assert out.dtype == np.uint8 and 0 < out.min() <= out.max() < 255  # averaged, not aliased


def test_channels_are_kept_apart_and_stored_channels_first():
    pixels = np.zeros((30, 30, 3), np.uint8)
    pixels[..., 0], pixels[..., 1], pixels[..., 2] = 10, 20, 30
    pixels[:, 15:, 2] = 250  # the right half bluer
    out = resized(pixels, (0, 0, 30, 30), 10)
    assert (out[0] == 10).all() and (out[1] == 20).all()
    assert (out[2, :, :4] == 30).all() and (out[2, :, -4:] == 250).all()


def test_the_same_window_gives_the_same_bytes_cached_or_not():
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, (120, 90, 3), dtype=np.uint8)
    box = (1.5, 7.25, 88.0, 119.5)
    first = resized(pixels, box, 84)
    resample._plan.cache_clear()
    resample._axis.cache_clear()
    assert np.array_equal(resized(pixels, box, 84), first)
    assert np.array_equal(resized(pixels.copy(), box, 84), first)

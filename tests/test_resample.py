"""writing/resample.py: PIL's bilinear filter as banded matrix products, and compiled."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mixshard.writing import resample
from mixshard.writing.resample import resize_into


def pil_resize(pixels: np.ndarray, box: tuple[float, ...], size: int) -> np.ndarray:
    img = Image.fromarray(pixels).resize((size, size), Image.Resampling.BILINEAR, box=box)
    return np.asarray(img).transpose(2, 0, 1).astype(int)


def resized(pixels: np.ndarray, box: tuple[float, ...], size: int, how=resize_into) -> np.ndarray:
    out = np.empty((3, size, size), np.uint8)
    how(out, pixels, box)
    return out


BOTH = pytest.mark.parametrize("how", [resize_into, resample.numpy_resize_into])


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
@BOTH
def test_resize_is_pils_bilinear_to_rounding(shape, box, size, how):
    rng = np.random.default_rng(sum(shape) + size)
    pixels = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    got = resized(pixels, box, size, how).astype(int)
    want = pil_resize(pixels, box, size)
    diff = np.abs(got - want)
    assert diff.max() <= 2  # float32 against PIL's fixed point, passes in the other order
    if size > 1:  # noise, the worst case for rounding: most pixels still equal
        assert (diff == 0).mean() >= 0.7 and diff.mean() < 0.3


@BOTH
def test_flat_images_stay_flat_and_the_range_holds(how):
    for value in (0, 1, 128, 254, 255):
        pixels = np.full((70, 90, 3), value, np.uint8)
        assert (resized(pixels, (5.5, 0, 75.25, 70), 33, how) == value).all()
    stripes = np.zeros((40, 40, 3), np.uint8)
    stripes[:, ::2] = 255
    out = resized(stripes, (0, 0, 40, 40), 17, how)
    assert out.dtype == np.uint8 and 0 < out.min() <= out.max() < 255  # averaged, not aliased


@BOTH
def test_channels_are_kept_apart_and_stored_channels_first(how):
    pixels = np.zeros((30, 30, 3), np.uint8)
    pixels[..., 0], pixels[..., 1], pixels[..., 2] = 10, 20, 30
    pixels[:, 15:, 2] = 250  # the right half bluer
    out = resized(pixels, (0, 0, 30, 30), 10, how)
    assert (out[0] == 10).all() and (out[1] == 20).all()
    assert (out[2, :, :4] == 30).all() and (out[2, :, -4:] == 250).all()


def test_the_same_window_gives_the_same_bytes_cached_or_not():
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, (120, 90, 3), dtype=np.uint8)
    box = (1.5, 7.25, 88.0, 119.5)
    first = resized(pixels, box, 84)
    resample._plan.cache_clear()
    resample._axis.cache_clear()
    resample._taps.cache_clear()
    assert np.array_equal(resized(pixels, box, 84), first)
    assert np.array_equal(resized(pixels.copy(), box, 84), first)


def test_the_compiled_resize_is_built():
    """`pip install` compiles `_resize.c` where a C compiler is (every machine `make test`
    runs on); without it packs are slower, and this names why."""
    assert resample._resize is not None, "mixshard/writing/_resize.c was not built (a C compiler?)"


def smooth(shape: tuple[int, int], seed: int) -> np.ndarray:
    """Photo-like pixels: noise blurred, so that few sums fall near a rounding edge."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (shape[0] // 4 + 1, shape[1] // 4 + 1, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize(shape[::-1], Image.Resampling.BICUBIC)
    return np.asarray(img).copy()


@pytest.mark.parametrize(
    "shape, box, size",
    [((96, 96), (0, 0, 96, 96), 84), ((120, 160), (20.5, 3, 140.25, 118), 84),
     ((40, 50), (0, 0, 50, 40), 96), ((300, 240), (0, 30, 240, 270), 32)],
)  # fmt: skip
def test_the_compiled_and_numpy_passes_agree_but_for_rounding(shape, box, size):
    """Same weights, same roundings; only the order of each sum's terms differs (BLAS's
    against left to right), so a sum at a half level may round the other way."""
    pixels = smooth(shape, size)
    got = resized(pixels, box, size).astype(int)
    want = resized(pixels, box, size, resample.numpy_resize_into).astype(int)
    diff = np.abs(got - want)
    assert diff.max() <= 2 and (diff == 0).mean() >= 0.995


def test_a_strided_input_or_output_takes_the_numpy_passes(monkeypatch):
    pixels = smooth((60, 80), 3)
    want = resized(pixels, (0, 0, 80, 60), 20, resample.numpy_resize_into)
    monkeypatch.setattr(resample, "_resize", None)  # as where it was not built
    assert np.array_equal(resized(pixels, (0, 0, 80, 60), 20), want)
    monkeypatch.undo()
    wide = np.zeros((60, 160, 3), np.uint8)
    wide[:, ::2] = pixels  # every second column: not contiguous
    assert np.array_equal(resized(wide[:, ::2], (0, 0, 80, 60), 20), want)
    out = np.zeros((3, 20, 40), np.uint8)
    resize_into(out[:, :, ::2], pixels, (0, 0, 80, 60))
    assert np.array_equal(out[:, :, ::2], want) and not out[:, :, 1::2].any()


def test_the_compiled_resize_refuses_buffers_that_do_not_match():
    if resample._resize is None:
        pytest.skip("not built (test_the_compiled_resize_is_built says so)")
    pixels = smooth((20, 30), 1)
    rows, cols = resample._taps(20, 10, 0.0, 20.0), resample._taps(30, 10, 0.0, 30.0)
    out = np.empty((3, 10, 10), np.uint8)
    run = resample._resize.resize
    run(out, pixels, 20, 30, *rows, *cols)
    assert np.array_equal(out, resized(pixels, (0, 0, 30, 20), 10))
    past = (np.minimum(rows[0] + 5, 19).astype(np.int32), rows[1])  # taps past the last row
    bad = [
        (out, pixels, 21, 30, *rows, *cols),  # not the pixels' size
        (np.empty((3, 10, 9), np.uint8), pixels, 20, 30, *rows, *cols),
        (out, pixels, 20, 30, *past, *cols),
        (out, pixels, 20, 30, rows[0], rows[1].ravel()[:-1].copy(), *cols),  # a tap short
    ]
    for args in bad:
        with pytest.raises(ValueError, match="do not match the sizes and taps"):
            run(*args)
    with pytest.raises(ValueError, match="not C-contiguous"):
        run(out[:, ::2], pixels, 20, 30, *rows, *cols)
    frozen = out.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        run(frozen, pixels, 20, 30, *rows, *cols)


def test_threads_resize_at_once_with_the_same_bytes():
    """The compiled passes release the GIL; their work memory is per call."""
    from concurrent.futures import ThreadPoolExecutor

    images = [smooth((96, 128), seed) for seed in range(8)]
    box = (16, 0, 112, 96)
    want = [resized(img, box, 84) for img in images]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(lambda img: resized(img, box, 84), images))
            assert all(np.array_equal(g, w) for g, w in zip(got, want))

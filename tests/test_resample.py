"""writing/pixels/resample.py: PIL's bilinear filter as banded matrix products, and compiled."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mixshard.writing.pixels import resample
from mixshard.writing.pixels.resample import resize_into


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
    assert resample._resize is not None, (
        "mixshard/writing/pixels/_resize.c was not built (a C compiler?)"
    )


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
    rows, cols = resample._taps(20, 10, 0.0, 20.0, True), resample._taps(30, 10, 0.0, 30.0, True)
    out = np.empty((3, 10, 10), np.uint8)
    run = resample._resize.resize
    run(out, pixels, 20, 30, *rows, *cols, True)
    assert np.array_equal(out, resized(pixels, (0, 0, 30, 20), 10))
    past = (np.minimum(rows[0] + 5, 19).astype(np.int32), rows[1])  # taps past the last row
    bad = [
        (out, pixels, 21, 30, *rows, *cols, True),  # not the pixels' size
        (np.empty((3, 10, 9), np.uint8), pixels, 20, 30, *rows, *cols, True),
        (out, pixels, 20, 30, *past, *cols, True),
        (out, pixels, 20, 30, rows[0], rows[1].ravel()[:-1].copy(), *cols, True),  # a tap short
    ]
    for args in bad:
        with pytest.raises(ValueError, match="do not match the sizes and taps"):
            run(*args)
    with pytest.raises(ValueError, match="not C-contiguous"):
        run(out[:, ::2], pixels, 20, 30, *rows, *cols, True)
    frozen = out.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        run(frozen, pixels, 20, 30, *rows, *cols, True)


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


NO_AA = "bilinear-no-antialias"


def torch_resize(pixels: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """`F.interpolate(mode="bilinear", align_corners=False, antialias=False)` of the whole
    image on float pixels, rounded half up to levels: `(3, rows, cols)` int."""
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(pixels).permute(2, 0, 1).unsqueeze(0).float()
    y = torch.nn.functional.interpolate(
        x, size=(rows, cols), mode="bilinear", align_corners=False, antialias=False
    )
    return (y[0] + 0.5).floor().to(torch.int64).numpy()


def half_pixel(pixels: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The documented rule of `tf.image.resize(method="bilinear")` (half_pixel_centers, no
    antialias; TensorFlow is not installed here): output `i` reads the input at `(i + 0.5) *
    in / out - 0.5`, clamped to the edge pixels, and weighs its two neighbours. float64,
    rounded to levels."""

    def axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = np.maximum((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0.0)
        lo = np.minimum(np.floor(src).astype(int), n_in - 1)
        return lo, np.minimum(lo + 1, n_in - 1), src - lo

    y0, y1, fy = axis(pixels.shape[0], rows)
    x0, x1, fx = axis(pixels.shape[1], cols)
    p = pixels.astype(np.float64)
    top = p[y0][:, x0] * (1 - fx)[:, None] + p[y0][:, x1] * fx[:, None]
    bottom = p[y1][:, x0] * (1 - fx)[:, None] + p[y1][:, x1] * fx[:, None]
    out = top * (1 - fy)[:, None, None] + bottom * fy[:, None, None]
    return np.floor(out + 0.5).astype(int).transpose(2, 0, 1)


SHAPES = [
    ((352, 352), (84, 84)),  # DMC-GB's clip to its observation: down 4.19x
    ((480, 854), (84, 84)),  # a DAVIS frame squashed: down 5.7x and 10.2x
    ((60, 90), (84, 84)),  # up in both
    ((100, 40), (64, 64)),  # down in rows, up in columns
    ((37, 53), (84, 120)),  # non-square out, odd sizes
    ((200, 150), (17, 9)),  # far down, no whole bands
    ((1, 7), (5, 3)),  # a single row
    ((84, 84), (84, 84)),  # the same size: the pixels themselves
]


@pytest.mark.parametrize("shape, out_shape", SHAPES)
@BOTH
def test_no_antialias_is_f_interpolate_within_a_level(shape, out_shape, how):
    rng = np.random.default_rng(shape[0] * 1000 + out_shape[1])
    pixels = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    out = np.empty((3, *out_shape), np.uint8)
    how(out, pixels, (0, 0, shape[1], shape[0]), NO_AA)
    got = out.astype(int)
    want = torch_resize(pixels, *out_shape)
    diff = np.abs(got - want)
    assert diff.max() <= 1
    # noise, the worst case for rounding: a level off only where a sum lies within float
    # error of a half (torch computes its taps' fractions in float32, these in float64)
    assert (diff == 0).mean() >= 0.99
    assert np.abs(half_pixel(pixels, *out_shape) - got).max() <= 1
    if shape == out_shape:
        assert np.array_equal(out, pixels.transpose(2, 0, 1))


def test_the_half_pixel_rule_is_f_interpolate_and_antialias_is_not():
    """The float64 rule in `half_pixel` (tf.image.resize's) and torch agree to rounding on
    noise, and PIL's antialiased default is far from both when shrinking."""
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (352, 352, 3), dtype=np.uint8)
    want = torch_resize(pixels, 84, 84)
    assert np.abs(half_pixel(pixels, 84, 84) - want).max() <= 1
    out = np.empty((3, 84, 84), np.uint8)
    resize_into(out, pixels, (0, 0, 352, 352))  # the default: antialiased
    assert np.abs(out.astype(int) - want).mean() > 20


def test_an_unknown_filter_is_refused_by_name():
    out = np.empty((3, 4, 4), np.uint8)
    with pytest.raises(ValueError, match="^unknown resample filter 'nearest'; use one of "
                       "bilinear, bilinear-no-antialias$"):  # fmt: skip
        resize_into(out, np.zeros((8, 8, 3), np.uint8), (0, 0, 8, 8), "nearest")

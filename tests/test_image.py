from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import noise, png_header_only, solid
from PIL import Image, ImageOps

from mixshard.core.crops import crop_rng, random_resized_box
from mixshard.core.errors import ImageDecodeError
from mixshard.writing.pixels.image import crop_boxes, load_image


def rgb_at(arr: np.ndarray) -> tuple[int, int, int]:
    """The colour of a uniform (1, 3, S, S) result, asserting it is uniform."""
    assert arr.shape[0] == 1 and arr.dtype == np.uint8
    flat = arr[0].reshape(3, -1)
    assert (flat == flat[:, :1]).all(), "image is not uniform"
    return tuple(int(v) for v in flat[:, 0])


@pytest.mark.parametrize(
    "mode,color,save,expected",
    [
        ("RGB", (10, 200, 30), {}, (10, 200, 30)),
        ("L", 100, {}, (100, 100, 100)),
        ("LA", (100, 0), {}, (100, 100, 100)),
        ("RGBA", (10, 20, 30, 0), {}, (10, 20, 30)),
        ("1", 1, {}, (255, 255, 255)),
        ("I;16", 0x8000, {}, (128, 128, 128)),
        ("I", 65535, {"format": "TIFF"}, (255, 255, 255)),
        ("I", 77, {"format": "TIFF"}, (77, 77, 77)),
        ("F", 0.5, {"format": "TIFF"}, (128, 128, 128)),
        ("F", 200.0, {"format": "TIFF"}, (200, 200, 200)),
    ],
)
def test_every_mode_becomes_rgb(tmp_path, mode, color, save, expected):
    ext = ".tif" if save.get("format") == "TIFF" else ".png"
    path = solid(tmp_path / f"x{ext}", color, size=(20, 12), mode=mode, **save)
    assert rgb_at(load_image(path, 8)) == expected


def test_cmyk_jpeg_and_palette_with_transparency(tmp_path):
    cmyk = solid(tmp_path / "c.jpg", (0, 0, 0, 0), mode="CMYK", quality=100)
    assert rgb_at(load_image(cmyk, 8)) == (255, 255, 255)
    pal = Image.new("P", (16, 16), 1)
    pal.putpalette([0, 0, 0, 200, 10, 20] + [0] * 762)
    pal.info["transparency"] = 1
    pal.save(tmp_path / "p.png", transparency=1)
    assert rgb_at(load_image(tmp_path / "p.png", 8)) == (200, 10, 20)
    gif = tmp_path / "g.gif"
    pal.save(gif, transparency=0)
    assert rgb_at(load_image(gif, 8)) == (200, 10, 20)


def halves(width: int, height: int) -> Image.Image:
    """Left half red, right half blue."""
    arr = np.zeros((height, width, 3), np.uint8)
    arr[:, : width // 2, 0] = 255
    arr[:, width // 2 :, 2] = 255
    return Image.fromarray(arr)


@pytest.mark.parametrize("ext", [".png", ".jpg"])
def test_exif_orientation_is_applied(tmp_path, ext):
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display: stored left -> displayed top
    path = tmp_path / f"o{ext}"
    halves(640, 320).save(path, exif=exif, quality=95)
    out = load_image(path, 84, "full")[0].astype(int)
    top, bottom = out[:, :30], out[:, 54:]
    assert top[0].mean() > 240 and top[2].mean() < 15  # red on top
    assert bottom[2].mean() > 240 and bottom[0].mean() < 15  # blue below


def test_center_crop_takes_the_middle_square(tmp_path):
    arr = np.zeros((20, 60, 3), np.uint8)
    arr[:, :20] = (255, 0, 0)
    arr[:, 20:40] = (0, 255, 0)
    arr[:, 40:] = (0, 0, 255)
    Image.fromarray(arr).save(tmp_path / "c.png")
    center = load_image(tmp_path / "c.png", 10, "center")[0]
    assert (center[:, 2:-2, 2:-2] == np.array([0, 255, 0])[:, None, None]).all()
    full = load_image(tmp_path / "c.png", 12, "full")[0]
    assert tuple(full[:, 5, 0]) == (255, 0, 0) and tuple(full[:, 5, -1]) == (0, 0, 255)


def reference_resize(path: Path, size: int) -> np.ndarray:
    """Full decode, then the same centre box and bilinear resize (no draft)."""
    with Image.open(path) as img:
        img = ImageOps.exif_transpose(img).convert("RGB")
        w, h = img.size
        side = min(w, h)
        box = ((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)
        resized = img.resize((size, size), Image.Resampling.BILINEAR, box=box)
    return np.asarray(resized).transpose(2, 0, 1)


def test_jpeg_draft_decode_matches_full_decode_closely(tmp_path):
    path = noise(tmp_path / "big.jpg", size=(640, 480), seed=3, quality=95)
    # smooth the noise so that DCT scaling and full decode + antialiasing agree
    Image.open(path).resize((80, 60)).resize((640, 480), Image.Resampling.BICUBIC).save(
        path, quality=95
    )
    got = load_image(path, 84)[0].astype(int)
    want = reference_resize(path, 84).astype(int)
    assert np.abs(got - want).mean() < 2.0
    with Image.open(path) as img:  # the draft really is taken: 480 / 2 >= 2 * 84
        img.draft(None, (320, 240))
        assert img.size == (320, 240)


def test_random_crops_are_seeded_by_seed_and_key(tmp_path):
    path = noise(tmp_path / "n.png", size=(120, 90), seed=1)
    a = load_image(path, 16, "random", variants=3, seed=0, key="k")
    b = load_image(path, 16, "random", variants=3, seed=0, key="k")
    assert a.shape == (3, 3, 16, 16)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[0], a[1])
    assert not np.array_equal(a, load_image(path, 16, "random", variants=3, seed=1, key="k"))
    assert not np.array_equal(a, load_image(path, 16, "random", variants=3, seed=0, key="j"))


def test_random_resized_box_follows_torchvision_rule():
    rng = np.random.default_rng(0)
    for _ in range(500):
        left, top, right, bottom = random_resized_box(200, 100, rng)
        assert 0 <= left < right <= 200 and 0 <= top < bottom <= 100
        area = (right - left) * (bottom - top) / (200 * 100)
        assert 0.07 <= area <= 1.0
    # scale (1, 1) admits no window with another ratio: fallback is the whole (4:3) image
    assert random_resized_box(80, 60, rng, scale=(1, 1)) == (0, 0, 80, 60)
    # a very wide image falls back to the centred 4:3 window
    assert random_resized_box(400, 30, rng, scale=(1, 1)) == (180, 0, 220, 30)
    assert crop_boxes(60, 20, "center", 2, None) == [(20, 0, 40, 20)] * 2
    assert crop_rng(0, "a").integers(1 << 30) == crop_rng(0, "a").integers(1 << 30)


def test_bad_files_raise_decode_errors_with_reasons(tmp_path):
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "text.png").write_text("not an image at all")
    good = noise(tmp_path / "good.jpg", size=(64, 64), quality=90).read_bytes()
    (tmp_path / "trunc.jpg").write_bytes(good[: len(good) // 2])
    png_header_only(tmp_path / "bomb.png", 20000, 20000)
    png_header_only(tmp_path / "big.png", 10000, 10000)  # over the limit but under 2x
    reasons = {}
    for name in ["empty.jpg", "text.png", "trunc.jpg", "bomb.png", "big.png"]:
        with pytest.raises(ImageDecodeError) as err:
            load_image(tmp_path / name, 8)
        reasons[name] = err.value.reason
    assert reasons["empty.jpg"] == "empty file (0 bytes)"
    assert reasons["text.png"] == "not an image PIL can read (cannot identify image file)"
    assert reasons["trunc.jpg"].startswith("corrupt or truncated: image file is truncated")
    assert reasons["bomb.png"].startswith("decompression bomb:")
    assert reasons["big.png"].startswith("decompression bomb: 10000x10000 = 100000000 pixels")


def test_unknown_crop_mode():
    with pytest.raises(ValueError, match="unknown crop mode 'middle'"):
        load_image("x.png", 8, "middle")


def test_jpeg_scale_keeps_the_crop_at_the_output_size():
    from mixshard.writing.pixels.image import _dct_eighths

    assert _dct_eighths([(0, 0, 256, 256)], 84) == 3  # decoded at 96 px, never at 1/2 or 1/4
    assert _dct_eighths([(0, 0, 200, 150)], 84) == 5  # 150 * 3/8 = 56 < 84
    assert _dct_eighths([(0, 0, 640, 480), (10, 10, 110, 110)], 84) == 7  # the smallest window
    assert _dct_eighths([(0, 0, 90, 90)], 84) == 8


def test_scaled_jpeg_decode_is_close_to_a_full_decode_and_pil_still_decodes(tmp_path, monkeypatch):
    from mixshard.writing.pixels import image

    path = noise(tmp_path / "big.jpg", size=(256, 256), seed=3, quality=95)
    Image.open(path).resize((64, 64)).resize((256, 256), Image.Resampling.BICUBIC).save(
        path, quality=95
    )
    scaled = load_image(path, 84)[0].astype(int)
    assert np.abs(scaled - reference_resize(path, 84).astype(int)).mean() < 2.0
    monkeypatch.setattr(image, "simplejpeg", None)  # a platform without simplejpeg's wheel
    assert np.array_equal(load_image(path, 84)[0], reference_resize(path, 84))  # full decode
    monkeypatch.undo()
    monkeypatch.setattr(image, "_dct_eighths", lambda boxes, size: 8)
    # the same decoder; libjpeg-turbo's pixels are resized by `resample`: one level at most
    # from PIL's resize of them (rounding), most pixels equal
    diff = np.abs(load_image(path, 84)[0].astype(int) - reference_resize(path, 84))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.8


def test_a_jpeg_without_exif_skips_pil_and_gets_the_same_pixels(tmp_path, monkeypatch):
    from mixshard.writing.pixels import image

    path = noise(tmp_path / "plain.jpg", size=(300, 200), seed=5, quality=90)
    exif = Image.Exif()
    exif[0x0112] = 1  # upright: EXIF present, so PIL's parser reads it
    payload = exif.tobytes()
    if not payload.startswith(b"Exif"):
        payload = b"Exif\0\0" + payload
    plain = path.read_bytes()
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    tagged = plain[:2] + app1 + plain[2:]  # the same coded image, with EXIF
    (tmp_path / "exif.jpg").write_bytes(tagged)
    assert not image._has_exif(plain) and image._has_exif(tagged)
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    for crop in ("center", "random"):
        fast = load_image(path, 32, crop, variants=2 if crop == "random" else 1, key="k")
        assert not opened  # decoded without PIL's header parser
        slow = load_image(tmp_path / "exif.jpg", 32, crop, variants=len(fast), key="k")
        assert opened
        assert np.array_equal(fast, slow)
        opened.clear()


def test_a_jpeg_is_read_whole_or_in_two_reads_with_the_same_pixels(tmp_path, monkeypatch):
    from mixshard.writing.pixels import image

    path = noise(tmp_path / "a.jpg", size=(120, 90), seed=9, quality=90)
    whole = load_image(path, 32)
    monkeypatch.setattr(image, "_WHOLE", 10)  # larger files: the first bytes, then the rest
    assert image._read_jpeg(path) == path.read_bytes()
    assert np.array_equal(load_image(path, 32), whole)
    (tmp_path / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    assert image._read_jpeg(tmp_path / "b.png") is None  # left to PIL
    (tmp_path / "zeros.png").write_bytes(bytes(100))  # no image's first bytes: not read further
    with pytest.raises(ImageDecodeError) as err:
        image._read_jpeg(tmp_path / "zeros.png")
    assert err.value.reason == "not an image PIL can read (cannot identify image file)"


def test_a_folder_named_like_an_image_is_refused_as_open_refuses_it(tmp_path):
    (tmp_path / "dir.jpg").mkdir()
    with pytest.raises(ImageDecodeError) as err:
        load_image(tmp_path / "dir.jpg", 8)
    with pytest.raises(IsADirectoryError) as by_open:
        open(tmp_path / "dir.jpg", "rb")  # noqa: SIM115 - raises
    assert err.value.reason == f"corrupt or truncated: {by_open.value}"

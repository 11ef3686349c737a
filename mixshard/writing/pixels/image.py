"""One image file -> uint8 CHW pixels: decode, EXIF orientation, any mode -> RGB, crop, resize.

This is the only place pixels are made, so what `mixshard pack` stores is exactly what
`load_image` returns for the same file, options and key.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import threading
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ...core.constants import CROP_MODES, RESAMPLE, RESAMPLE_MODES
from ...core.crops import Box, crop_rng, random_resized_box
from ...core.errors import ImageDecodeError
from ..sources.magic import HEAD, NOT_AN_IMAGE, looks_like_image
from .resample import resize_into

try:
    import simplejpeg
except ImportError:  # a platform without its wheel: PIL decodes (slower, other bytes)
    simplejpeg = None

_ROTATED = (5, 6, 7, 8)  # EXIF orientations that swap width and height
_ORIENTATION_TAG = 0x0112


def crop_boxes(
    width: int, height: int, crop: str, variants: int, rng: np.random.Generator | None
) -> list[Box]:
    """The source windows that become the stored images of one `width x height` image."""
    if crop == "center":
        side = min(width, height)
        left, top = (width - side) / 2, (height - side) / 2
        return [(left, top, left + side, top + side)] * variants
    if crop == "full":
        return [(0, 0, width, height)] * variants
    if rng is None:
        raise ValueError("crop='random' needs a generator")
    return [random_resized_box(width, height, rng) for _ in range(variants)]


def _smallest(boxes: list[Box]) -> float:
    return min(min(b[2] - b[0], b[3] - b[1]) for b in boxes)


def _draft_scale(boxes: list[Box], size: int) -> int:
    """Largest JPEG DCT reduction (1, 2, 4, 8) that keeps every window at least 2x `size`
    (PIL's draft mode: libjpeg's reduced 1/2 and 1/4 IDCTs blur, a margin hides it)."""
    for scale in (8, 4, 2):
        if _smallest(boxes) / scale >= 2 * size:
            return scale
    return 1


# Scaled IDCTs n/8 of libjpeg-turbo that keep a full decode's detail (scripts/bench_fidelity.py
# --decode: median and p10 of the detail within 3%): its 1/2 and 1/4 (the old reduced IDCTs)
# lose 4-10% at the same output size, 3/8 and 5/8..7/8 (the accurate scaled ones) do not.
_EIGHTHS = (3, 5, 6, 7, 8)


def _dct_eighths(boxes: list[Box], size: int) -> int:
    """The smallest scale n/8 of `_EIGHTHS` that keeps every window at least `size` pixels:
    the crop's pixels at the output size, the rest of the downscale left to the resize."""
    return next((n for n in _EIGHTHS if _smallest(boxes) * n / 8 >= size), 8)


def _scaled_jpeg(img: Image.Image, boxes: list[Box], size: int, resample: str) -> np.ndarray | None:
    """A YCbCr JPEG that PIL has opened, decoded by `_scaled_pixels`."""
    fp = getattr(img, "fp", None)  # the open file of a PIL.ImageFile, before load()
    if simplejpeg is None or fp is None:
        return None
    fp.seek(0)
    return _scaled_pixels(fp.read(), img.size, boxes, size, resample)


def _scaled_pixels(
    data: bytes, dims: tuple[int, int], boxes: list[Box], size: int, resample: str
) -> np.ndarray | None:
    """A JPEG decoded at scale `_dct_eighths` by libjpeg-turbo (simplejpeg: 2x faster than
    PIL's decoder at full scale, 3x at 3/8), uint8 `(height, width, 3)`; None when PIL must
    decode it (data simplejpeg refuses, which PIL then reports in its own words). Without
    antialias at full scale: a scaled IDCT averages, which F.interpolate's taps do not."""
    n = _dct_eighths(boxes, size) if resample == RESAMPLE else 8
    w, h = dims
    height, width = -(-h * n // 8), -(-w * n // 8)
    try:
        return simplejpeg.decode_jpeg(
            data, "RGB", min_height=height, min_width=width, buffer=_buffer(height * width * 3)
        )
    except ValueError:
        return None


def _buffer(nbytes: int) -> np.ndarray:
    """This thread's buffer for decoded pixels, reused from image to image (memory that stays
    in the core's cache; the pixels are resized into a new array before the next decode)."""
    held = getattr(_local, "pixels", None)
    if held is None or held.size < nbytes:
        held = _local.pixels = np.empty(max(nbytes, 1 << 16), np.uint8)
    return held


_local = threading.local()


_SOI = b"\xff\xd8\xff"  # how every JPEG file starts


def _has_exif(data: bytes) -> bool:
    """Whether a JPEG may hold EXIF (which may rotate it): its `Exif\\0\\0` identifier is
    anywhere in the file. One memory search instead of a walk over the header segments in
    Python; the bytes turning up by chance in the coded data only send the file through PIL's
    parser, which gives the same pixels."""
    return _EXIF_ID in data


_EXIF_ID = b"Exif\0\0"


def _read_jpeg(path: str | os.PathLike) -> bytes | None:
    """The bytes of a file that starts like a JPEG; None for any other image file (left to
    PIL). Four system calls (open, fstat, read, close), where Python's file objects make eight.

    Raises:
        ImageDecodeError: the file is empty, or its first bytes are no image's (`magic`).
        OSError: it cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):  # os.open opens a folder; open() refused it
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if info.st_size == 0:
            raise ImageDecodeError("empty file (0 bytes)")
        # a small file whole (one read); of a large one the first bytes, then the rest
        data = os.read(fd, info.st_size if info.st_size <= _WHOLE else HEAD)
        if not looks_like_image(data[:HEAD]):
            raise ImageDecodeError(NOT_AN_IMAGE)  # the rest of a large one is never read
        if not data.startswith(_SOI):
            return None
        while len(data) < info.st_size and (more := os.read(fd, info.st_size - len(data))):
            data += more
        return data
    finally:
        os.close(fd)


_WHOLE = 16 << 20  # files up to this size are read whole at once


def _fast_jpeg(
    data: bytes, size: int, crop: str, variants: int, seed: int, key: str, resample: str
) -> np.ndarray | None:
    """A YCbCr JPEG without EXIF, decoded without PIL's header parser (a third of the time of
    a 256 px image); the same pixels PIL's path makes of it. None: PIL's path decodes it."""
    if simplejpeg is None or not data.startswith(_SOI) or _has_exif(data):
        return None
    try:
        height, width, colour, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    if colour != "YCbCr":
        return None
    check_pixels(width, height)
    rng = crop_rng(seed, key) if crop == "random" else None
    boxes = crop_boxes(width, height, crop, variants, rng)
    pixels = _scaled_pixels(data, (width, height), boxes, size, resample)
    return None if pixels is None else _crops(pixels, boxes, width, height, size, resample)


VANISHED = "vanished during the pack: it was listed when the pack began, and is gone now"


def check_pixels(width: int, height: int) -> None:
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise ImageDecodeError(
            f"decompression bomb: {width}x{height} = {width * height} pixels exceeds PIL's "
            f"limit of {limit} (PIL.Image.MAX_IMAGE_PIXELS)"
        )


def _crops(
    pixels: np.ndarray,
    boxes: list[Box],
    width: int,
    height: int,
    size: int,
    resample: str = RESAMPLE,
) -> np.ndarray:
    """The windows `boxes` (of the `width x height` image that the decoded `pixels`, uint8
    `(h, w, 3)`, show at any scale) resized to `size` by the filter `resample`:
    `(len(boxes), 3, size, size)`. libjpeg-turbo's pixels are resized by `resample.py`
    (PIL's filter, or F.interpolate's, as matrix products)."""
    fx, fy = pixels.shape[1] / width, pixels.shape[0] / height
    out = np.empty((len(boxes), 3, size, size), dtype=np.uint8)
    for k, (left, top, right, bottom) in enumerate(boxes):
        resize_into(out[k], pixels, (left * fx, top * fy, right * fx, bottom * fy), resample)
    return out


def frame_pixels(pixels: np.ndarray, size: int, crop: str, resample: str = RESAMPLE) -> np.ndarray:
    """An RGB frame already decoded (a video's, uint8 `(height, width, 3)`) cropped and
    resized exactly as a decoded JPEG is: `(1, 3, size, size)`. `crop` is `"center"` or
    `"full"` (a clip's frames share one window; a random one is refused before packing)."""
    height, width = pixels.shape[:2]
    boxes = crop_boxes(width, height, crop, 1, None)
    return _crops(np.ascontiguousarray(pixels), boxes, width, height, size, resample)


# BT.601's 0.299, 0.587, 0.114 in 16-bit fixed point: PIL's convert("L") and FFmpeg's RGB to grey
GREY_WEIGHTS = (19595, 38470, 7471)


def grey_pixels(pixels: np.ndarray) -> np.ndarray:
    """uint8 `(n, 3, h, w)` RGB -> the same shape, each pixel's grey (BT.601's weights,
    rounded) in all three channels."""
    r, g, b = (pixels[:, c].astype(np.uint32) * w for c, w in enumerate(GREY_WEIGHTS))
    grey = ((r + g + b + 0x8000) >> 16).astype(np.uint8)
    return np.ascontiguousarray(np.repeat(grey[:, None], 3, axis=1))


def _pil_crops(
    img: Image.Image, boxes: list[Box], width: int, height: int, size: int
) -> np.ndarray:
    """`_crops` of an image that PIL decoded (not a plain JPEG), resized by PIL: its 4-byte
    layout, and no float copy of a large PNG."""
    fx, fy = img.size[0] / width, img.size[1] / height
    out = np.empty((len(boxes), 3, size, size), dtype=np.uint8)
    for k, (left, top, right, bottom) in enumerate(boxes):
        box = (left * fx, top * fy, right * fx, bottom * fy)
        resized = img.resize((size, size), Image.Resampling.BILINEAR, box=box)
        # tobytes: the raw RGB bytes, a little cheaper than np.asarray's array interface
        pixels = np.frombuffer(resized.tobytes(), np.uint8).reshape(size, size, 3)
        out[k] = pixels.transpose(2, 0, 1)
    return out


def _to_rgb(img: Image.Image) -> Image.Image:
    """Any PIL mode -> RGB. Alpha is dropped (as torchvision's loader does); 16/32-bit and float
    grey levels are scaled down to 8 bits rather than clipped."""
    mode = img.mode
    if mode == "RGB":
        return img
    if mode.startswith("I;16"):
        grey = (np.asarray(img, dtype=np.uint16) >> 8).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if mode in ("I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        if mode == "I" and arr.size and arr.max() > 255:
            arr = arr / 257.0
        elif mode == "F" and arr.size and arr.max() <= 1.0:
            arr = arr * 255.0
        grey = np.clip(np.rint(arr), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if mode in ("P", "PA"):
        img = img.convert("RGBA")
    return img.convert("RGB")


def load_image(
    path: str | os.PathLike,
    size: int = 84,
    crop: str = "center",
    *,
    variants: int = 1,
    seed: int = 0,
    key: str | None = None,
    data: bytes | None = None,
    resample: str = RESAMPLE,
) -> np.ndarray:
    """Decode one image into `variants` uint8 crops of shape `(variants, 3, size, size)`.

    Args:
        path: the image file.
        size: side of the stored square images.
        crop: `"center"` (shorter side to `size`, centre crop), `"random"` (RandomResizedCrop with
            scale (0.08, 1), ratio (3/4, 4/3), taken from the full-resolution image) or `"full"`
            (the whole image squashed to a square).
        variants: how many crops to take (independent windows with `crop="random"`).
        seed: seed of the random windows.
        key: the name the random windows are seeded by; pack uses the path relative to SRC.
            Defaults to the file name.
        data: the file's bytes (an archive member); `path` then only names it.
        resample: the resize filter, `"bilinear"` (PIL's, antialiased) or
            `"bilinear-no-antialias"` (F.interpolate's and tf.image.resize's: the image
            decoded at full size, then two taps an axis at half-pixel centres).

    Returns:
        uint8 array `(variants, 3, size, size)`.

    Raises:
        ImageDecodeError: the file is empty, not an image, corrupt, truncated, unreadable or a
            decompression bomb; `reason` says which.
    """
    if crop not in CROP_MODES:
        raise ValueError(f"unknown crop mode {crop!r}; use one of {', '.join(CROP_MODES)}")
    if resample not in RESAMPLE_MODES:
        raise ValueError(
            f"unknown resample filter {resample!r}; use one of {', '.join(RESAMPLE_MODES)}"
        )
    try:
        if data is not None and not data:
            raise ImageDecodeError("empty file (0 bytes)")
        if data is not None and not looks_like_image(data[:HEAD]):
            raise ImageDecodeError(NOT_AN_IMAGE)  # as `_read_jpeg` says of such a file
        name = key or os.path.basename(path)
        data = _read_jpeg(path) if data is None else data
        if data is not None:
            pixels = _fast_jpeg(data, size, crop, variants, seed, name, resample)
            if pixels is not None:
                return pixels
        with warnings.catch_warnings():
            # PIL warns about odd EXIF and palettes; they are not errors and would garble the
            # progress bar. Decompression bombs are caught by the explicit size check below.
            warnings.simplefilter("ignore")
            with Image.open(path if data is None else io.BytesIO(data)) as img:
                return _decode(img, size, crop, variants, seed, name, resample)
    except ImageDecodeError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageDecodeError(f"decompression bomb: {exc}") from None
    except UnidentifiedImageError:
        raise ImageDecodeError(NOT_AN_IMAGE) from None
    except FileNotFoundError:  # listed by the scan, removed or renamed since
        raise ImageDecodeError(VANISHED) from None
    except PermissionError as exc:
        raise ImageDecodeError(f"unreadable: {exc.strerror}") from None
    except OSError as exc:
        raise ImageDecodeError(f"corrupt or truncated: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a bad file must never stop a pack
        raise ImageDecodeError(f"corrupt: {type(exc).__name__}: {exc}") from None


def _decode(
    img: Image.Image, size: int, crop: str, variants: int, seed: int, key: str, resample: str
) -> np.ndarray:
    raw_w, raw_h = img.size
    check_pixels(raw_w, raw_h)
    orientation = img.getexif().get(_ORIENTATION_TAG, 1)
    width, height = (raw_h, raw_w) if orientation in _ROTATED else (raw_w, raw_h)
    rng = crop_rng(seed, key) if crop == "random" else None
    boxes = crop_boxes(width, height, crop, variants, rng)

    if img.format == "JPEG" and img.mode == "RGB" and orientation == 1:
        scaled = _scaled_jpeg(img, boxes, size, resample)
        if scaled is not None:
            return _crops(scaled, boxes, width, height, size, resample)
    if img.format == "JPEG" and resample == RESAMPLE:  # (a draft averages too)
        scale = _draft_scale(boxes, size)
        if scale > 1:
            img.draft(None, (raw_w // scale, raw_h // scale))
    img.load()
    if orientation != 1:
        img = ImageOps.exif_transpose(img)
    if resample != RESAMPLE:  # PIL's own resize antialiases: `resample.py`'s filter
        pixels = np.asarray(_to_rgb(img), dtype=np.uint8)
        return _crops(np.ascontiguousarray(pixels), boxes, width, height, size, resample)
    return _pil_crops(_to_rgb(img), boxes, width, height, size)

"""One image file -> uint8 CHW pixels: decode, EXIF orientation, any mode -> RGB, crop, resize.

This is the only place pixels are made, so what `mixshard pack` stores is exactly what
`load_image` returns for the same file, options and key.
"""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..core.constants import CROP_MODES
from ..core.crops import Box, crop_rng, random_resized_box
from ..core.errors import ImageDecodeError

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


def _draft_scale(boxes: list[Box], size: int) -> int:
    """Largest JPEG DCT reduction (1, 2, 4, 8) that keeps every window at least `size` pixels:
    the decoder's DCT scaling then does the first part of the downscale (a 256 px image packed
    to 84 is decoded at 128 px, 3x faster than in full), and the bilinear resize the rest.
    scripts/bench_fidelity.py measures that the detail statistics stay those of a full decode."""
    smallest = min(min(b[2] - b[0], b[3] - b[1]) for b in boxes)
    for scale in (8, 4, 2):
        if smallest / scale >= size:
            return scale
    return 1


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

    Returns:
        uint8 array `(variants, 3, size, size)`.

    Raises:
        ImageDecodeError: the file is empty, not an image, corrupt, truncated, unreadable or a
            decompression bomb; `reason` says which.
    """
    if crop not in CROP_MODES:
        raise ValueError(f"unknown crop mode {crop!r}; use one of {', '.join(CROP_MODES)}")
    try:
        if (len(data) if data is not None else os.stat(path).st_size) == 0:
            raise ImageDecodeError("empty file (0 bytes)")
        with warnings.catch_warnings():
            # PIL warns about odd EXIF and palettes; they are not errors and would garble the
            # progress bar. Decompression bombs are caught by the explicit size check below.
            warnings.simplefilter("ignore")
            with Image.open(path if data is None else io.BytesIO(data)) as img:
                return _decode(img, size, crop, variants, seed, key or os.path.basename(path))
    except ImageDecodeError:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageDecodeError(f"decompression bomb: {exc}") from None
    except UnidentifiedImageError:
        raise ImageDecodeError("not an image PIL can read (cannot identify image file)") from None
    except PermissionError as exc:
        raise ImageDecodeError(f"unreadable: {exc.strerror}") from None
    except OSError as exc:
        raise ImageDecodeError(f"corrupt or truncated: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a bad file must never stop a pack
        raise ImageDecodeError(f"corrupt: {type(exc).__name__}: {exc}") from None


def _decode(
    img: Image.Image, size: int, crop: str, variants: int, seed: int, key: str
) -> np.ndarray:
    raw_w, raw_h = img.size
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and raw_w * raw_h > limit:
        raise ImageDecodeError(
            f"decompression bomb: {raw_w}x{raw_h} = {raw_w * raw_h} pixels exceeds PIL's limit "
            f"of {limit} (PIL.Image.MAX_IMAGE_PIXELS)"
        )
    orientation = img.getexif().get(_ORIENTATION_TAG, 1)
    width, height = (raw_h, raw_w) if orientation in _ROTATED else (raw_w, raw_h)
    rng = crop_rng(seed, key) if crop == "random" else None
    boxes = crop_boxes(width, height, crop, variants, rng)

    if img.format == "JPEG":
        scale = _draft_scale(boxes, size)
        if scale > 1:
            img.draft(None, (raw_w // scale, raw_h // scale))
    img.load()
    if orientation != 1:
        img = ImageOps.exif_transpose(img)
    img = _to_rgb(img)

    fx, fy = img.size[0] / width, img.size[1] / height
    out = np.empty((variants, 3, size, size), dtype=np.uint8)
    for k, (left, top, right, bottom) in enumerate(boxes):
        box = (left * fx, top * fy, right * fx, bottom * fy)
        resized = img.resize((size, size), Image.Resampling.BILINEAR, box=box)
        out[k] = np.asarray(resized).transpose(2, 0, 1)
    return out

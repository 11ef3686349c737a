"""The PNG sheet `mixshard preview` draws: the images `reading.preview` picks and reads, in a
grid (class names under them) or a strip per clip, optionally blended over an observation with
the same `(1 - alpha) * obs + alpha * image`, rounded half up, that `mixshard.blend` gives
uint8 observations. Torch-free.
"""

from __future__ import annotations

import math
import os

import numpy as np
from PIL import Image, ImageDraw, ImageOps, UnidentifiedImageError

from ..core.errors import MixshardError
from ..reading.preview import STRIP_FRAMES, preview_images

LABEL_HEIGHT = 14
GAP = 2


def preview_grid(
    folder: str | os.PathLike,
    n: int = 64,
    *,
    seed: int = 0,
    obs: str | os.PathLike | None = None,
    alpha: float = 0.5,
) -> tuple[Image.Image, int]:
    """A grid of `n` randomly chosen images of a pack (class names under them when labelled);
    of a clip pack, a strip of evenly spaced frames per clip, its name above.

    Args:
        folder: the pack folder (or its `index.json`), or an object store URL.
        n: how many images (at most the pack's count).
        seed: which images.
        obs: an observation image; each tile is then that image blended with a pack image.
        alpha: blend weight of the pack image.

    Returns:
        The grid as an RGB PIL image, and how many images it shows.

    Raises:
        ValueError: `alpha` outside [0, 1] or `n` < 1.
        MixshardError: the pack or the observation image cannot be read.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    shown = preview_images(folder, n, seed)
    size = shown.manifest.size
    images = shown.images.transpose(0, 2, 3, 1)  # NHWC
    if obs is not None:
        base = _load_obs(obs, size)
        images = np.floor((1 - alpha) * base + alpha * images + 0.5).astype(np.uint8)
    if shown.rows is not None:
        return _strips(images, shown.rows, size), len(images)
    classes = shown.manifest.classes
    names = None
    if classes:
        names = [classes[i] if 0 <= i < len(classes) else "" for i in shown.labels]
    return _grid(images, names, size), len(images)


def _load_obs(path: str | os.PathLike, size: int) -> np.ndarray:
    try:
        with Image.open(path) as img:
            img.load()
            fitted = ImageOps.fit(
                ImageOps.exif_transpose(img).convert("RGB"), (size, size), Image.Resampling.BILINEAR
            )
    except FileNotFoundError:
        reason = "no such file"
    except UnidentifiedImageError:
        reason = "not an image PIL can read"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    else:
        return np.asarray(fitted, dtype=np.float64)
    raise MixshardError(f"cannot read the observation image {path}: {reason}")


def _strips(images: np.ndarray, rows: list[tuple[str, int]], size: int) -> Image.Image:
    """A strip of frames per clip (`images` NHWC, row after row), the clip's name above it."""
    tile = size * math.ceil(96 / size)  # tiles at least 96 px wide
    row_h = LABEL_HEIGHT + tile
    width = STRIP_FRAMES * (tile + GAP) + GAP
    grid = Image.new("RGB", (width, len(rows) * (row_h + GAP) + GAP), "white")
    draw = ImageDraw.Draw(grid)
    at = 0
    for r, (name, cols) in enumerate(rows):
        y = GAP + r * (row_h + GAP)
        _label(draw, name, (GAP + 1, y + 1), width - 2)
        for c in range(cols):
            img = Image.fromarray(images[at + c]).resize((tile, tile), Image.Resampling.NEAREST)
            grid.paste(img, (GAP + c * (tile + GAP), y + LABEL_HEIGHT))
        at += cols
    return grid


def _label(draw: ImageDraw.ImageDraw, text: str, at: tuple[int, int], width: int) -> None:
    """`text` drawn at `at` in the default font, cut to `width` pixels."""
    while text and draw.textlength(text) > width:
        text = text[:-1]
    draw.text(at, text, fill="black")


def _grid(images: np.ndarray, names: list[str] | None, size: int) -> Image.Image:
    """The tiles of `images` (NHWC), `names` under them."""
    n = len(images)
    tile = size * math.ceil(96 / size)  # tiles at least 96 px wide
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    cell_h = tile + (LABEL_HEIGHT if names else 0)
    grid = Image.new("RGB", (cols * (tile + GAP) + GAP, rows * (cell_h + GAP) + GAP), "white")
    draw = ImageDraw.Draw(grid)
    for k, img in enumerate(images):
        r, c = divmod(k, cols)
        x, y = GAP + c * (tile + GAP), GAP + r * (cell_h + GAP)
        grid.paste(Image.fromarray(img).resize((tile, tile), Image.Resampling.NEAREST), (x, y))
        if names:
            _label(draw, names[k], (x + 1, y + tile + 1), tile)
    return grid

"""`mixshard preview`: a PNG grid of pack images, optionally blended over an observation.

Read-only and torch-free: images are read from the shards with `pread`, the blend is the same
`(1 - alpha) * obs + alpha * image`, rounded half up, that `mixshard.blend` gives uint8 obs.
"""

from __future__ import annotations

import math
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps, UnidentifiedImageError

from ..core.errors import MixshardError
from ..core.manifest import Manifest
from ..core.packpath import pack_dir
from .local import LocalPack

LABEL_HEIGHT = 14
GAP = 2


def _load_obs(path: str | os.PathLike, size: int) -> np.ndarray:
    try:
        with Image.open(path) as img:
            img.load()
            fitted = ImageOps.fit(
                ImageOps.exif_transpose(img).convert("RGB"), (size, size), Image.Resampling.BILINEAR
            )
    except FileNotFoundError:
        raise MixshardError(f"cannot read the observation image {path}: no such file") from None
    except (UnidentifiedImageError, OSError) as exc:
        reason = (
            "not an image PIL can read"
            if isinstance(exc, UnidentifiedImageError)
            else (exc.strerror or str(exc))
        )
        raise MixshardError(f"cannot read the observation image {path}: {reason}") from None
    return np.asarray(fitted, dtype=np.float64)


def preview_grid(
    folder: str | os.PathLike,
    n: int = 64,
    *,
    seed: int = 0,
    obs: str | os.PathLike | None = None,
    alpha: float = 0.5,
) -> tuple[Image.Image, int]:
    """A grid of `n` randomly chosen images of a pack (class names under them when labelled).

    Args:
        folder: the pack folder (or its `index.json`).
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
    folder = pack_dir(folder)
    pack = LocalPack(folder, Manifest.load(folder))
    size = pack.manifest.size
    n = min(n, pack.count)
    index = np.sort(np.random.default_rng(seed).choice(pack.count, n, replace=False))
    try:
        base = _load_obs(obs, size) if obs is not None else None
        images = pack.gather(index).transpose(0, 2, 3, 1)  # NHWC
        labels = pack.labels(index)
    finally:
        pack.close()
    if base is not None:
        images = np.floor((1 - alpha) * base + alpha * images + 0.5).astype(np.uint8)
    classes = pack.manifest.classes
    names = [classes[i] if 0 <= i < len(classes) else "" for i in labels] if classes else None

    scale = math.ceil(96 / size)  # tiles at least 96 px wide
    tile = size * scale
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    cell_h = tile + (LABEL_HEIGHT if names else 0)
    grid = Image.new("RGB", (cols * (tile + GAP) + GAP, rows * (cell_h + GAP) + GAP), "white")
    draw = ImageDraw.Draw(grid)
    font = ImageFont.load_default()
    for k, img in enumerate(images):
        r, c = divmod(k, cols)
        x, y = GAP + c * (tile + GAP), GAP + r * (cell_h + GAP)
        grid.paste(Image.fromarray(img).resize((tile, tile), Image.Resampling.NEAREST), (x, y))
        if names:
            label = names[k]
            while label and draw.textlength(label, font=font) > tile:
                label = label[:-1]
            draw.text((x + 1, y + tile + 1), label, fill="black", font=font)
    return grid, n

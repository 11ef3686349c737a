"""`mixshard preview`: a PNG grid of pack images, optionally blended over an observation.

Read-only and torch-free: images are read from the shards with `pread` (from an object store:
each block shown fetched and checked as the block cache fetches it, `fetch_block`, and kept
nowhere), the blend is the same `(1 - alpha) * obs + alpha * image`, rounded half up, that
`mixshard.blend` gives uint8 obs.
"""

from __future__ import annotations

import math
import os

import numpy as np
from PIL import Image, ImageDraw, ImageOps, UnidentifiedImageError

from ..core.errors import MixshardError
from ..core.layout import block_span
from ..core.manifest import Manifest
from ..core.packpath import pack_dir
from ..core.stores import Store, load_manifest
from .pack.reader import PackReader
from .source import store_of
from .store.blockcache import fetch_block

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
        reason = "no such file"
    except UnidentifiedImageError:
        reason = "not an image PIL can read"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    else:
        return np.asarray(fitted, dtype=np.float64)
    raise MixshardError(f"cannot read the observation image {path}: {reason}")


def preview_grid(
    folder: str | os.PathLike,
    n: int = 64,
    *,
    seed: int = 0,
    obs: str | os.PathLike | None = None,
    alpha: float = 0.5,
) -> tuple[Image.Image, int]:
    """A grid of `n` randomly chosen images of a pack (class names under them when labelled);
    of a clip pack, a strip of evenly spaced frames per clip (`clip_frames`), its name above.

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
    store = store_of(folder)
    manifest = load_manifest(store) if store else Manifest.load(pack_dir(folder))
    size = manifest.size
    if manifest.clips is not None:
        index, rows = clip_frames(manifest, n, seed)
        n = len(index)
    else:
        n = min(n, manifest.count)
        index = np.sort(np.random.default_rng(seed).choice(manifest.count, n, replace=False))
    base = _load_obs(obs, size) if obs is not None else None
    if store:
        nchw, labels = _store_rows(store, manifest, index)
    else:
        pack = PackReader(pack_dir(folder), manifest)
        try:
            nchw, labels = pack.gather(index), pack.labels(index)
        finally:
            pack.close()
    images = nchw.transpose(0, 2, 3, 1)  # NHWC
    if base is not None:
        images = np.floor((1 - alpha) * base + alpha * images + 0.5).astype(np.uint8)
    if manifest.clips is not None:
        return _strips(images, rows, size), n
    classes = manifest.classes
    names = [classes[i] if 0 <= i < len(classes) else "" for i in labels] if classes else None
    return _grid(images, names, size), n


STRIP_FRAMES = 8  # columns of a clip pack's preview


def clip_frames(manifest: Manifest, n: int, seed: int) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """The frames a clip pack's preview shows: a row per clip (all of them, or `n //
    STRIP_FRAMES` chosen by `seed`, at least one), each of up to `STRIP_FRAMES` frames evenly
    spaced from the clip's first to its last. Returns their image numbers, in rows, and each
    row's clip name and frame count."""
    clips = manifest.clips or ()
    rows = max(1, n // STRIP_FRAMES)
    picked = np.arange(len(clips))
    if rows < len(clips):
        picked = np.sort(np.random.default_rng(seed).choice(len(clips), rows, replace=False))
    index: list[int] = []
    shown: list[tuple[str, int]] = []
    for k in picked:
        clip = clips[int(k)]
        cols = min(STRIP_FRAMES, clip.count)
        steps = np.linspace(0, clip.count - 1, cols).round().astype(int)
        index += [clip.start + int(t) for t in steps]
        shown.append((clip.name, cols))
    return np.asarray(index, dtype=np.int64), shown


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


def _store_rows(
    store: Store, manifest: Manifest, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Images (NCHW) and labels of the pack images `index` (sorted), one checked fetch per
    block that holds any of them."""
    blocks = [(s.name, b) for s in manifest.shards for b in s.blocks]
    starts = np.cumsum([0] + [b.count for _, b in blocks])[:-1]
    which = np.searchsorted(starts, index, side="right") - 1
    size = manifest.size
    images = np.empty((len(index), manifest.channels, size, size), np.uint8)
    labels = np.empty(len(index), np.int32)
    for k in np.unique(which):
        name, b = blocks[k]
        start, end = block_span(b.offset, b.labels_offset, b.count, size)
        data = fetch_block(store, name, (start, end), b.sha256 or None, int(k))
        pixels = manifest.channels * size * size * b.count
        block = np.frombuffer(data, np.uint8, pixels, b.offset - start)
        rows = np.nonzero(which == k)[0]
        picked = index[rows] - starts[k]
        images[rows] = block.reshape(b.count, manifest.channels, size, size)[picked]
        labels[rows] = np.frombuffer(data, "<i4", b.count, b.labels_offset - start)[picked]
    return images, labels


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

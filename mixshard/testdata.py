"""Procedural images and folders: the demo's embedded default, and data for benchmarks.

Nothing is downloaded; every image is drawn from a seeded generator, so the same call makes
the same files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

# Class name -> pattern; each class looks different at a glance (what the demo needs).
PATTERNS = ("sunset", "checker", "stripes", "bubbles", "waves")


def pattern_image(rng: np.random.Generator, width: int, height: int, kind: str) -> Image.Image:
    """One RGB image of pattern `kind` with random colours and geometry."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    c1, c2 = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    if kind == "sunset":
        t = (yy / max(height - 1, 1))[..., None]
        sky = (1 - t) * np.array([40, 60, 160]) + t * np.array([250, 150, 60])
        arr = sky + rng.normal(0, 4, (height, width, 3))
        img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(img)
        r = int(min(width, height) * rng.uniform(0.1, 0.2))
        cx, cy = int(rng.uniform(0.2, 0.8) * width), int(rng.uniform(0.3, 0.6) * height)
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=(255, 230, 120))
        base = height * rng.uniform(0.6, 0.8)
        hills = base + height * 0.08 * np.sin(np.arange(width) / width * rng.uniform(4, 12))
        pts = [(x, float(h)) for x, h in enumerate(hills)] + [(width, height), (0, height)]
        draw.polygon(pts, fill=(30, int(rng.integers(80, 140)), 40))
        return img
    if kind == "checker":
        cell = max(2, int(min(width, height) / rng.uniform(4, 10)))
        mask = ((xx // cell + yy // cell) % 2).astype(bool)
        arr = np.where(mask[..., None], c1, c2).astype(np.float32)
    elif kind == "stripes":
        angle = rng.uniform(0, np.pi)
        period = min(width, height) / rng.uniform(3, 8)
        phase = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) / period * 2 * np.pi)
        t = ((phase + 1) / 2)[..., None]
        arr = t * c1 + (1 - t) * c2
    elif kind == "bubbles":
        img = Image.new("RGB", (width, height), tuple(int(v) for v in c2 // 3))
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(5, 20))):
            r = int(min(width, height) * rng.uniform(0.04, 0.2)) + 1
            cx, cy = int(rng.integers(0, width)), int(rng.integers(0, height))
            color = tuple(int(v) for v in rng.integers(60, 256, 3))
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=color, outline=(255, 255, 255))
        return img
    else:  # waves
        f1, f2 = rng.uniform(2, 6, 2)
        v = np.sin(xx / width * f1 * np.pi) * np.cos(yy / height * f2 * np.pi)
        t = ((v + 1) / 2)[..., None]
        arr = t * c1 + (1 - t) * c2 + rng.normal(0, 6, (height, width, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


# `_save_varied`'s formats, by `i % 8`: (suffix, PIL mode or None, save options); 6 and 7 are
# RGB JPEGs of a drawn quality
_VARIED: list[tuple[str, str | None, dict[str, Any]]] = [
    (".png", "RGBA", {}), (".png", "L", {}), (".gif", "P", {}), (".webp", None, {"quality": 85}),
    (".bmp", None, {}), (".JPG", "CMYK", {"quality": 90}),
]  # fmt: skip


def _save_varied(img: Image.Image, path_base: Path, i: int, rng: np.random.Generator) -> Path:
    """Save `img` in one of several formats and PIL modes, chosen by `i`."""
    if i % 8 < len(_VARIED):
        suffix, mode, options = _VARIED[i % 8]
    else:
        suffix, mode, options = ".jpg", None, {"quality": int(rng.integers(75, 96))}
    if mode == "P":
        img = img.convert(mode, palette=Image.Palette.ADAPTIVE)
    elif mode is not None:
        img = img.convert(mode)
    path = path_base.with_suffix(suffix)
    img.save(path, **options)
    return path


def make_image_folder(
    root: str | os.PathLike,
    *,
    classes: int = 4,
    per_class: int = 60,
    seed: int = 0,
    flat: bool = False,
    min_side: int = 48,
    max_side: int = 320,
) -> list[Path]:
    """Write a varied ImageFolder tree (or a flat folder) of procedural images.

    Sizes are random between `min_side` and `max_side`; formats and modes cycle through PNG
    (RGBA, L), GIF (P), WebP, BMP, CMYK JPEG and RGB JPEG. Class `c` uses pattern
    `PATTERNS[c % len(PATTERNS)]`, so classes are told apart at a glance.

    Returns:
        The written files, in creation order.
    """
    rng = np.random.default_rng(seed)
    root = Path(root)
    paths = []
    for c in range(classes):
        kind = PATTERNS[c % len(PATTERNS)]
        folder = root if flat else root / f"{c:02d}_{kind}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = (int(v) for v in rng.integers(min_side, max_side + 1, 2))
            img = pattern_image(rng, w, h, kind)
            paths.append(_save_varied(img, folder / f"{kind}_{i:04d}", i + c, rng))
    return paths


def make_jpeg_folder(
    root: str | os.PathLike,
    count: int,
    *,
    width: int = 256,
    height: int = 256,
    classes: int = 4,
    seed: int = 0,
    flat: bool = False,
    quality: int = 90,
) -> list[Path]:
    """Write `count` RGB JPEGs of one size (like Places365-standard's 256 px or COCO's 640x480)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    paths = []
    for i in range(count):
        c = i % classes
        kind = PATTERNS[c % len(PATTERNS)]
        folder = root if flat else root / f"{c:02d}_{kind}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{kind}_{i:06d}.jpg"
        pattern_image(rng, width, height, kind).save(path, quality=quality)
        paths.append(path)
    return paths

"""Random-resized-crop sampling shared by the packer (numpy) and the device ops (torch).

No torch and no PIL here: the rule and its constants are defined once, and each side imports
them without pulling in the other's dependencies.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

# torchvision RandomResizedCrop defaults.
RANDOM_CROP_SCALE = (0.08, 1.0)
RANDOM_CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)

Box = tuple[float, float, float, float]  # left, top, right, bottom in source pixels


def crop_rng(seed: int, key: str) -> np.random.Generator:
    """The generator of random crops for one image: a function of `(seed, key)` only.

    Seeding by key (the path relative to SRC) rather than by position keeps every image's crops
    the same whatever the worker count, the shuffle, or the files around it.
    """
    # surrogateescape: a file name that is not valid UTF-8 seeds by its raw bytes
    digest = hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


def random_resized_box(
    width: int,
    height: int,
    rng: np.random.Generator,
    scale: tuple[float, float] = RANDOM_CROP_SCALE,
    ratio: tuple[float, float] = RANDOM_CROP_RATIO,
) -> Box:
    """A RandomResizedCrop window (torchvision's sampling rule) in a `width x height` image.

    Ten tries at an area fraction in `scale` and a log-uniform aspect ratio in `ratio`; if none
    fits, the largest centred window whose ratio is clamped into `ratio`.
    """
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return (left, top, left + w, top + h)
    left, top, w, h = fallback_window(width, height, ratio)
    return (left, top, left + w, top + h)


def fallback_window(width: int, height: int, ratio: tuple[float, float]) -> tuple[int, ...]:
    """RandomResizedCrop's window when no try fits: the largest centred window whose aspect
    ratio is clamped into `ratio`, as `(left, top, w, h)`."""
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, min(height, round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        w, h = min(width, round(height * ratio[1])), height
    else:
        w, h = width, height
    return ((width - w) // 2, (height - h) // 2, w, h)

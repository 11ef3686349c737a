"""`mixshard.masks`: the keep masks for `composite`, importable as a module of their own
(`import mixshard.masks`, `from mixshard.masks import green_screen`).

The builders live in `mixshard.augment.masks.builders` (with `composite`'s mask checks); this module
re-exports their public names, and is imported only when named, so `import mixshard` still
loads no torch.
"""

from __future__ import annotations

from .augment.masks.builders import (
    blue_dominant,
    chroma_composite,
    chroma_key,
    color_key,
    from_depth,
    from_segmentation,
    green_screen,
    hsv_above,
    salient_patches,
)

__all__ = [
    "blue_dominant",
    "chroma_composite",
    "chroma_key",
    "color_key",
    "from_depth",
    "from_segmentation",
    "green_screen",
    "hsv_above",
    "salient_patches",
]

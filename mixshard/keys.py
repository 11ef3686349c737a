"""`mixshard.keys`: keep masks that `composite` and `Backgrounds.composite` make in their own
pass (`mask=mixshard.keys.green_screen()`), where `mixshard.masks` builds the same mask as a
tensor first. The keys live in `mixshard.augment.masks.keys`; this module re-exports them."""

from __future__ import annotations

from .augment.masks.keys import Key, color_key, from_depth, from_segmentation, green_screen

__all__ = ["Key", "color_key", "from_depth", "from_segmentation", "green_screen"]

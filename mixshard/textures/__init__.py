"""Clip frames written into MuJoCo textures: the target texture (`target`), a clip pack's
frames read ahead in the texture's layout (`clipreads`), and a player keyed as `Backgrounds`
(`player`). The benchmarks' own drop-ins are in `mixshard.distracting` and `mixshard.dmcgb2`."""

from __future__ import annotations

import warnings
from typing import Any

from .clipreads import ClipFrames
from .player import TexturePlayer
from .target import FrameWriter, TextureTarget, physics_upload

__all__ = ["ClipFrames", "FrameWriter", "TexturePlayer", "TextureTarget", "physics_upload"]


def __getattr__(name: str) -> Any:
    if name == "TextureFeeder":  # its name until 0.2.0: "feed" names the block feed alone
        warnings.warn(
            "mixshard.textures.TextureFeeder is now TexturePlayer; the old name goes in the "
            "next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return TexturePlayer
    raise AttributeError(f"module 'mixshard.textures' has no attribute {name!r}")

"""Clip frames written into MuJoCo textures: the target texture (`target`), a clip pack's
frames read ahead in the texture's layout (`clipreads`), and a feeder keyed as `Backgrounds`
(`feeder`). The benchmarks' own drop-ins are in `mixshard.distracting`."""

from __future__ import annotations

from .clipreads import ClipFrames
from .feeder import TextureFeeder
from .target import FrameWriter, TextureTarget, physics_upload

__all__ = ["ClipFrames", "FrameWriter", "TextureFeeder", "TextureTarget", "physics_upload"]

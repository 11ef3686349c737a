"""mixshard: pre-resized uint8 shards and a fused GPU blend for random-overlay augmentation.

Writing (`pack`, `verify`, `scan`, `load_image`) never imports torch; the reading and GPU names
are imported on first use so that `mixshard pack` starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import (
    ManifestError,
    MixshardError,
    OutputError,
    ShardError,
    SkippedImagesError,
    SourceError,
)
from .format import Manifest
from .image import load_image
from .pack import PackProgress, PackResult, pack
from .scan import ScanResult, scan
from .verify import VerifyReport, verify

__version__ = "0.1.0"

# name -> submodule; imported lazily because these need torch.
_LAZY: dict[str, str] = {
    "Loader": "loading",
    "Overlay": "overlay",
    "blend": "ops",
    "ShardStream": "stream",
    "loader": "stream",
    "prefetch": "prefetcher",
}

__all__ = [
    "Manifest",
    "ManifestError",
    "MixshardError",
    "OutputError",
    "PackProgress",
    "PackResult",
    "ScanResult",
    "ShardError",
    "SkippedImagesError",
    "SourceError",
    "VerifyReport",
    "load_image",
    "pack",
    "scan",
    "verify",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mixshard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

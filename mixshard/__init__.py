"""mixshard: pre-resized uint8 shards and a fused GPU blend for random-overlay augmentation.

The package is laid out by side of the data flow: `core` (manifest format, constants, errors,
file and environment helpers: imported by both sides), `writing` (scan -> decode -> shards;
never imports torch or the reading side), `reading` (pack folders and shard URLs -> batches),
`augment` (the fused blend, `Overlay` and its caches). The public API is re-exported here.
Writing names are imported eagerly; the reading and GPU names on first use, so that
`mixshard pack` starts without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from .core.errors import (
    ManifestError,
    MixshardError,
    OutputError,
    ShardError,
    SkippedImagesError,
    SourceError,
)
from .core.manifest import Manifest
from .reading.verifying import VerifyReport, verify
from .writing.image import load_image
from .writing.packing import PackProgress, PackResult, pack
from .writing.scanning import ScanResult, scan

__version__ = "0.2.0"

# name -> submodule; imported lazily because these need torch.
_LAZY: dict[str, str] = {
    "Loader": "reading.loading",
    "loader": "reading.loading",
    "ShardStream": "reading.stream",
    "prefetch": "reading.prefetcher",
    "Overlay": "augment.overlay",
    "blend": "augment.ops",
    "composite": "augment.ops",
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

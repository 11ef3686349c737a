"""mixshard: pre-resized uint8 shards and a fused GPU blend for random-overlay augmentation.

The package is laid out by side of the data flow: `core` (manifest format, constants, errors,
file and environment helpers: imported by both sides), `writing` (scan -> decode -> shards;
never imports torch or the reading side), `reading` (pack folders and packs on stores -> batches),
`augment` (the fused blend, `Overlay` and its caches). The public API is re-exported here,
every name loaded on first use (PEP 562), so that each side imports only what it uses:
`mixshard pack` starts without torch, and reading or blending loads no image decoder.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# name -> the submodule that defines it
_LAZY: dict[str, str] = {
    "Arg": "core.errors",
    "ForkedError": "core.errors",
    "ManifestError": "core.errors",
    "MixshardError": "core.errors",
    "OutputError": "core.errors",
    "PackInterrupted": "core.errors",
    "ShardError": "core.errors",
    "SkippedImagesError": "core.errors",
    "SourceError": "core.errors",
    "WriteError": "core.errors",
    "Manifest": "core.manifest",
    "VerifyReport": "reading.verifying",
    "verify": "reading.verifying",
    "load_image": "writing.pixels.image",
    "PackProgress": "writing.packing",
    "PackResult": "writing.packing",
    "pack": "writing.packing",
    "ScanResult": "writing.sources.scanning",
    "scan": "writing.sources.scanning",
    "Loader": "reading.loading",
    "loader": "reading.loading",
    "ShardStream": "reading.stream",
    "Source": "reading.source",
    "prefetch": "reading.prefetcher",
    "Overlay": "augment.overlay",
    "Backgrounds": "augment.backgrounds",
    "blend": "augment.kernels.ops",
    "composite": "augment.kernels.pasting",
}

# name -> a submodule exported whole, as a namespace of builders (`mixshard.masks.green_screen`;
# a real module, so that `import mixshard.masks` and `from mixshard.masks import ...` work too)
_MODULES: dict[str, str] = {
    "masks": "masks",
    "keys": "keys",
}

__all__ = [
    "Arg",
    "ForkedError",
    "Manifest",
    "ManifestError",
    "MixshardError",
    "OutputError",
    "PackInterrupted",
    "PackProgress",
    "PackResult",
    "ScanResult",
    "ShardError",
    "SkippedImagesError",
    "SourceError",
    "VerifyReport",
    "WriteError",
    "load_image",
    "pack",
    "scan",
    "verify",
    "Loader",
    "loader",
    "ShardStream",
    "Source",
    "prefetch",
    "Overlay",
    "Backgrounds",
    "blend",
    "composite",
    "masks",
    "keys",
]

if TYPE_CHECKING:  # what type checkers and IDEs see
    from . import keys as keys
    from . import masks as masks
    from .augment.backgrounds import Backgrounds
    from .augment.kernels.ops import blend
    from .augment.kernels.pasting import composite
    from .augment.overlay import Overlay
    from .core.errors import (
        Arg,
        ForkedError,
        ManifestError,
        MixshardError,
        OutputError,
        PackInterrupted,
        ShardError,
        SkippedImagesError,
        SourceError,
        WriteError,
    )
    from .core.manifest import Manifest
    from .reading.loading import Loader, loader
    from .reading.prefetcher import prefetch
    from .reading.source import Source
    from .reading.stream import ShardStream
    from .reading.verifying import VerifyReport, verify
    from .writing.packing import PackProgress, PackResult, pack
    from .writing.pixels.image import load_image
    from .writing.sources.scanning import ScanResult, scan


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in _MODULES:
        module = importlib.import_module(f".{_MODULES[name]}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'mixshard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

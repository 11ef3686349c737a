"""The writing side: source folder -> decoded, resized images -> shards and `index.json`.
Never imports torch or the reading side.

Its rooms, each importing only the rooms before it (and `core`): `sources` (what SRC holds),
`pixels` (a file's pixels), `plan` (what the pack will hold), `out` (where it is written), `run`
(how the plan runs). `packing` (`pack`) sits above them all."""

from __future__ import annotations

import importlib
from types import ModuleType


def __getattr__(name: str) -> ModuleType:
    # `from mixshard.writing import resample`: the check docs/troubleshooting.md gave before
    # the rooms (is the compiled resize built?) keeps working
    if name == "resample":
        return importlib.import_module(".pixels.resample", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

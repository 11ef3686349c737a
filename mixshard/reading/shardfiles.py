"""What identifies a shard file and how many are kept open: shared by the local readers."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ShardError
from ..core.manifest import SHARD_NAME


def _max_open_shards() -> int:
    """Descriptors kept open per pack: a quarter of this process's limit, so that a batch of
    the global order (one image from each of up to hundreds of shards) does not reopen files,
    while packs of thousands of shards still fit."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 64
    return 4096 if soft == resource.RLIM_INFINITY else max(16, min(4096, soft // 4))


MAX_OPEN_SHARDS = _max_open_shards()


def warn_bad(what: str, message: str) -> None:
    """The one warning `on_error="skip"` gives per bad shard or block (and never a sleep)."""
    warnings.warn(f"mixshard: skipping a bad {what}: {message}", RuntimeWarning, stacklevel=3)


@dataclass(frozen=True)
class FileId:
    """What identifies one version of a file: replaced or rewritten files differ in it."""

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileId:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def shard_path(folder: Path, name: str) -> Path:
    """`folder/name` for a plain shard file name; anything else (a path, `..`) is refused."""
    if not SHARD_NAME.fullmatch(name):
        raise ShardError(f"{folder}: shard name {name!r} is not a plain shard-NNNNNN.tar name")
    return folder / name

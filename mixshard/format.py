"""Shard format version 1: the manifest (`index.json`), block encoding and tar writing.

A shard is a plain USTAR tar whose members come in groups of three per block:
`KEY.images.npy` (uint8 NCHW), `KEY.labels.npy` (int32) and `KEY.keys.json` (source paths).
Headers carry fixed metadata (mtime 0, uid/gid 0, empty user and group names), so the same
pixels always give the same bytes. The manifest records where each block's pixels start in the
tar, so a local reader can `mmap` a shard and gather images without parsing it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .constants import (
    BLOCK_KEY_FORMAT,
    CHANNELS,
    DTYPE,
    FORMAT_NAME,
    FORMAT_VERSION,
    IMAGES_SUFFIX,
    KEYS_SUFFIX,
    LABELS_SUFFIX,
    LAYOUT,
    MANIFEST_NAME,
    TAR_BLOCK,
)
from .errors import ManifestError


@dataclass(frozen=True)
class BlockInfo:
    """One block of a shard: its key, image count, and where its arrays' data start in the tar."""

    key: str
    count: int
    offset: int
    labels_offset: int


@dataclass(frozen=True)
class ShardInfo:
    """One shard file as the manifest describes it."""

    name: str
    count: int
    bytes: int
    sha256: str
    blocks: tuple[BlockInfo, ...]


@dataclass(frozen=True)
class Manifest:
    """The contents of `index.json`: what a pack holds and where.

    `options` holds the pack options that decide the pixels (crop, variants, seed, resample,
    shuffle, labels, shard_size); `skipped` lists `{"path", "reason"}` for unreadable sources.
    """

    size: int
    block_size: int
    count: int
    classes: tuple[str, ...]
    options: dict[str, Any]
    skipped: tuple[dict[str, str], ...]
    shards: tuple[ShardInfo, ...]
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION
    channels: int = CHANNELS
    dtype: str = DTYPE
    layout: str = LAYOUT
    origin: str = field(default="", compare=False, repr=False)

    @property
    def image_bytes(self) -> int:
        """Bytes of one stored image."""
        return self.channels * self.size * self.size

    @property
    def total_bytes(self) -> int:
        """Bytes of all shard files together."""
        return sum(s.bytes for s in self.shards)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document, keys in the documented order."""
        return {
            "format": self.format,
            "version": self.version,
            "size": self.size,
            "channels": self.channels,
            "dtype": self.dtype,
            "layout": self.layout,
            "block_size": self.block_size,
            "count": self.count,
            "classes": list(self.classes),
            "options": dict(self.options),
            "skipped": [dict(s) for s in self.skipped],
            "shards": [
                {
                    **{k: v for k, v in asdict(s).items() if k != "blocks"},
                    "blocks": [asdict(b) for b in s.blocks],
                }
                for s in self.shards
            ],
        }

    def dumps(self) -> str:
        """Deterministic JSON text of the manifest."""
        return json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n"

    def save(self, folder: str | os.PathLike) -> Path:
        """Write `folder/index.json` atomically (temporary file, fsync, rename)."""
        path = Path(folder) / MANIFEST_NAME
        atomic_write(path, self.dumps().encode("utf-8"))
        return path

    @classmethod
    def loads(cls, text: str | bytes, origin: str) -> Manifest:
        """Parse and validate manifest text; `origin` names it in errors."""
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ManifestError(
                f"{origin} is not valid JSON ({exc}); the pack is damaged: repack it with "
                "`mixshard pack SRC OUT --overwrite`"
            ) from None
        return cls.from_dict(data, origin)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> Manifest:
        """Read `index.json` from a pack folder (or the path of the file itself)."""
        path = Path(folder)
        if path.name != MANIFEST_NAME or path.is_dir():
            path = path / MANIFEST_NAME
        if not path.exists():
            where = path.parent
            if not where.exists():
                raise ManifestError(
                    f"pack folder not found: {where}; make it with `mixshard pack SRC {where}`"
                )
            raise ManifestError(
                f"no {MANIFEST_NAME} in {where}: not a finished mixshard pack. An interrupted "
                f"pack finishes with `mixshard pack SRC {where} --resume`"
            )
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise ManifestError(f"cannot read {path}: {exc.strerror}") from None
        return cls.loads(text, str(path))

    @classmethod
    def from_dict(cls, data: Any, origin: str) -> Manifest:
        """Validate a parsed manifest."""
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ManifestError(
                f"{origin} is not a mixshard manifest (format: {found!r}, expected "
                f"{FORMAT_NAME!r}); make one with `mixshard pack SRC OUT`"
            )
        version = data.get("version")
        if version != FORMAT_VERSION:
            raise ManifestError(
                f"{origin} is shard format version {version!r}; this mixshard reads version "
                f"{FORMAT_VERSION}. Repack with `mixshard pack SRC OUT --overwrite` or install "
                f"the mixshard that wrote it"
            )
        try:
            shards = tuple(
                ShardInfo(
                    name=str(s["name"]),
                    count=int(s["count"]),
                    bytes=int(s["bytes"]),
                    sha256=str(s["sha256"]),
                    blocks=tuple(
                        BlockInfo(
                            str(b["key"]),
                            int(b["count"]),
                            int(b["offset"]),
                            int(b["labels_offset"]),
                        )
                        for b in s["blocks"]
                    ),
                )
                for s in data["shards"]
            )
            manifest = cls(
                size=int(data["size"]),
                block_size=int(data["block_size"]),
                count=int(data["count"]),
                classes=tuple(str(c) for c in data["classes"]),
                options=dict(data["options"]),
                skipped=tuple(dict(s) for s in data["skipped"]),
                shards=shards,
                channels=int(data["channels"]),
                dtype=str(data["dtype"]),
                layout=str(data["layout"]),
                origin=origin,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(
                f"{origin} is missing or has a bad field ({exc!r}); the pack is damaged: "
                "repack it with `mixshard pack SRC OUT --overwrite`"
            ) from None
        if (manifest.channels, manifest.dtype, manifest.layout) != (CHANNELS, DTYPE, LAYOUT):
            raise ManifestError(
                f"{origin}: unsupported image layout "
                f"{manifest.channels}/{manifest.dtype}/{manifest.layout}"
            )
        for shard in manifest.shards:
            if sum(b.count for b in shard.blocks) != shard.count:
                raise ManifestError(
                    f"{origin}: shard {shard.name} block counts do not add up "
                    f"to its count {shard.count}"
                )
        if sum(s.count for s in manifest.shards) != manifest.count:
            raise ManifestError(f"{origin}: shard counts do not add up to count {manifest.count}")
        return manifest


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one, never part."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename inside `folder` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def npy_header(array: np.ndarray) -> bytes:
    """The `.npy` (format 1.0) header that precedes `array`'s raw bytes."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(array))
    return buf.getvalue()


def _tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info.tobuf(format=tarfile.USTAR_FORMAT, encoding="utf-8", errors="strict")


class ShardWriter:
    """Writes blocks into one tar stream and hashes it on the way.

    Args:
        fileobj: a binary file opened for writing at position 0.
    """

    def __init__(self, fileobj: BinaryIO) -> None:
        self._f = fileobj
        self._sha = hashlib.sha256()
        self._pos = 0
        self.blocks: list[BlockInfo] = []
        self.count = 0

    def _write(self, data: bytes | memoryview) -> None:
        self._f.write(data)
        self._sha.update(data)
        self._pos += len(data)

    def _member(self, name: str, parts: list[bytes | memoryview]) -> int:
        """Add one member made of `parts`; returns the tar offset of its first data byte."""
        size = sum(len(p) for p in parts)
        self._write(_tar_header(name, size))
        start = self._pos
        for part in parts:
            self._write(part)
        pad = -size % TAR_BLOCK
        if pad:
            self._write(bytes(pad))
        return start

    def add_block(
        self, index: int, images: np.ndarray, labels: np.ndarray, keys: list[str]
    ) -> BlockInfo:
        """Append block `index` (global block number) and return its manifest entry."""
        images = np.ascontiguousarray(images, dtype=np.uint8)
        labels = np.ascontiguousarray(labels, dtype=np.int32)
        if images.ndim != 4 or images.shape[1] != CHANNELS or len(labels) != len(images):
            raise ValueError(f"bad block arrays: images {images.shape}, labels {labels.shape}")
        if len(keys) != len(images):
            raise ValueError(f"bad block: {len(images)} images but {len(keys)} keys")
        key = BLOCK_KEY_FORMAT.format(index)
        head = npy_header(images)
        offset = self._member(f"{key}.{IMAGES_SUFFIX}", [head, memoryview(images).cast("B")])
        lhead = npy_header(labels)
        loff = self._member(f"{key}.{LABELS_SUFFIX}", [lhead, labels.tobytes()])
        self._member(f"{key}.{KEYS_SUFFIX}", [json.dumps(keys, ensure_ascii=False).encode()])
        block = BlockInfo(key, len(images), offset + len(head), loff + len(lhead))
        self.blocks.append(block)
        self.count += len(images)
        return block

    def finish(self) -> tuple[int, str]:
        """Write the end-of-archive marker; returns `(bytes, sha256 hex)`."""
        self._write(bytes(2 * TAR_BLOCK))
        return self._pos, self._sha.hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(chunk):
            sha.update(data)
    return sha.hexdigest()

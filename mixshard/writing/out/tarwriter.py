"""Tar writing for shard format version 1: fixed USTAR headers and `.npy` members.

A shard is a plain USTAR tar whose members come in groups of three per block:
`KEY.images.npy` (uint8 NCHW), `KEY.labels.npy` (int32) and `KEY.keys.json` (source paths).
Headers carry fixed metadata (mtime 0, uid/gid 0, empty user and group names), so the same
pixels always give the same bytes.
"""

from __future__ import annotations

import hashlib
import tarfile
from typing import Any, BinaryIO

import numpy as np

from ...core.constants import (
    BLOCK_KEY_FORMAT,
    CHANNELS,
    IMAGES_SUFFIX,
    KEYS_SUFFIX,
    LABELS_SUFFIX,
    TAR_BLOCK,
)
from ...core.layout import npy_header
from ...core.manifest import BlockInfo, dump_json


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

    def _member(self, name: str, parts: list[bytes | memoryview], block: Any = None) -> int:
        """Add one member made of `parts`, hashed into `block` too when given; returns the tar
        offset of its first data byte."""
        size = sum(len(p) for p in parts)
        pad = -size % TAR_BLOCK
        pieces = [_tar_header(name, size), *parts] + ([bytes(pad)] if pad else [])
        start = self._pos + TAR_BLOCK
        for data in pieces:
            self._write(data)
            if block is not None:
                block.update(data)
        return start

    def _write(self, data: bytes | memoryview) -> None:
        self._f.write(data)
        self._sha.update(data)
        self._pos += len(data)

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
        span = hashlib.sha256()  # the block's span, for ranged reads (layout.block_span)
        head = npy_header(images.shape, images.dtype)
        offset = self._member(f"{key}.{IMAGES_SUFFIX}", [head, images.reshape(-1).data], span)
        lhead = npy_header(labels.shape, labels.dtype)
        loff = self._member(f"{key}.{LABELS_SUFFIX}", [lhead, labels.tobytes()], span)
        self._member(f"{key}.{KEYS_SUFFIX}", [dump_json(keys)])
        block = BlockInfo(key, len(images), offset + len(head), loff + len(lhead), span.hexdigest())
        self.blocks.append(block)
        self.count += len(images)
        return block

    def finish(self) -> tuple[int, str]:
        """Write the end-of-archive marker; returns `(bytes, sha256 hex)`."""
        self._write(bytes(2 * TAR_BLOCK))
        return self._pos, self._sha.hexdigest()

"""Where the bytes of a block sit inside a shard: one definition for the writer, the manifest
check and the readers.

A block is three tar members, each a 512-byte USTAR header followed by its data padded to
512 bytes: `KEY.images.npy` (a `.npy` 1.0 header, then the uint8 pixels), `KEY.labels.npy`
(header, then int32 labels) and `KEY.keys.json`. The manifest records the offset of the first
pixel byte (`offset`) and of the first label byte (`labels_offset`).
"""

from __future__ import annotations

import ast
import functools
import io

import numpy as np

from . import locks
from .constants import CHANNELS, TAR_BLOCK

NPY_MAGIC = b"\x93NUMPY\x01\x00"

# CPython before 3.12 keeps compile()'s recursion counter per interpreter, not per thread, so
# ast.literal_eval from two reader threads at once can fail with "AST constructor recursion
# depth mismatch" (gh-106905); the slow path below parses under this lock.
_PARSE_LOCK = locks.Lock()


def padded(n: int) -> int:
    """`n` rounded up to whole 512-byte tar blocks."""
    return -(-n // TAR_BLOCK) * TAR_BLOCK


def npy_header(shape: tuple[int, ...], dtype: np.dtype | type) -> bytes:
    """The `.npy` (format 1.0) header that precedes a C-ordered array's raw bytes."""
    buf = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False}
    np.lib.format.write_array_header_1_0(buf, {**header, "shape": tuple(shape)})
    return buf.getvalue()


def images_shape(count: int, size: int) -> tuple[int, int, int, int]:
    return (count, CHANNELS, size, size)


@functools.lru_cache(maxsize=1024)
def images_header_len(count: int, size: int) -> int:
    return len(npy_header(images_shape(count, size), np.uint8))


@functools.lru_cache(maxsize=1024)
def labels_header_len(count: int) -> int:
    return len(npy_header((count,), np.int32))


def labels_offset_for(offset: int, count: int, size: int) -> int:
    """Where the writer puts a block's labels, given where its pixels start."""
    member_start = offset - images_header_len(count, size)
    pixels = count * CHANNELS * size * size
    data = padded(images_header_len(count, size) + pixels)
    return member_start + data + TAR_BLOCK + labels_header_len(count)


def block_end_min(labels_offset: int, count: int) -> int:
    """The least byte offset past a block: its labels data, then the keys member (a header
    and at least one block of data)."""
    start = labels_offset - labels_header_len(count)
    return start + padded(labels_header_len(count) + 4 * count) + 2 * TAR_BLOCK


def block_span(offset: int, labels_offset: int, count: int, size: int) -> tuple[int, int]:
    """`(start, end)` in the tar of a block's images and labels members, headers and padding
    included: what a ranged read of one block fetches and what its `sha256` covers."""
    start = offset - images_header_len(count, size) - TAR_BLOCK
    labels_start = labels_offset - labels_header_len(count)
    return start, labels_start + padded(labels_header_len(count) + 4 * count)


@functools.lru_cache(maxsize=1024)
def _expected_header(shape: tuple[int, ...], dtype: str) -> bytes:
    return npy_header(shape, np.dtype(dtype))


def header_problem(raw: bytes, shape: tuple[int, ...], dtype: type) -> str | None:
    """What is wrong with the `.npy` header bytes `raw`, or None when it describes an array of
    `shape` and `dtype` (C order), as the writer made it."""
    if raw == _expected_header(tuple(shape), np.dtype(dtype).str):
        return None
    if raw[: len(NPY_MAGIC)] != NPY_MAGIC:
        return "no .npy header where index.json says"
    try:
        text = raw[10:].decode("latin1")
        with _PARSE_LOCK:
            found = ast.literal_eval(text.strip())
        ok = (
            isinstance(found, dict)
            and tuple(found.get("shape", ())) == tuple(shape)
            and np.dtype(found.get("descr")) == np.dtype(dtype)
            and found.get("fortran_order") is False
        )
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return "a damaged .npy header"
    if not ok:
        return f"a .npy header that is not {np.dtype(dtype)}{list(shape)}"
    return None

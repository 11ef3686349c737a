"""Zip members: their kind, where they end, and their bytes without `zipfile`'s per-member
file objects (`zipfile` itself is not imported here: a folder pack starts without it)."""

from __future__ import annotations

import os
import stat
import zlib
from typing import TYPE_CHECKING, Any

from ...core.errors import ImageDecodeError
from .magic import HEAD, NOT_AN_IMAGE, SNIFF_FIRST, looks_like_image

if TYPE_CHECKING:
    import zipfile

_STORED, _DEFLATED, _BZIP2 = 0, 8, 12  # zipfile.ZIP_STORED, ZIP_DEFLATED, ZIP_BZIP2


def zip_kind(info: zipfile.ZipInfo) -> str:
    """ "file", "dir", "link" or "other", as the zip's Unix mode says (a file when it does not)."""
    kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when the zip does not say (not Unix)
    if info.is_dir():
        return "dir"
    if kind == stat.S_IFLNK:
        return "link"
    return "other" if kind not in (0, stat.S_IFREG) else "file"


def member_end(info: zipfile.ZipInfo) -> int:
    """Where the member ends: its local header (30 bytes, name, extra taken at its central
    size) and its data."""
    return (
        info.header_offset
        + 30
        + len(info.orig_filename.encode())
        + len(info.extra)
        + (info.compress_size)
    )


def data_start(fd: int, info: zipfile.ZipInfo) -> int | None:
    """Where the data of a stored, deflated or bzip2 member starts in the zip open as `fd`,
    its local header checked against the directory's entry; None leaves the member to
    `zipfile` (encrypted, another method, a header that does not match)."""
    if info.flag_bits & 1 or info.compress_type not in (_STORED, _DEFLATED, _BZIP2):
        return None
    if info.compress_type == _STORED and info.compress_size != info.file_size:
        return None
    name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
    head = os.pread(fd, 30 + len(name), info.header_offset)
    if len(head) != 30 + len(name) or head[:4] != b"PK\x03\x04" or head[30:] != name:
        return None
    if int.from_bytes(head[26:28], "little") != len(name):
        return None
    return info.header_offset + 30 + len(name) + int.from_bytes(head[28:30], "little")


def stored(info: zipfile.ZipInfo) -> bool:
    """Whether the member's bytes lie in the zip as they are (not compressed)."""
    return info.compress_type == _STORED


def zip_data(fd: int, info: zipfile.ZipInfo) -> bytes | None:
    """A stored, deflated or bzip2 member of the zip open as `fd`, read with `pread`s (its local
    header, its data), its name and CRC checked as `zipfile` checks them: 2-3x faster than
    `ZipFile.read`. None leaves the member to `zipfile`, which then names what is wrong.

    A compressed member is inflated a chunk at a time and never past its declared size: a zip
    bomb (4 KB declared, 1 GB inflated from 1 MB) costs no more memory than its declaration.
    A member over 1 MB whose first bytes are no image's is not read (or inflated) further.

    Raises:
        ImageDecodeError: the member inflates past its declared size, or is large and no image
            (the file is skipped).
    """
    start = data_start(fd, info)
    if start is None:
        return None
    if info.compress_type == _STORED:
        if info.file_size > SNIFF_FIRST:
            _sniff(os.pread(fd, HEAD, start))
        data: bytes | None = os.pread(fd, info.compress_size, start)
    else:
        data = _inflate(fd, start, info)
    if data is None or len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        return None
    return data


_CHUNK = 1 << 20  # compressed bytes read at a time


def _sniff(head: bytes) -> None:
    if len(head) == HEAD and not looks_like_image(head):
        raise ImageDecodeError(NOT_AN_IMAGE)


def _inflate(fd: int, start: int, info: zipfile.ZipInfo) -> bytes | None:
    """The member's data inflated, at most its declared size (+1 byte, to see that it would go
    on); None when the stream is damaged or ends early (left to `zipfile`)."""
    import bz2  # a folder pack starts without it

    deflated = info.compress_type == _DEFLATED
    inflater: Any = zlib.decompressobj(-15) if deflated else bz2.BZ2Decompressor()
    limit = info.file_size + 1  # never 0: a max_length of 0 means "no limit"
    parts: list[bytes] = []
    got, read, pending = 0, 0, b""
    sniff = info.file_size > SNIFF_FIRST
    try:
        while not inflater.eof:
            more = read < info.compress_size
            if not pending and more and (deflated or inflater.needs_input):
                pending = os.pread(fd, min(_CHUNK, info.compress_size - read), start + read)
                if not pending:
                    return None  # the file ends early
                read += len(pending)
            # while sniffing, only the first bytes: a non-image is refused without inflating it
            part = inflater.decompress(pending, HEAD - got if sniff else limit - got)
            pending = inflater.unconsumed_tail if deflated else b""
            if not part and not pending and read >= info.compress_size:
                return None  # all of it read, nothing more comes out: the stream ends early
            parts.append(part)
            got += len(part)
            if sniff and got >= HEAD:
                sniff = False
                _sniff(b"".join(parts)[:HEAD])
            if got > info.file_size:
                raise ImageDecodeError(
                    f"corrupt archive member: it inflates past its declared size of "
                    f"{info.file_size} bytes (a zip bomb?); not read further"
                )
    except (zlib.error, OSError, EOFError, ValueError):
        return None
    return b"".join(parts)

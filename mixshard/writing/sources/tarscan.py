"""A tar's members listed from their 512-byte headers, without `tarfile`.

`tarfile` makes a `TarInfo` per member in Python, and more work with a PAX header per member
(what Python's own `tarfile` writes for sub-second times): a large part of a pack's time for
small images. Here a header is one `pread` and a few
slices. Only the plain cases are read this way: regular files, folders, links and devices in
the ustar and GNU formats, GNU long names and PAX `path` / `size` records. Anything else (a
bad checksum, base-256 numbers, sparse or volume members, global PAX headers, a header cut
short, names PAX says are not UTF-8) raises `Unusual`, and the caller lists the archive with
`tarfile`, which decides what it is: so the listing is always the one `tarfile` makes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

from ...core.constants import TAR_BLOCK as BLOCK
from ...core.layout import padded

_ZEROS = bytes(BLOCK)
_ENCODING = sys.getfilesystemencoding()  # as tarfile decodes header names
_KINDS = {
    b"0": "file", b"\0": "file", b"7": "file",
    b"5": "dir", b"1": "hardlink", b"2": "link", b"3": "other", b"4": "other", b"6": "other",
}  # fmt: skip
_GNU_TYPES = (b"L", b"K", b"S")  # a ustar prefix is not applied to these


class Unusual(Exception):
    """A header this reader leaves to `tarfile`."""


def _text(field: bytes) -> str:
    end = field.find(b"\0")
    return (field if end < 0 else field[:end]).decode(_ENCODING, "surrogateescape")


def _number(field: bytes) -> int:
    if field[:1] in (b"\x80", b"\xff"):
        raise Unusual("base-256 number")
    end = field.find(b"\0")
    digits = (field if end < 0 else field[:end]).strip()
    try:
        return int(digits or b"0", 8)
    except ValueError:
        raise Unusual("not an octal number") from None


def _checked(buf: bytes) -> None:
    stored = _number(buf[148:156])
    unsigned = sum(buf) - sum(buf[148:156]) + 256
    if stored != unsigned:
        signed = sum(b - 256 if b > 127 else b for b in buf) - sum(
            b - 256 if b > 127 else b for b in buf[148:156]
        )
        if stored != signed + 256:
            raise Unusual("bad checksum")


def _pax(data: bytes) -> dict[bytes, bytes]:
    """The records `LENGTH KEY=VALUE\\n` of a PAX extended header."""
    records: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(data) and data[pos : pos + 1] != b"\0":
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise Unusual("a damaged PAX record") from None
        record = data[space + 1 : pos + length]
        bad = length <= 0 or pos + length > len(data) or not record.endswith(b"\n")
        if bad or b"=" not in record:
            raise Unusual("a damaged PAX record")
        key, _, value = record[:-1].partition(b"=")
        if key == b"hdrcharset" or key.startswith(b"GNU.sparse"):
            raise Unusual(f"PAX {key.decode(errors='replace')}")
        records[key] = value
        pos += length
    return records


def tar_members(fd: int) -> Iterator[tuple[str, str, int, int, str]]:
    """`(name, kind, data offset, size, link)` of each member of the uncompressed tar open as
    `fd`, in order, one at a time (1.8M members kept in a list would take hundreds of MB);
    `kind` is "file", "dir", "hardlink", "link" (symbolic) or "other"; `link` is the member
    name a hard link names (else empty).

    Raises:
        Unusual: a header to leave to `tarfile` (which also reports a damaged archive); the
            members yielded before it are then to be forgotten.
    """
    total = os.fstat(fd).st_size
    offset = 0
    ahead: dict[str, str | int] | None = None  # an extended header's, for the next member
    while True:
        buf = os.pread(fd, BLOCK, offset)
        if not buf and offset and ahead is None:
            return
        if len(buf) < BLOCK:
            raise Unusual("a header cut short")
        if buf == _ZEROS:
            return  # the end-of-archive marker (tarfile stops at the first one)
        _checked(buf)
        kind, size, data = buf[156:157], _number(buf[124:136]), offset + BLOCK
        if kind in (b"L", b"x"):
            extra = os.pread(fd, size, data)
            if ahead is not None or len(extra) != size or data + padded(size) > total:
                raise Unusual("an extended header cut short, or two in a row")
            ahead = _extended(kind, extra)
            offset = data + padded(size)
            continue
        member = _member(buf, kind, size, data, ahead or {})
        ahead = None
        yield member
        offset = data + (padded(member[3]) if member[1] == "file" else 0)
        if offset > total:
            raise Unusual("a member ends past the end of the file")


def _extended(kind: bytes, extra: bytes) -> dict[str, str | int]:
    """What a GNU long name (`L`) or PAX header (`x`) says of the next member."""
    if kind == b"L":
        return {"name": _text(extra)}
    pax, ahead = _pax(extra), dict[str, "str | int"]()
    if b"path" in pax:
        try:
            ahead["name"] = pax[b"path"].decode("utf-8")
        except UnicodeDecodeError:
            raise Unusual("a PAX path that is not UTF-8") from None
    if b"linkpath" in pax:
        try:
            ahead["link"] = pax[b"linkpath"].decode("utf-8")
        except UnicodeDecodeError:
            raise Unusual("a PAX linkpath that is not UTF-8") from None
    if b"size" in pax:
        try:
            ahead["size"] = int(pax[b"size"])  # decimal, unlike the header's octal
        except ValueError:
            raise Unusual("a PAX size that is not a number") from None
    return ahead


def _member(
    buf: bytes, kind: bytes, size: int, data: int, ahead: dict[str, str | int]
) -> tuple[str, str, int, int, str]:
    """One member's header, with what the extended header before it said."""
    what = _KINDS.get(kind)
    if what is None:
        raise Unusual(f"member type {kind!r}")
    name, prefix = _text(buf[0:100]), _text(buf[345:500])
    if kind == b"\0" and name.endswith("/"):
        what = "dir"  # an old tar's folder
    if what == "dir":
        name = name.rstrip("/")
    if prefix and kind not in _GNU_TYPES:
        name = f"{prefix}/{name}"
    name = str(ahead.get("name", name))
    size = int(ahead.get("size", size))
    link = str(ahead.get("link", _text(buf[157:257]))) if what == "hardlink" else ""
    return name, what, data, size, link

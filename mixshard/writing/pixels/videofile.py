"""A video's bytes as PyAV reads them, the same way for a folder and for an archive: a file
object over the file, or over the member inside a .tar (a window of the archive) or a .zip (a
stored member's window; a compressed one inflated by `zipfile` as it is read), named as the
file is (FFmpeg takes a hint of the format from the name's extension). Nothing is read whole,
and a member is never judged by an image's first bytes.

A probe reads through a `Budget`: it stops after `GAP_BYTES` read or `STALL_SECONDS` spent
since its last packet (data after the frames, which FFmpeg's demuxer searches), and reports
what it has read once it has run `QUIET_SECONDS`. `options` hold FFmpeg's own pixel limit
(`max_pixels`), PIL's: no decoder, not even the probe's, makes a frame larger than an image may
be. docs/design.md, "Clip packs", says why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from PIL import Image

from ...core.errors import ImageDecodeError
from ..sources.archive import MemberReader, archive_handle, truncated_member
from ..sources.zipmembers import data_start, stored
from .image import VANISHED

GAP_BYTES = 256 << 20  # read without a packet: far more than a header or one frame holds
STALL_SECONDS = 60.0  # spent without a packet
QUIET_SECONDS = 1.0  # a probe running longer reports its progress
_REPORT_EVERY = 0.25


def options() -> dict[str, str]:
    """PyAV's `av.open` options: FFmpeg's decoders refuse a frame over PIL's pixel limit."""
    limit = Image.MAX_IMAGE_PIXELS
    return {} if limit is None else {"max_pixels": str(int(limit))}


class Budget:
    """What a probe of `name` may read and spend since its last packet; `stopped` says why it
    was stopped (the file then reads as ended). `progress(name, bytes read)` is called every
    quarter second once the probe has run `QUIET_SECONDS`."""

    def __init__(self, name: str, progress: Callable[[str, int], None] | None = None) -> None:
        self.name, self.progress = name, progress
        self.read = self._mark = 0  # bytes read, and read at the last packet
        self.frames = 0  # video packets found
        self.start = self._packet_at = self._reported = time.monotonic()
        self.stopped: str | None = None

    def spend(self, n: int) -> bool:
        """Whether `n` more bytes may be read."""
        self.read += n
        now = time.monotonic()
        if self.read - self._mark > GAP_BYTES:
            self.stopped = f"{GAP_BYTES >> 20} MB read"
        elif now - self._packet_at > STALL_SECONDS:
            self.stopped = f"{STALL_SECONDS:g} s spent"
        if self.stopped is not None:
            return False
        long = now - self.start > QUIET_SECONDS
        if self.progress and long and now - self._reported >= _REPORT_EVERY:
            self._reported = now
            self.progress(self.name, self.read)
        return True

    def packet(self, video: bool) -> None:
        """A packet was found (of the video stream, or another): the budget starts again."""
        self._mark, self._packet_at = self.read, time.monotonic()
        self.frames += video


class VideoFile:
    """A read-only, seekable file object over `size` bytes that `read_at(position, n)` reads:
    what PyAV's custom I/O calls (`read`, `seek`, `tell`). `name` is the file's."""

    def __init__(
        self,
        name: str,
        size: int,
        read_at: Callable[[int, int], bytes],
        close: Callable[[], Any] | None = None,
    ) -> None:
        self.name, self.size, self._read_at, self._close = name, size, read_at, close
        self.pos = 0
        self.budget: Budget | None = None
        self.interrupted = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n < 0 else min(n, self.size - self.pos)
        try:
            if n <= 0 or (self.budget is not None and not self.budget.spend(n)):
                return b""
            data = self._read_at(self.pos, n)
        except KeyboardInterrupt:
            # raised in PyAV's I/O callback, which drops it: the file ends here, and
            # `check` raises it again once PyAV is back
            self.interrupted = True
            return b""
        self.pos += len(data)
        return data

    def check(self) -> None:
        """Raises the KeyboardInterrupt that came while FFmpeg read."""
        if self.interrupted:
            raise KeyboardInterrupt

    def close(self) -> None:
        if self._close is not None:
            close, self._close = self._close, None
            close()


def open_video(reader: MemberReader, key: str, ref: Any) -> VideoFile:
    """The video `key` of a pack's source as `reader` reads it (`ref`: its place in an archive).

    Raises:
        ImageDecodeError: the file vanished since the scan, or cannot be opened (skipped).
        ArchiveTruncated: the archive ends inside the member.
    """
    if reader.kind == "folder":
        path = os.path.join(reader.path, key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ImageDecodeError(VANISHED) from None
        except OSError as exc:
            raise ImageDecodeError(f"unreadable: {exc.strerror}") from None
        return VideoFile(path, os.fstat(fd).st_size, lambda pos, n: os.pread(fd, n, pos),
                         lambda: os.close(fd))  # fmt: skip
    fd = archive_handle(reader.path, "raw")
    if reader.kind == "raw":
        start, size = ref
    else:
        info = archive_handle(reader.path, "zip").infolist()[ref]
        start, size = data_start(fd, info), info.file_size
        if start is None or not stored(info):  # inflated as it is read (`zipfile` seeks)
            return _inflated(reader, key, info)
    if os.fstat(fd).st_size < start + size:
        raise truncated_member(reader.path, key)
    return VideoFile(key, size, lambda pos, n: os.pread(fd, n, start + pos))


def _inflated(reader: MemberReader, key: str, info: Any) -> VideoFile:
    member = archive_handle(reader.path, "zip").open(info)

    def read_at(pos: int, n: int) -> bytes:
        if member.tell() != pos:
            member.seek(pos)
        return member.read(n)

    return VideoFile(key, info.file_size, read_at, member.close)

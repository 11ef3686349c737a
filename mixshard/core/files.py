"""File helpers both sides use: atomic writes, durable renames, hashing, opening only
regular files (a FIFO named like a shard would block a reader forever), and creating the
files a pack writes for itself never through a link someone planted under their names."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import BinaryIO

from .constants import LOCK_NAME
from .errors import OutputError
from .jobs import JobThread

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def user_cache_dir() -> Path:
    """`mixshard` in the user's cache folder (`$XDG_CACHE_HOME`, else `~/.cache`): where a
    store pack's block cache and a store pack's staging go by default."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mixshard"


def planted(
    path: str | os.PathLike, st: os.stat_result | None = None, what: str = "a file"
) -> OutputError:
    """The error of a name where mixshard writes a file of its own that holds something else:
    a symbolic link (writing through it would overwrite its target, wherever it points), a
    file with other hard links, a FIFO or a folder."""
    path = os.fspath(path)
    if st is None:
        try:
            st = os.lstat(path)
        except OSError:
            st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            found = f"a symbolic link (to {os.readlink(path)})"
        except OSError:
            found = "a symbolic link"
    elif st is not None and stat.S_ISREG(st.st_mode):
        found = f"a file with {st.st_nlink} hard links"
    elif st is not None and stat.S_ISDIR(st.st_mode):
        found = "a folder"
    else:
        found = "not a regular file"
    return OutputError(
        f"{path} is {found}, where mixshard makes {what} of its own; nothing was written "
        "through it. Remove it (and find out who made it), then run this again"
    )


def open_own(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """`os.open(path, flags)` (`O_CREAT` allowed) of a file mixshard writes for itself: never
    through a symbolic link, and only a regular file with no other hard link (a lock file, a
    journal), so that no other file is ever truncated or written. Opened non-blocking (a FIFO
    planted there must not hang the open), then blocking again.

    Raises:
        OutputError: `path` is a symbolic link, a FIFO, a folder or a file with other links.
        OSError: the open failed otherwise (permissions, ENOSPC).
    """
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise planted(path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise planted(path, st)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_file(path: str | os.PathLike, mode: int = 0o644) -> int:
    """Create `path` as a new, empty regular file and open it for writing (`O_EXCL |
    O_NOFOLLOW`): a temporary file mixshard writes, then renames. A regular file left there
    (by a killed run) is removed first: removing a name never changes another file, even one
    it is hard-linked to. A symbolic link, a FIFO or a folder is refused.

    Raises:
        OutputError: `path` is a symbolic link, a FIFO or a folder.
        OSError: the file could not be created (permissions, ENOSPC).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    for _ in range(3):
        try:
            return os.open(path, flags, mode)
        except FileExistsError:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                raise planted(path, st) from None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    raise OSError(errno.EEXIST, "made again each time it was removed", os.fspath(path))


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one, never part.
    The temporary file is created afresh (`create_file`), never through a planted link.

    Raises:
        OutputError: a symbolic link (or a FIFO, a folder) has the temporary file's name.
        OSError: the write failed (e.g. ENOSPC); the temporary file is removed first.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = create_file(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


class Flusher:
    """Makes what has been written to `fd` durable in the background while the file grows, so
    that the `fsync` closing it waits only for the last writes. `kick()` after each write: an
    `fdatasync` on the flusher's thread (at most one running and one queued; a later one
    covers every earlier write). The thread waits on the disk and costs no CPU time.

    An `fsync` costs in proportion to what was written since the last one, even when the pages
    were already written out (docs/benchmarks.md, "Packing": a shard's closing `fsync`).
    `close()` raises the first error a background flush met: after a failed `fdatasync` the
    kernel may not report it again to the `fsync` that follows, so it must not be lost here.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lane = JobThread("mixshard-flush")

    def kick(self) -> None:
        """Flush what has been written so far, in the background."""
        if self._lane.pending < 2:
            self._lane.submit(functools.partial(os.fdatasync, self._fd))

    def close(self) -> None:
        """Wait for every flush queued to end (however long the disk takes: one still running
        could otherwise meet an error nobody sees), then end the thread.

        Raises:
            OSError: a background flush failed.
        """
        try:
            self._lane.wait()
        finally:
            self._lane.close()


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


def open_regular(path: str | os.PathLike) -> int:
    """Open `path` read-only and return the descriptor, only if it is a regular file.

    Symlinks are followed (a pack may be spread over disks by links). The open itself cannot
    block: it is done non-blocking, and blocking mode is restored once the type is checked.

    Raises:
        OSError: missing, unreadable, or not a regular file (`EINVAL`, "not a regular file").
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise OSError(errno.EINVAL, kind, os.fspath(path))
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes.

    Raises:
        OSError: as `open_regular`, or `EFBIG` when the file is larger than `limit`.
    """
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return data


def sha256_of(f: BinaryIO, chunk: int = 1 << 20) -> str:
    """Hex sha256 of what is left to read of the open file `f`, read in chunks."""
    sha = hashlib.sha256()
    while data := f.read(chunk):
        sha.update(data)
    return sha.hexdigest()


def describe_holder(path: Path) -> str | None:
    """Who holds a pack's lock file, as the file says: `pid N on HOST since T (command)`."""
    try:
        holder = json.loads(read_regular(path, 1 << 16) or b"{}")
    except (OSError, ValueError):
        return None
    if not isinstance(holder, dict) or "pid" not in holder:
        return None
    return (
        f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started')}: "
        f"{holder.get('command')}"
    )


def writer_of(folder: Path) -> str | None:
    """The pack writing into `folder` right now (it holds the lock exclusively), or None."""
    path = folder / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return describe_holder(path) or "another process"
    finally:
        os.close(fd)
    return None

"""The lock of a pack's output folder: an exclusive `flock` on `OUT/.mixshard-lock` for a
whole pack, or shared on OUT and exclusive on its own lock file for a job-array part. The lock
files name their holder, and are opened never through a link planted under their names."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
import time
from pathlib import Path

from ...core.constants import LOCK_NAME
from ...core.errors import OutputError
from ...core.files import describe_holder, open_own


def part_suffix(part: tuple[int, int] | None) -> str:
    return "" if part is None else f".part-{part[0]}-of-{part[1]}"


class OutLock:
    """An exclusive lock on OUT for a whole pack, or for one job-array part (shared on OUT,
    exclusive on the part), held until `release`. The lock files name their holder."""

    def __init__(self, out: Path, part: tuple[int, int] | None = None) -> None:
        self.out = out
        self._held: list[tuple[int, Path]] = []
        try:
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OutputError(f"cannot write to output folder {out}: {exc.strerror}") from None
            self._take(out / LOCK_NAME, fcntl.LOCK_SH if part else fcntl.LOCK_EX)
            if part is not None:
                self._take(out / (LOCK_NAME + part_suffix(part)), fcntl.LOCK_EX)
        except BaseException:
            self.release()
            raise

    def _take(self, path: Path, mode: int) -> None:
        fd = self._lock_file(path, mode)
        if mode == fcntl.LOCK_EX:
            holder = {
                "pid": os.getpid(),
                "host": os.uname().nodename,  # gethostname, without importing socket
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": _command(),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode("utf-8", "backslashreplace"), 0)
        self._held.append((fd, path))

    def _lock_file(self, path: Path, mode: int) -> int:
        """A descriptor of `path`, locked with `mode`. A holder that releases removes the file,
        so a lock taken on a file just removed is no lock: then again, on the new file."""
        while True:
            try:
                fd = open_own(path, os.O_RDWR | os.O_CREAT)  # never a planted link's target
            except OSError as exc:
                raise OutputError(
                    f"cannot write to output folder {self.out}: {exc.strerror}"
                ) from None
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutputError(f"cannot lock {path}: {exc.strerror}") from None
                raise OutputError(
                    f"{self.out} is in use by another mixshard pack ({_holders(self.out)}); "
                    "wait for it to finish or stop it, then run this again"
                ) from None
            if _same_file(fd, path):
                return fd
            os.close(fd)

    @property
    def fds(self) -> tuple[int, ...]:
        """The lock's descriptors (child processes must close them)."""
        return tuple(fd for fd, _ in self._held)

    def release(self) -> None:
        """Unlock and remove the lock files this run wrote."""
        for fd, path in reversed(self._held):
            if path.name != LOCK_NAME or not _shared_by_others(fd):
                with contextlib.suppress(OSError):
                    path.unlink()
            os.close(fd)
        self._held = []


def _command() -> str:
    """This process's command line, as the user typed it (`python -m mixshard` shows as
    `mixshard`)."""
    first = os.path.basename(sys.argv[0]) if sys.argv else "python"
    if first in ("__main__.py", "mixshard"):
        first = "mixshard"
    return " ".join([first, *sys.argv[1:]])


def _same_file(fd: int, path: Path) -> bool:
    """True when `path` still names the file open as `fd`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino)


def _shared_by_others(fd: int) -> bool:
    """True when another process also holds the main lock (job-array parts share it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    return False


def _holders(out: Path) -> str:
    names = sorted(p.name for p in out.glob(LOCK_NAME + "*"))
    found = [describe_holder(out / name) for name in names]
    return "; ".join(h for h in found if h) or "holder unknown"

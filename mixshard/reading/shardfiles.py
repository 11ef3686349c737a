"""What identifies a shard file, how it is checked and named in errors, and how many are kept
open: shared by the local readers."""

from __future__ import annotations

import errno
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ManifestError, MixshardError, ShardError
from ..core.files import open_regular
from ..core.manifest import SHARD_NAME, ShardInfo


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


SPARSE_RATIO = 8  # a shard must store at least 1/SPARSE_RATIO of its bytes as data
MAX_EXTENTS = 1 << 16  # data extents counted per shard at most (then it is taken as stored)


def stored_bytes(fd: int, size: int, need: int) -> int:
    """Bytes of the file behind `fd` (of `size` bytes) that are stored as data, not holes,
    counted until `need` are found (`SEEK_DATA`/`SEEK_HOLE`; a file system without them
    reports one data extent). A pack's writer writes every byte, so only a file made sparse
    (`truncate`, `cp --sparse`, a file system that stores zero pages as holes) has holes.
    """
    data = at = extents = 0
    while at < size and data < need:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data past `at`
                return data
            return size  # not supported here: every byte counts as stored
        data += min(end, size) - start
        at = end
        extents += 1
        if extents >= MAX_EXTENTS:
            return max(data, need)
    return data


def too_many_files(path: Path) -> MixshardError:
    """The error for a shard that could not be opened for want of descriptors: nothing is
    wrong with the pack (not a `ShardError`: `on_error="skip"` must not leave it out)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        limit = "no limit" if soft == resource.RLIM_INFINITY else f"at most {soft}"
    except (ImportError, OSError, ValueError):
        limit = "a limit"
    return MixshardError(
        f"cannot open shard {path}: too many open files (this process may hold {limit}, "
        f"`ulimit -n`; the pack itself is fine); raise the limit (e.g. `ulimit -n 65536` "
        f"before starting) or use fewer workers"
    )


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

    def matches(self, st: os.stat_result) -> bool:
        """Whether `st` is this version of the file (no object made: the global order checks
        every shard a batch touched, ~20-180 a batch)."""
        return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_dev) == (
            self.ino,
            self.mtime_ns,
            self.size,
            self.dev,
        )


def file_id(path: str | os.PathLike) -> FileId | None:
    """The `FileId` of `path` (None when it cannot be stat'ed)."""
    try:
        return FileId.of(os.stat(path))
    except OSError:
        return None


def shard_path(folder: Path, name: str) -> Path:
    """`folder/name` for a plain shard file name; anything else (a path, `..`) is refused."""
    if not SHARD_NAME.fullmatch(name):
        raise ShardError(f"{folder}: shard name {name!r} is not a plain shard-NNNNNN.tar name")
    return folder / name


class ShardChecks:
    """A local pack's shard files checked against what they were when it was opened: each
    shard's `FileId` in `ids` (by name), its reads' errors naming the file and the fix."""

    folder: Path
    shards: list[ShardInfo]
    ids: dict[str, FileId]

    def _fix(self) -> str:
        return f"run `mixshard verify {self.folder}`, then repack or restore the file"

    def stat_shards(self, shards: tuple[ShardInfo, ...]) -> dict[str, FileId | ShardError]:
        """Each shard's `FileId`, or the `ShardError` that names what is wrong with it."""
        found: dict[str, FileId | ShardError] = {}
        for shard in shards:
            try:
                found[shard.name] = self._stat(shard)
            except ShardError as exc:
                found[shard.name] = exc
        return found

    def _stat(self, shard: ShardInfo) -> FileId:
        path = shard_path(self.folder, shard.name)
        try:
            fd = open_regular(path)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                raise too_many_files(path) from None
            why = "missing" if isinstance(exc, FileNotFoundError) else exc.strerror
            raise ShardError(f"shard {path} is {why}; {self._fix()}") from None
        try:
            found = FileId.of(os.fstat(fd))
            if found.size != shard.bytes:
                raise ShardError(
                    f"shard {path} is {found.size} bytes, index.json says {shard.bytes} "
                    f"(truncated or altered); {self._fix()}"
                )
            need = shard.bytes // SPARSE_RATIO
            stored = stored_bytes(fd, shard.bytes, need)
        finally:
            os.close(fd)
        if stored < need:
            # A reader's bookkeeping grows with the images claimed (a permutation, labels), so
            # a manifest claiming billions of tiny images in a file of holes would cost GBs of
            # memory before its first read finds nothing there.
            raise ManifestError(
                f"index.json claims {shard.count} images ({shard.bytes} bytes) in shard {path}, "
                f"but the file stores only {stored} bytes of data (a sparse file: holes where "
                f"images should be); restore the pack from a full copy or repack it"
            )
        return found

    def _open_checked(self, slot: int) -> int:
        path = self.folder / self.shards[slot].name
        try:
            fd = open_regular(path)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                raise too_many_files(path) from None
            raise ShardError(f"cannot open shard {path}: {exc.strerror}; {self._fix()}") from None
        if not self.ids[self.shards[slot].name].matches(os.fstat(fd)):
            os.close(fd)
            raise self._changed(path)
        return fd

    def _changed(self, path: Path) -> ShardError:
        # A new pack written over this one may reuse the inode numbers: say both causes.
        return ShardError(
            f"shard {path} changed after the pack was opened (a new pack written over it, or "
            f"the file copied over or truncated); open the pack again (and run `mixshard verify "
            f"{self.folder}` unless a new pack was written)"
        )

    def _check_same(self, slot: int, fd: int) -> None:
        """Raise when the shard behind `fd` was written to since it was opened."""
        shard = self.shards[slot]
        if not self.ids[shard.name].matches(os.fstat(fd)):
            raise self._changed(self.folder / shard.name)

    def _pread(self, slot: int, fd: int, buf: memoryview, offset: int) -> None:
        try:
            got = os.preadv(fd, [buf], offset)
        except OSError as exc:
            raise self._unreadable(slot, exc) from None
        if got != len(buf):
            self._short(slot, fd)

    def _unreadable(self, slot: int, exc: OSError) -> ShardError:
        path = self.folder / self.shards[slot].name
        return ShardError(f"cannot read shard {path}: {exc.strerror}")

    def _short(self, slot: int, fd: int) -> None:
        """A read ended early: the file changed, or was truncated."""
        self._check_same(slot, fd)
        raise ShardError(
            f"shard {self.folder / self.shards[slot].name} ends early (truncated); {self._fix()}"
        )

"""A pack's shard files: what `PackReader` reads them through (`PackFiles`: a folder's
`FolderFiles` here, a store's block cache in `storepack.StoreFiles`), what identifies one
(`FileId`), and the descriptors kept open (`OpenShards`)."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol

import numpy as np

from ...core import locks
from ...core.errors import ManifestError, MixshardError, ShardError
from ...core.files import open_regular
from ...core.manifest import SHARD_NAME, ShardInfo
from .warming import warm_files


def _open_files_limit() -> int | None:
    """This process's soft limit of open descriptors (-1: none; None: unknown)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return -1 if soft == resource.RLIM_INFINITY else soft


# Descriptors kept open per pack: a quarter of the limit, so that a batch of the global order
# (one image from each of up to hundreds of shards) does not reopen files, while packs of
# thousands of shards still fit.
_LIMIT = _open_files_limit()
MAX_OPEN_SHARDS = 64 if _LIMIT is None else 4096 if _LIMIT < 0 else max(16, min(4096, _LIMIT // 4))

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
        mine = (self.ino, self.mtime_ns, self.size, self.dev)
        return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_dev) == mine


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


@dataclass(frozen=True)
class FeedReads:
    """What a block feed will read (`blockfeed.BlockFeed`'s arguments): the batches `batches`
    of `rank` (`per_epoch` a rank), each of `batch_size` images of `sequence_of(epoch)[0]`,
    read in runs of `run` of the pack's `blocks` blocks (`block_of`: image -> block)."""

    sequence_of: Callable[[int], tuple[np.ndarray, ...]]
    per_epoch: int
    rank: int
    batch_size: int
    batches: range
    run: int
    block_of: Callable[[np.ndarray], np.ndarray]
    blocks: int


class PackFiles(Protocol):
    """What `PackReader` reads a pack's shard files through: where they are (`folder`), whether
    they may be mapped (`mappable`), whether a run of blocks is held whole (`whole_runs`), the
    bytes a cache must hold for the whole pack (`need`), and the calls below."""

    folder: Path
    mappable: bool
    whole_runs: bool
    need: int

    def fix(self) -> str:
        """What a user does about a damaged shard file, ending an error message."""
        ...

    def fits(self) -> bool:
        """Whether the whole pack can be held where it is read (a store's cache may not)."""
        ...

    def stat_shards(self, shards: tuple[ShardInfo, ...]) -> dict[str, FileId | ShardError]:
        """Each shard's `FileId`, or the `ShardError` that says why it cannot be read."""
        ...

    def open(self, name: str, fid: FileId) -> int:
        """A descriptor of shard `name`, which must still be the file `fid`."""
        ...

    def check_same(self, name: str, fd: int, fid: FileId) -> None:
        """Raise when the shard behind `fd` was written to since the pack was opened."""
        ...

    def unreadable(self, name: str, exc: OSError) -> ShardError:
        """The error for a read of shard `name` that failed with `exc`."""
        ...

    def short(self, name: str, fd: int, fid: FileId) -> NoReturn:
        """Raise the error for a read of shard `name` that ended early."""
        ...

    def held(self, blocks: list[int]) -> contextlib.AbstractContextManager[None]:
        """Blocks `blocks` stay readable while the context lasts."""
        ...

    def expect(self, feed: FeedReads) -> None:
        """What a block feed will read (a store's cache fetches and evicts by it)."""
        ...

    def warm(self, files: list[tuple[Path, int]], stop: threading.Event) -> bool:
        """Bring the shard files in ahead of reads; True once all are in."""
        ...


def stat_each(
    shards: tuple[ShardInfo, ...], stat: Callable[[ShardInfo], FileId]
) -> dict[str, FileId | ShardError]:
    """`stat(shard)` of each shard, or the `ShardError` it raised (a bad shard is named, and
    left out or raised by the reader as `on_error` says)."""
    found: dict[str, FileId | ShardError] = {}
    for shard in shards:
        try:
            found[shard.name] = stat(shard)
        except ShardError as exc:
            found[shard.name] = exc
    return found


class FolderFiles:
    """A pack folder's shard files (`PackFiles`): each opened only as a regular file of the
    folder and checked against its `FileId` from when the pack was opened; its reads' errors
    name the file and the fix."""

    mappable = True  # its files may be mapped (`mapped.py`)
    whole_runs = True  # a run of blocks is held (and read) whole
    need = 0  # bytes a cache must hold for the whole pack (a folder has no cache)

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)

    def fix(self) -> str:
        return f"run `mixshard verify {self.folder}`, then repack or restore the file"

    def fits(self) -> bool:
        return True

    def stat_shards(self, shards: tuple[ShardInfo, ...]) -> dict[str, FileId | ShardError]:
        return stat_each(shards, self.stat)

    def _open_path(self, path: Path, at_open: bool) -> int:
        """A descriptor of the regular file `path`; the error names what is wrong (`at_open`:
        found opening the pack, a missing shard named as such)."""
        try:
            return open_regular(path)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # the pack is fine: not a `ShardError`,
                soft = _open_files_limit()  # which `on_error="skip"` would leave out
                limit = "a limit" if soft is None else "no limit" if soft < 0 else f"at most {soft}"
                raise MixshardError(
                    f"cannot open shard {path}: too many open files (this process may hold "
                    f"{limit}, `ulimit -n`; the pack itself is fine); raise the limit (e.g. "
                    f"`ulimit -n 65536` before starting) or use fewer workers"
                ) from None
            if at_open:
                why = "missing" if isinstance(exc, FileNotFoundError) else exc.strerror
                raise ShardError(f"shard {path} is {why}; {self.fix()}") from None
            raise ShardError(f"cannot open shard {path}: {exc.strerror}; {self.fix()}") from None

    def stat(self, shard: ShardInfo) -> FileId:
        path = shard_path(self.folder, shard.name)
        fd = self._open_path(path, at_open=True)
        try:
            found = FileId.of(os.fstat(fd))
            if found.size != shard.bytes:
                raise ShardError(
                    f"shard {path} is {found.size} bytes, index.json says {shard.bytes} "
                    f"(truncated or altered); {self.fix()}"
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

    def open(self, name: str, fid: FileId) -> int:
        fd = self._open_path(self.folder / name, at_open=False)
        try:
            self.check_same(name, fd, fid)
        except ShardError:
            os.close(fd)
            raise
        return fd

    def check_same(self, name: str, fd: int, fid: FileId) -> None:
        if not fid.matches(os.fstat(fd)):
            # A new pack written over this one may reuse the inode numbers: say both causes.
            raise ShardError(
                f"shard {self.folder / name} changed after the pack was opened (a new pack "
                f"written over it, or the file copied over or truncated); open the pack again "
                f"(and run `mixshard verify {self.folder}` unless a new pack was written)"
            )

    def unreadable(self, name: str, exc: OSError) -> ShardError:
        return ShardError(f"cannot read shard {self.folder / name}: {exc.strerror}")

    def short(self, name: str, fd: int, fid: FileId) -> NoReturn:
        self.check_same(name, fd, fid)
        raise ShardError(f"shard {self.folder / name} ends early (truncated); {self.fix()}")

    @contextlib.contextmanager
    def held(self, blocks: list[int]) -> Iterator[None]:
        yield  # a folder's blocks are always readable

    def expect(self, feed: FeedReads) -> None:
        """What a block feed will read (a store's cache fetches and evicts by it)."""

    def warm(self, files: list[tuple[Path, int]], stop: threading.Event) -> bool:
        return hasattr(os, "posix_fadvise") and warm_files(files, stop)


class OpenShards:
    """Cached shard descriptors, thread-safe. `held` takes the descriptors of a batch's
    shards with one lock for those already open: a batch of the global order holds one
    image from each of up to hundreds of shards."""

    def __init__(self) -> None:
        self._fds: OrderedDict[int, list[int]] = OrderedDict()  # slot -> [fd, users]
        self._lock = locks.Lock()

    def __len__(self) -> int:
        return len(self._fds)

    @contextlib.contextmanager
    def held(self, slots: list[int], opener: Callable[[int], int]) -> Iterator[list[int]]:
        """The descriptors of shards `slots` (distinct), opened by `opener(slot)` when not
        open yet, held open until the block ends (the cache closes only idle ones)."""
        entries: list[list[int] | None] = []
        with self._lock:
            for slot in slots:
                entry = self._fds.get(slot)
                if entry is not None:
                    self._fds.move_to_end(slot)
                    entry[1] += 1
                entries.append(entry)
        try:
            for k, slot in enumerate(slots):
                if entries[k] is None:
                    fd = opener(slot)
                    with self._lock:
                        entry = entries[k] = self._fds.setdefault(slot, [fd, 0])
                        if entry[0] != fd:  # another thread opened it meanwhile: use that one
                            os.close(fd)
                        entry[1] += 1
            yield [e[0] for e in entries]  # type: ignore[index]
        finally:
            with self._lock:
                for entry in entries:
                    if entry is not None:
                        entry[1] -= 1
                excess = len(self._fds) - MAX_OPEN_SHARDS
                if excess > 0:
                    self._close_idle(excess)

    def _close_idle(self, most: int) -> None:
        """Close at most `most` descriptors nobody holds, least recently used first (locked)."""
        idle = [s for s, (_, users) in self._fds.items() if users == 0]
        for s in idle[:most]:
            os.close(self._fds.pop(s)[0])

    def close(self) -> None:
        """Close the descriptors nobody holds (they are opened again on the next read)."""
        with self._lock:
            self._close_idle(len(self._fds))

"""`overwrite`: a new pack is written beside the old one, in a staging folder, and swapped in
by two renames only once it is complete; so a failed, strict or interrupted run leaves the old
pack whole. Rerunning the same command continues the staged pack (its journal).

An OUT that is a symbolic link is resolved first: the pack in the folder it points to is
replaced (staged beside that folder) and the link is kept, still pointing at the new pack. A
staging or old-pack name beside it that is a symbolic link is refused: a run would otherwise
write into, or delete, whatever it points to."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ...core.errors import OVERWRITE, RESUME, MixshardError, OutputError
from ...core.files import planted
from .outdir import check_replaceable, load_done
from .outlock import OutLock

R = TypeVar("R")


def staging_path(out: Path) -> Path:
    """Where the replacement of the pack `out` is written: a hidden sibling folder (the same
    file system, so the swap is a rename)."""
    return out.parent / f".{out.name}.mixshard-new"


def _old_path(out: Path) -> Path:
    return out.parent / f".{out.name}.mixshard-old"


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _refuse_links(*paths: Path) -> None:
    """Raises `OutputError` naming the first of `paths` that is a symbolic link."""
    for path in paths:
        if path.is_symlink():
            raise planted(path, what="a folder")


def _keep_or_clear(staging: Path, fingerprint: str) -> None:
    """A staging folder left by an earlier run is continued when it holds the same plan,
    and removed otherwise (it is ours: nothing else writes there)."""
    if not staging.exists():
        return
    try:
        if staging.is_dir() and not (staging / "index.json").exists():
            load_done(staging, fingerprint)
            return
    except MixshardError:
        pass
    if staging.is_dir() and not staging.is_symlink():
        shutil.rmtree(staging)
    else:
        staging.unlink()


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux `renameat2(RENAME_EXCHANGE)`); False where the system
    or file system cannot, and the caller renames twice (`out` is missing in between)."""
    if sys.platform != "linux":
        return False
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a libc before glibc 2.28
        return False
    at_fdcwd, rename_exchange = -100, 2
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return done == 0


def swap_in(staging: Path, out: Path) -> None:
    """Put the complete pack `staging` in the place of `out`, then delete the old one.

    Raises:
        OutputError: a rename failed; `out` then still holds the old pack.
    """
    old = _old_path(out)
    if old.is_symlink() or old.is_file():
        old.unlink()  # the name only, never what a link points to
    elif old.exists():
        shutil.rmtree(old)
    if _exchange(staging, out):  # one step: a reader opening `out` finds one pack or the other
        _fsync_dir(out.parent)
        shutil.rmtree(staging, ignore_errors=True)  # (the old pack, now)
        return
    try:
        os.rename(out, old)
    except OSError as exc:
        raise OutputError(f"cannot move the old pack {out} aside: {exc.strerror}") from None
    try:
        os.rename(staging, out)
    except OSError as exc:
        os.rename(old, out)
        raise OutputError(
            f"cannot move the new pack {staging} to {out}: {exc.strerror}; {out} still holds "
            "the old pack"
        ) from None
    _fsync_dir(out.parent)
    shutil.rmtree(old, ignore_errors=True)


def replace_pack(out: Path, fingerprint: str, write: Callable[[Path, tuple[int, ...]], R]) -> R:
    """Replace the pack (or interrupted pack) in `out` with the one `write(staging, fds)`
    makes, holding `out`'s lock throughout (`fds`: its descriptors, which workers close).

    `out` may be a symbolic link: the pack in the folder it points to is replaced (staged
    beside that folder), and the link is left as it is.

    Raises:
        OutputError: `out` holds files mixshard did not write (nothing is deleted), or the
            staging or old-pack name beside it is a symbolic link.
        MixshardError: whatever `write` raised, with a note that `out` is unchanged.
    """
    given, out = out, Path(os.path.realpath(out))  # the folder that holds the pack
    lock = OutLock(out)
    try:
        check_replaceable(out)
        staging = staging_path(out)
        _refuse_links(staging, _old_path(out))
        _keep_or_clear(staging, fingerprint)
        try:
            result = write(staging, lock.fds)
        except MixshardError as exc:
            kept = (
                f"; the new pack's finished shards are kept in {staging}, where a rerun goes on"
                if staging.exists()
                else ""
            )
            # this run goes on as it was started, with overwrite: a resume of `out` would not
            again = tuple(OVERWRITE if part == RESUME else part for part in exc.args)
            exc.args = (*again, f". {given} still holds the earlier pack, unchanged{kept}")
            exc.resumable = False  # a resume of `out` would not continue this run
            raise
        swap_in(staging, out)
    finally:
        lock.release()
    return result

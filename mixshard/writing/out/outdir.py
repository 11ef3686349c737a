"""The output folder of `pack`: what may be written or replaced, its free space, and the
journals that let an interrupted pack resume (its lock: `outlock.py`). A shard is in a journal
only once its file is complete under its final name; journal lines may come in any order (Ray
tasks and job-array parts finish out of order).
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import shutil
import threading
from pathlib import Path
from typing import TextIO

from ...core.constants import (
    CHANNELS,
    JOURNAL_GLOB,
    JOURNAL_NAME,
    LOCK_NAME,
    MANIFEST_NAME,
    SHARD_PREFIX,
    SHARD_SUFFIX,
    TMP_SUFFIX,
)
from ...core.errors import OVERWRITE, RESUME, OutputError, WriteError
from ...core.files import atomic_write, create_file, open_own, planted
from ...core.packpath import tilde_hint
from ..plan.packplan import PackPlan
from .outlock import part_suffix
from .shardwrite import DoneShard


def write_error(exc: OSError, where: Path) -> WriteError:
    """The error of a failed write into OUT (ENOSPC, EROFS, EIO), naming the file."""
    hint = "free some space, then" if exc.errno == errno.ENOSPC else "fix that, then"
    return WriteError(
        f"cannot write {where}: {exc.strerror}; {hint} pack again with ", RESUME,
        " to continue (finished shards are kept)",
    )  # fmt: skip


def not_empty(where: str) -> OutputError:
    """The error of an OUT (`where`: a folder or a store URL) that holds a pack already."""
    return OutputError(
        f"{where} is not empty; pass ", RESUME, " to finish an interrupted pack there or ",
        OVERWRITE, " to replace it",
    )  # fmt: skip


def is_ours(name: str) -> bool:
    return (
        name in (MANIFEST_NAME, MANIFEST_NAME + ".tmp")
        or name.startswith((LOCK_NAME, ".mixshard-pack"))
        or name.endswith(TMP_SUFFIX)
        or (name.startswith(SHARD_PREFIX) and name.endswith(SHARD_SUFFIX))
    )


def _listing(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def foreign_files(out: Path) -> list[str]:
    """The names in `out` that mixshard did not write."""
    return sorted(n for n in os.listdir(out) if not is_ours(n))


def holds_files(out: Path) -> bool:
    """True when the folder `out` exists and holds anything but lock files."""
    return out.is_dir() and any(not n.startswith(LOCK_NAME) for n in os.listdir(out))


def check_replaceable(out: Path) -> None:
    """Raises `OutputError` when `out` holds files mixshard did not write (`overwrite` never
    deletes those)."""
    foreign = foreign_files(out)
    if foreign:
        raise OutputError(
            OVERWRITE, f": {out} holds files mixshard did not write ({_listing(foreign)}); "
            "nothing was deleted. Choose an empty or new output folder",
        )  # fmt: skip


def prepare_out(out: Path, resume: bool) -> None:
    """Check the locked output folder: empty, or (with `resume`) holding an interrupted or
    finished mixshard pack.

    Raises:
        OutputError: OUT is not empty without `resume`, holds no mixshard journal or pack
            (whatever `resume` says: a folder of other files is never written into), or is
            not writable.
    """
    names = sorted(n for n in os.listdir(out) if not n.startswith(LOCK_NAME))
    ours = all(is_ours(n) for n in names) or any(
        n == MANIFEST_NAME or fnmatch.fnmatch(n, JOURNAL_GLOB) for n in names
    )
    if names and not ours:
        raise OutputError(
            f"output folder {out} is not empty and holds no mixshard pack ({_listing(names)}); "
            "nothing was written. Choose an empty or new output folder"
        )
    if names and not resume:
        raise not_empty(f"output folder {out}")
    linked = [n for n in names if _made_afresh(n) and os.path.islink(out / n)]
    if linked:  # checked again when each file is made: this names them before any is written
        raise planted(out / linked[0])
    try:
        # one name per process and thread: job-array parts probe the same folder at once
        probe = out / f".mixshard-write-test-{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}"
        os.close(create_file(probe))
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write to output folder {out}: {exc.strerror}") from None


def _made_afresh(name: str) -> bool:
    """Whether `name` is a file a pack makes for itself in OUT (its journal, a temporary or lock
    file), which a symbolic link must never stand in for. Shards and index.json are not: the
    files of a finished pack may be links (spread over disks), and are only ever renamed over."""
    shard = name.startswith(SHARD_PREFIX) and name.endswith(SHARD_SUFFIX)
    return is_ours(name) and not shard and name != MANIFEST_NAME


def check_out_path(out: Path) -> None:
    if out.is_symlink() and not out.exists():  # not made through it: a disk may be unmounted
        raise OutputError(
            f"output folder {out} is a symbolic link to {os.readlink(out)}, which leads to no "
            "folder: make that folder (or mount the disk it is on) or remove the link; nothing "
            "was written"
        )
    if out.exists() and not out.is_dir():
        raise OutputError(f"output path {out} exists and is not a folder; choose a folder")
    if not out.exists() and str(out).startswith("~"):
        raise OutputError(f"output folder {out} would be made here{tilde_hint(out)}")


def check_apart(src: Path, out: Path) -> None:
    """SRC and OUT must not contain each other: a pack written into its source is scanned as
    images by the next run, and a source inside OUT is deleted by `overwrite`.

    Raises:
        OutputError: OUT is SRC, inside it, or holds it.
    """
    s, o = src.resolve(), out.resolve()
    if s == o or s in o.parents:
        where = "is the source folder" if s == o else f"is inside the source folder {src}"
        raise OutputError(
            f"output folder {out} {where}; choose an output folder outside the source (e.g. "
            f"{s.parent / (s.name + '-pack')}), nothing was written"
        )
    if o in s.parents:
        raise OutputError(
            f"the source folder {src} is inside the output folder {out}; choose an output "
            "folder that does not hold the source, nothing was written"
        )


# Bytes a stored image costs beyond its pixels: its label, its key in keys.json, and its share
# of the three tar headers and paddings of its block (generous: the check must not pass a pack
# that cannot fit).
PER_IMAGE_OVERHEAD = 256


def free_bytes(folder: Path) -> int:
    """Free bytes on the file system of `folder` for this user (tests replace it)."""
    return shutil.disk_usage(folder).free


def check_free_space(out: Path, images: int, size: int, scratch: int = 0) -> None:
    """Refuse a pack whose images cannot fit in the free space of OUT's file system, with
    `scratch` bytes more that it writes there while it runs (a .tar.gz's members, copied out).

    Raises:
        OutputError: naming the bytes needed and the bytes free.
    """
    need = images * (CHANNELS * size * size + PER_IMAGE_OVERHEAD) + scratch
    free = free_bytes(out)
    if need > free:
        copied = (
            f" (and {scratch:,} bytes of archive members copied there while it runs)"
            if scratch
            else ""
        )
        raise OutputError(
            f"not enough free space for this pack in {out}: its {images} images of {size}x{size} "
            f"px{copied} need about {need:,} bytes ({need / 1e9:.2f} GB), and {free:,} bytes "
            f"({free / 1e9:.2f} GB) are free; free some space or choose an output folder on "
            "another disk. Nothing was written"
        )


def remove_run(out: Path) -> None:
    """Remove what a pack wrote into `out` (shards, temporary files, journals): a strict run
    that failed from scratch leaves the folder as it found it."""
    for name in os.listdir(out):
        if is_ours(name) and not name.startswith(LOCK_NAME) and name != MANIFEST_NAME:
            with contextlib.suppress(FileNotFoundError):
                (out / name).unlink()


def load_done(
    out: Path,
    fingerprint: str,
    redo_skipped: bool = False,
    sizes: dict[str, int] | None = None,
    run: dict | None = None,
) -> dict[int, DoneShard]:
    """Shards recorded by earlier runs of the same plan (any journal in OUT: an interrupted
    pack, job-array parts) whose files are intact, by plan index; with `redo_skipped`, not
    those that skipped a file (a strict run decodes them again: the file may be fixed).
    `sizes` (`{name: bytes}` of a store's objects) stands in for the files in OUT. `run`
    (`sourceid.run_summary`) names what changed when a journal is of another plan.

    Raises:
        OutputError: a journal of another plan (other SRC or options) is in OUT.
    """
    done: dict[int, DoneShard] = {}
    for path in sorted(out.glob(JOURNAL_GLOB)):
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        try:
            header = json.loads(lines[0]) if lines else {}
        except ValueError:
            header = {}
        if not isinstance(header, dict) or header.get("fingerprint") != fingerprint:
            raise OutputError(
                f"{out} holds an interrupted pack of another source or other options "
                f"({path.name}{_changes(header, run)}); pack again with the same SRC and options "
                "to resume it, or pass ", OVERWRITE, " to start over",
            )  # fmt: skip
        for line in lines[1:]:
            try:
                shard = DoneShard.from_json(line)
            except ValueError:
                continue  # a line cut short by a kill: that shard is redone
            if redo_skipped and shard.skipped:
                continue
            info = shard.info
            if info is None or (
                sizes.get(info.name) == info.bytes
                if sizes is not None
                else _intact(out / info.name, info.bytes)
            ):
                done[shard.index] = shard
    return done


def _intact(path: Path, size: int) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return path.is_file() and st.st_size == size


def _changes(header: object, run: dict | None) -> str:
    """`: SRC had N files, now M; options ...` between a journal's run and this one."""
    old = header.get("run") if isinstance(header, dict) else None
    if not isinstance(old, dict) or run is None:
        return ""
    said = []
    if old.get("src") != run["src"]:
        said.append(f"started from {old.get('src')}, now {run['src']}")
    if old.get("files") != run["files"]:
        said.append(
            f"{old.get('files')} source files then, {run['files']} now: the shuffle puts every "
            "image elsewhere, so no finished shard can be kept"
        )
    before, now = old.get("options") or {}, run["options"]
    said += [
        f"{k} {before.get(k)} -> {now.get(k)}"
        for k in sorted(set(before) | set(now))
        if before.get(k) != now.get(k)
    ]
    return f": {'; '.join(said) or 'the same number of files, renamed or reclassified'}"


class Journal:
    """The journal of one run: rewritten with the shards it may reuse, then appended to."""

    def __init__(
        self,
        out: Path,
        fingerprint: str,
        done: dict[int, DoneShard],
        part: tuple[int, int] | None,
        run: dict | None = None,
    ) -> None:
        name = JOURNAL_NAME.replace(".jsonl", part_suffix(part) + ".jsonl")
        self.path = out / name
        head: dict = (
            {"fingerprint": fingerprint}
            if run is None
            else {"fingerprint": fingerprint, "run": run}
        )
        lines = [json.dumps(head)]
        lines += [done[i].to_json() for i in sorted(done)]
        try:
            atomic_write(self.path, ("\n".join(lines) + "\n").encode("utf-8"))
            fd = open_own(self.path, os.O_WRONLY | os.O_APPEND)
            self._f: TextIO = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - see close
        except OSError as exc:
            raise write_error(exc, self.path) from None

    def record(self, shard: DoneShard) -> None:
        """Append one finished shard, durably.

        Raises:
            WriteError: the journal could not be written.
        """
        try:
            self._f.write(shard.to_json() + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as exc:
            raise write_error(exc, self.path) from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._f.close()


def remove_journals(out: Path) -> None:
    for path in out.glob(JOURNAL_GLOB):
        path.unlink()


def remove_partials(out: Path, names: set[str]) -> None:
    """Remove the temporary files of the shards `names` (left by a killed run)."""
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (out / (name + TMP_SUFFIX)).unlink()


def missing_message(plan: PackPlan, out: Path, missing: list[int]) -> str:
    """Which shards (and, from the parts' journals, which parts) have not been written."""
    names = ", ".join(plan.shard_name(i) for i in missing[:5]) + (
        ", ..." if len(missing) > 5 else ""
    )
    counts = {int(p.name.split("-of-")[1].split(".")[0]) for p in out.glob(".mixshard-pack.part-*")}
    parts = ""
    if len(counts) == 1:
        n = counts.pop()
        parts = " from part(s) " + ", ".join(f"{k}/{n}" for k in sorted({i % n for i in missing}))
    return (
        f"{out}: {len(missing)} of {plan.n_shards} planned shards are not written yet{parts} "
        f"({names}); run the missing job-array parts, then finish again"
    )

"""The sources `pack` reads images from: a folder, or a tar / zip archive read in place.

An archive is listed once (one sequential pass over a tar's headers; a zip's central
directory) into the same `ScanResult` `scan` makes of the extracted folder (`archivelist`,
with the scanner's own folder rules), and decode workers read each member's bytes by its
offset (a tar) or index (a zip): nothing is extracted, and the pack is byte-identical to
packing the extracted folder. A `.tar.gz`'s members are copied into one file in OUT
(`materialize`: gzip has no random access), and tar hard links read as extraction makes them
(docs/design.md, "Hostile input on the writing side", has both rules). Each process holds one
open handle of each archive (`archive_handle`), made again after a fork and when another file
took the path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...core.errors import Arg, ArgumentError, ImageDecodeError, PackInterrupted, SourceError
from ...core.files import create_file
from ...core.packpath import tilde_hint
from .archivelist import (
    extracted_path,
    list_tar,
    list_zip,
    tar_infos,
    truncated,
)
from .magic import HEAD, NOT_AN_IMAGE, SNIFF_FIRST, looks_like_image
from .scanning import ScanResult
from .zipmembers import member_end, zip_data

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
ARCHIVE_SUFFIXES = (*TAR_SUFFIXES, ".zip")
MEMBERS_FILE = ".mixshard-pack-members{}.tmp"  # a .tar.gz's needed members, while packing


class ArchiveTruncated(PackInterrupted):
    """An archive ended inside a member while packing (cut short, or replaced since the scan)."""


def truncated_member(path: str, key: str, detail: str = "") -> ArchiveTruncated:
    """The error of an archive that ends inside the member `key` while packing."""
    return ArchiveTruncated(
        f"{path} ends inside member {key}{detail}: the archive was cut short or replaced while "
        "packing; finished shards are kept"
    )


def is_archive(path: str | os.PathLike) -> bool:
    """True when `path` names a tar, tar.gz or zip file (by its name)."""
    return str(path).lower().endswith(ARCHIVE_SUFFIXES)


# per process: (path, kind) -> (pid, the file's identity, handle)
_OPEN: dict[tuple[str, str], tuple[int, tuple[int, ...], Any]] = {}


def _close_handle(handle: Any) -> None:
    if isinstance(handle, int):
        os.close(handle)
    else:
        handle.close()


def archive_handle(path: str, kind: str) -> Any:
    """This process's open descriptor (raw) or ZipFile (zip) of `path`; one per process, reopened
    after a fork (a ZipFile shares its file position with the parent's) and when another file
    took the path (an archive downloaded again where the last one was)."""
    st = os.stat(path)
    ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    pid, known, opened = _OPEN.get((path, kind), (None, (), None))
    if pid != os.getpid() or known != ident:
        import zipfile

        if pid == os.getpid():  # this process's handle of the file that was there
            _close_handle(opened)
        opened = os.open(path, os.O_RDONLY) if kind == "raw" else zipfile.ZipFile(path)
        _OPEN[(path, kind)] = (os.getpid(), ident, opened)
    return opened


@dataclass(frozen=True)
class MemberReader:
    """What a decode worker needs to read members: small, so it travels with every task.

    `kind` is `"folder"` (a reference is unused: the key names the file under `path`),
    `"raw"` (a reference is `(offset, size)` in the file `path`: a tar, or the members file of
    a .tar.gz) or `"zip"` (a reference is the member's index in the zip's directory)."""

    path: str
    kind: str

    def fetch(self, key: str, ref: Any) -> tuple[str, bytes | None]:
        """The file to decode for `key`: `(path, None)` for a folder, `(name, bytes)` else.

        Raises:
            ArchiveTruncated: the archive ends inside the member.
            ImageDecodeError: a zip member is damaged (the file is then skipped).
        """
        if self.kind == "folder":
            return os.path.join(self.path, key), None
        if self.kind == "raw":
            offset, size = ref
            fd = archive_handle(self.path, "raw")
            if size > SNIFF_FIRST:  # a huge non-image (zeros named .png) is never read whole
                head = os.pread(fd, HEAD, offset)
                if len(head) == HEAD and not looks_like_image(head):
                    raise ImageDecodeError(NOT_AN_IMAGE)
            data = os.pread(fd, size, offset)
            if len(data) != size:
                raise truncated_member(self.path, key, f" ({len(data)} of {size} bytes)")
            return key, data
        import zipfile

        archive = archive_handle(self.path, "zip")
        info = archive.infolist()[ref]
        fast = zip_data(archive_handle(self.path, "raw"), info)
        if fast is not None:
            return key, fast
        try:
            return key, archive.read(info)
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            if os.path.getsize(self.path) < member_end(info):
                raise truncated_member(self.path, key) from None
            raise ImageDecodeError(f"corrupt archive member: {exc}") from None


@dataclass(frozen=True)
class PackInput:
    """Where a pack's images come from, resolved once by `open_source`.

    Attributes:
        label: how messages name it (the folder, or `archive.tar:within`).
        reader: what the decode workers read with.
        refs: key -> member reference (archives only); for a .tar.gz not yet materialized
            (reader kind `"gz"`), `(the member's number in the archive, its size)`.
        archive: the archive file (absolute; empty for a folder), also once materialized.
    """

    label: str
    reader: MemberReader
    refs: dict[str, Any] = field(default_factory=dict, repr=False)
    archive: str = ""

    def task(self, keys: list[str]) -> tuple[MemberReader, list[Any]]:
        """The reader and the references of one decode task."""
        return self.reader, [self.refs.get(k) for k in keys]

    def scratch_bytes(self) -> int:
        """The most bytes `materialize` copies into OUT: the members of a .tar.gz the pack
        reads, each once (0 for any other source)."""
        if self.reader.kind != "gz":
            return 0
        return sum(size for _, size in set(self.refs.values()))

    def visible(self) -> bool:
        """Whether this machine sees the source (a Ray node checks before decoding)."""
        return (
            Path(self.reader.path).is_dir()
            if self.reader.kind == "folder"
            else (Path(self.reader.path).is_file())
        )


def _compressed(path: str) -> bool:
    """Whether a tar file is compressed (gzip, bzip2, xz, zstd), whatever its name says."""
    with open(path, "rb") as f:
        head = f.read(6)
    magics = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")
    return head.startswith(magics)


def check_within(src: str | os.PathLike, within: str | None) -> str:
    """`within` as the relative folder it names inside the archive `src` ("" for its root).

    Raises:
        ValueError: `within` escapes the archive (absolute, `..`), or `src` is a folder.
    """
    if within is None:
        return ""
    if os.path.isdir(src):
        inside = Path(src) / within
        raise ArgumentError(
            Arg("within", within), f" picks a folder inside an archive, but SRC {src} is a "
            f"folder: pass the folder itself as SRC ({inside}) and no ", Arg("within"),
        )  # fmt: skip
    rel = extracted_path(within)
    if rel is None:
        raise ArgumentError(
            Arg("within", within),
            " must be a folder inside the archive, as a relative path without '..' (e.g. ",
            Arg("within", "places365_standard/train"), "; ", Arg("within", "."), " is its root)",
        )  # fmt: skip
    return rel


def open_source(
    src: str | os.PathLike, within: str | None = None, labels: str = "auto"
) -> tuple[PackInput, ScanResult]:
    """Resolve SRC (a folder, or a .tar / .tar.gz / .zip archive) and list its images.

    Args:
        src: the folder or archive.
        within: the folder inside an archive to pack, as if the archive had been extracted and
            that folder given (`"places365_standard/train"`); `"."` is the archive's root.
        labels: as for `scan`.

    Raises:
        ValueError: `within` with a folder.
        SourceError: as `scan`, and an archive that is truncated, damaged, lacks `within`, or
            holds a single folder while `within` is not given.
    """
    from .scanning import scan

    path = str(src)
    if os.path.isfile(path) and not is_archive(path):
        raise SourceError(
            f"source must be a folder of images, got a file: {src} (an archive of one is read "
            f"when its name ends in {', '.join(ARCHIVE_SUFFIXES)})"
        )
    if not os.path.lexists(path):
        what = "archive" if is_archive(path) else "folder"
        raise SourceError(f"source {what} not found: {src}{tilde_hint(src)}")
    rel = check_within(path, within)
    if not os.path.isfile(path):
        found = scan(path, labels)
        return PackInput(path, MemberReader(path, "folder")), found
    label = f"{path}:{rel}" if rel else path
    if path.lower().endswith(".zip"):
        listing = list_zip(path, rel)
        kind = "zip"
    else:
        kind = "gz" if _compressed(path) else "raw"
        listing = list_tar(path, rel, kind == "gz")
    found = listing.result(label, labels, within is not None)
    # absolute: a Ray task or a forked worker may run in another folder
    full = os.path.abspath(path)
    return PackInput(label, MemberReader(full, kind), dict(listing.images), full), found


def materialize(source: PackInput, out: Path, suffix: str) -> PackInput:
    """For a .tar.gz: copy the members the pack reads, still encoded, into one file in `out`
    (one sequential pass; gzip cannot seek), and read them from there. A member is streamed
    across in chunks, each once however many hard links read it; of one whose first bytes are
    no image's, only those are copied (decoding them gives the reason it is skipped). Other
    sources as is.

    Raises:
        OutputError: a symbolic link (or FIFO) stands where the file is made.
        SourceError: the archive is damaged.
        OSError: the copy could not be written.
    """
    if source.reader.kind != "gz":
        return source
    path = (out / MEMBERS_FILE.format(suffix)).absolute()
    wanted: dict[int, list[str]] = {}
    for rel, (number, _) in source.refs.items():
        wanted.setdefault(number, []).append(rel)
    refs: dict[str, Any] = {}
    archive = source.reader.path
    import tarfile

    try:
        with tarfile.open(archive, "r:*") as tf, open(create_file(path), "wb") as dst:
            for number, info in enumerate(tar_infos(tf)):
                rels = wanted.get(number)
                if rels is None or not info.isreg():
                    continue
                member = tf.extractfile(info)
                start = dst.tell()
                if member is not None:
                    head = member.read(HEAD)
                    dst.write(head)
                    if looks_like_image(head):
                        shutil.copyfileobj(member, dst, 1 << 20)
                for rel in rels:
                    refs[rel] = (start, dst.tell() - start)
    except (tarfile.TarError, EOFError, ValueError) as exc:
        raise truncated(archive, str(exc) or type(exc).__name__) from None
    return replace(source, reader=MemberReader(str(path), "raw"), refs=refs)


def remove_members(out: Path, suffix: str) -> None:
    """Remove the copy of a .tar.gz's members a run made in `out` (a link planted under its
    name was refused, and is left as found)."""
    members = out / MEMBERS_FILE.format(suffix)
    with contextlib.suppress(OSError):
        if not members.is_symlink():
            members.unlink(missing_ok=True)

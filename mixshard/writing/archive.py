"""The sources `pack` reads images from: a folder, or a tar / zip archive read in place.

An archive is listed once (one sequential pass over a tar's headers; a zip's central
directory) into the same `ScanResult` `scan` makes of the extracted folder: member names are
mapped to the relative paths extraction would create under `within`, and the folder rules
(hidden entries, extensions, class folders, natural order) are the scanner's own
(`scanning.classify`). Decode workers then read each member's bytes by its offset (a tar), by
its index (a zip), so nothing is extracted and the pack is byte-identical to packing the
extracted folder. A gzip stream has no random access: the members a `.tar.gz` pack needs are
copied, still encoded, into one temporary file in OUT (`materialize`) and read from there;
the free-space check counts that file, and a member whose first bytes are no image's is copied
as those bytes only (`magic`). A hard link in a tar is read as the member it links to, as
extraction makes it: the file that member wrote, or the one an earlier link resolved to.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ImageDecodeError, PackInterrupted, SourceError
from ..core.files import create_file
from .magic import HEAD, NOT_AN_IMAGE, SNIFF_FIRST, looks_like_image
from .scanning import ScanResult, classify, is_image_name
from .tarscan import Unusual, tar_members
from .zipmembers import member_end, zip_data, zip_kind

if TYPE_CHECKING:  # imported where used: a folder pack starts without them
    import tarfile

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
ARCHIVE_SUFFIXES = (*TAR_SUFFIXES, ".zip")
MAX_MEMBER_BYTES = 512 << 20  # no image is larger; a bigger member is not read into memory
MEMBERS_FILE = ".mixshard-pack-members{}.tmp"  # a .tar.gz's needed members, while packing


class ArchiveTruncated(PackInterrupted):
    """An archive ended inside a member while packing (cut short, or replaced since the scan)."""


def is_archive(path: str | os.PathLike) -> bool:
    """True when `path` names a tar, tar.gz or zip file (by its name)."""
    return str(path).lower().endswith(ARCHIVE_SUFFIXES)


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
            fd = _handle(self.path, "raw")
            if size > SNIFF_FIRST:  # a huge non-image (zeros named .png) is never read whole
                head = os.pread(fd, HEAD, offset)
                if len(head) == HEAD and not looks_like_image(head):
                    raise ImageDecodeError(NOT_AN_IMAGE)
            data = os.pread(fd, size, offset)
            if len(data) != size:
                raise ArchiveTruncated(
                    f"{self.path} ends inside member {key} ({len(data)} of {size} bytes): the "
                    "archive was cut short or replaced while packing; finished shards are kept"
                )
            return key, data
        import zipfile

        archive = _handle(self.path, "zip")
        info = archive.infolist()[ref]
        fast = zip_data(_handle(self.path, "raw"), info)
        if fast is not None:
            return key, fast
        try:
            return key, archive.read(info)
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            if os.path.getsize(self.path) < member_end(info):
                raise ArchiveTruncated(
                    f"{self.path} ends inside member {key}: the archive was cut short or "
                    "replaced while packing; finished shards are kept"
                ) from None
            raise ImageDecodeError(f"corrupt archive member: {exc}") from None


_OPEN: dict[tuple[str, str], tuple[int, Any]] = {}  # per process: (path, kind) -> (pid, handle)


def _handle(path: str, kind: str) -> Any:
    """This process's open descriptor (raw) or ZipFile (zip) of `path`; one per process, reopened
    after a fork (a ZipFile shares its file position with the parent's)."""
    pid, handle = _OPEN.get((path, kind), (None, None))
    if pid != os.getpid():
        import zipfile

        handle = os.open(path, os.O_RDONLY) if kind == "raw" else zipfile.ZipFile(path)
        _OPEN[(path, kind)] = (os.getpid(), handle)
    return handle


@dataclass(frozen=True)
class Source:
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


def _norm(name: str) -> str | None:
    """The relative path extraction makes of a member name, or None when it would escape
    the extraction folder (absolute, or a `..` component)."""
    name = name.replace("\\", "/") if "/" not in name else name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)


def _under(rel: str, within: str) -> str | None:
    if not within:
        return rel
    if rel == within or not rel.startswith(within + "/"):
        return None
    return rel[len(within) + 1 :]


class _Listing:
    """Collects members as the folder walk would see them after extraction."""

    def __init__(self, within: str) -> None:
        self.within = within
        self.images: dict[str, Any] = {}  # relative path -> reference (last member wins)
        self.skipped: dict[str, str] = {}
        self.tops: set[str] = set()  # top-level folders under `within`
        self.found = False  # anything under `within`
        self.loose = False  # a file right under `within`
        self.roots: set[str] = set()  # the archive's own top-level entries
        # hard links not resolved from `images`: relative path -> (target, member number)
        self.pending: dict[str, tuple[str, int]] = {}
        self.link_targets: set[str] = set()  # what any hard link of the archive names
        self.members = 0  # members listed so far

    def add(self, name: str, kind: str, ref: Any, size: int, link: str = "") -> None:
        """One member: `kind` is "file", "dir", "hardlink" (to the member named `link`),
        "link" (symbolic) or "other"."""
        number = self.members
        self.members += 1
        target = _norm(link) if kind == "hardlink" else None
        if target:
            self.link_targets.add(target)
        rel = _norm(name)
        if rel is None:
            if is_image_name(name):
                self.skipped[name] = "unsafe member name (absolute or with '..'): not read"
            return
        if rel:
            self.roots.add(rel.split("/", 1)[0])
        rel = _under(rel, self.within) if rel else None
        if not rel:
            return
        self.found = True
        parts = rel.split("/")
        if len(parts) > 1 or kind == "dir":
            self.tops.add(parts[0])
        else:
            self.loose = True
        if any(p.startswith(".") for p in parts) or kind == "dir" or not is_image_name(rel):
            return  # hidden entries are not read, as in a folder
        self.images.pop(rel, None)
        self.skipped.pop(rel, None)
        self.pending.pop(rel, None)
        if kind == "hardlink":
            inside = _under(target, self.within) if target else None
            found = self.images.get(inside) if inside else None
            if found is None and target:  # resolved by a second pass (`resolve_links`)
                self.pending[rel] = (target, number)
                return
            kind, ref, size = ("file", found, found[1]) if found else ("link", ref, size)
        if kind == "link":
            self.skipped[rel] = "a link inside the archive: not followed"
        elif kind != "file":
            self.skipped[rel] = "not a regular file"
        elif size > MAX_MEMBER_BYTES:
            self.skipped[rel] = f"member too large for an image ({size} bytes): not read"
        else:
            self.images[rel] = ref

    def resolve(self, rel: str, ref: Any) -> None:
        """A pending hard link's content: the member `ref` (from `resolve_links`)."""
        del self.pending[rel]
        if ref[1] > MAX_MEMBER_BYTES:
            self.skipped[rel] = f"member too large for an image ({ref[1]} bytes): not read"
        else:
            self.images[rel] = ref

    def result(self, label: str, labels: str, explicit: bool) -> ScanResult:
        for rel, (target, _) in self.pending.items():
            self.skipped[rel] = (
                f"a hard link to {target}, which the archive does not hold as a file before "
                "it: not read"
            )
        self.pending = {}
        if not self.found:
            archive = label.rsplit(":", 1)[0] if self.within else label
            found = ", ".join(sorted(self.roots)[:10]) or "nothing"
            what = f"no folder {self.within!r}" if self.within else "no files"
            raise SourceError(f"{archive} holds {what}; its top level holds: {found}")
        images = list(self.images)
        top = min(self.tops) if len(self.tops) == 1 else ""
        if not explicit and top and not self.loose:
            raise SourceError(
                f"{label} holds one folder, {top}/: pass within={top!r} (or a folder inside it, "
                "as if the archive had been extracted and that folder given), or within='.' to "
                "pack the archive's root"
            )
        skipped = [{"path": p, "reason": r} for p, r in self.skipped.items()]
        return classify(label, images, skipped, sorted(self.tops), labels)


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.isreg():
        return "file"
    if info.isdir():
        return "dir"
    if info.islnk():
        return "hardlink"
    return "link" if info.issym() else "other"


def _members(tf: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """A tar's members in order, one pass, without keeping them (1.8M would take a GB)."""
    while (info := tf.next()) is not None:
        tf.members = []  # type: ignore[attr-defined]  # TarFile's list of what it has read
        yield info


def _compressed(path: str) -> bool:
    """Whether a tar file is compressed (gzip, bzip2, xz, zstd), whatever its name says."""
    with open(path, "rb") as f:
        head = f.read(6)
    magics = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")
    return head.startswith(magics)


def _truncated(path: str, what: str) -> SourceError:
    return SourceError(
        f"{path} is truncated or damaged ({what}); download it again (or check it against its "
        "published checksum)"
    )


Entry = tuple[str, str, Any, int, str]  # name, kind, reference, size, hard link target


def _list_tar(path: str, within: str, compressed: bool) -> _Listing:
    """A tar's members under `within`: referenced by offset, or in a compressed one by their
    number in the archive; hard links resolved (a second pass when the first could not)."""
    fast = not compressed
    try:
        listing = _listed(_tar_entries(path, compressed, fast), within)
    except (Unusual, OSError):
        if not fast:
            raise
        fast = False  # tarfile lists it afresh, and says what is wrong with it
        listing = _listed(_tar_entries(path, compressed, fast), within)
    if listing.pending:
        resolve_links(listing, _tar_entries(path, compressed, fast))
    return listing


def _listed(entries: Iterator[Entry], within: str) -> _Listing:
    listing = _Listing(within)
    for name, kind, ref, size, link in entries:
        listing.add(name, kind, ref, size, link)
    return listing


def resolve_links(listing: _Listing, entries: Iterator[Entry]) -> None:
    """The hard links `listing` could not resolve as it went (their target outside `within`,
    hidden, not named like an image, or itself such a link), from a second pass over the same
    entries: each gets what its target held at that point of the archive, as extraction does.
    Only the targets of links are followed, so the pass keeps little in memory."""
    pending = {number: rel for rel, (_, number) in listing.pending.items()}
    latest: dict[str, Any] = {}  # a link target -> the member it holds now (None: not a file)
    for number, (name, kind, ref, _, link) in enumerate(entries):
        rel = pending.get(number)
        if rel is not None and (found := latest.get(listing.pending[rel][0])) is not None:
            listing.resolve(rel, found)
        norm = _norm(name)
        if norm in listing.link_targets:
            target = _norm(link) if kind == "hardlink" else None
            latest[norm] = ref if kind == "file" else latest.get(target) if target else None


def _tar_entries(path: str, compressed: bool, fast: bool) -> Iterator[Entry]:
    """A tar's members in order: read from their headers (`fast`, uncompressed only), else by
    `tarfile`, whose errors become `SourceError`s."""
    if fast:
        fd = os.open(path, os.O_RDONLY)
        try:
            for name, kind, offset, n, link in tar_members(fd):
                yield name, kind, (offset, n), n, link
        finally:
            os.close(fd)
        return
    import tarfile

    size = os.path.getsize(path)
    try:
        with tarfile.open(path, "r:*") as tf:
            for number, info in enumerate(_members(tf)):
                end = info.offset_data + info.size
                if not compressed and info.isreg() and end > size:
                    raise _truncated(path, f"member {info.name} ends past the end of the file")
                ref = (number, info.size) if compressed else (info.offset_data, info.size)
                yield info.name, _tar_kind(info), ref, info.size, info.linkname
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise _truncated(path, str(exc) or type(exc).__name__) from None


def _list_zip(path: str, within: str) -> _Listing:
    listing = _Listing(within)
    import zipfile

    size = os.path.getsize(path)
    try:
        with zipfile.ZipFile(path) as zf:
            for i, info in enumerate(zf.infolist()):
                kind = "other" if info.flag_bits & 1 else zip_kind(info)  # encrypted
                if member_end(info) > size:
                    raise _truncated(path, f"member {info.filename} ends past the end of the file")
                listing.add(info.filename, kind, i, info.file_size)
        return listing
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise _truncated(path, str(exc)) from None


def open_source(
    src: str | os.PathLike, within: str | None = None, labels: str = "auto"
) -> tuple[Source, ScanResult]:
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
    if not os.path.isfile(path):
        if within is not None:
            raise ValueError("within= picks a folder inside an archive; SRC is not one")
        found = scan(path, labels)
        return Source(path, MemberReader(path, "folder")), found
    rel = _norm(within or "")
    if rel is None:
        raise ValueError(f"within must be a relative path inside the archive, got {within!r}")
    label = f"{path}:{rel}" if rel else path
    if path.lower().endswith(".zip"):
        listing = _list_zip(path, rel)
        kind = "zip"
    else:
        kind = "gz" if _compressed(path) else "raw"
        listing = _list_tar(path, rel, kind == "gz")
    found = listing.result(label, labels, within is not None)
    # absolute: a Ray task or a forked worker may run in another folder
    full = os.path.abspath(path)
    return Source(label, MemberReader(full, kind), dict(listing.images), full), found


def materialize(source: Source, out: Path, suffix: str) -> Source:
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
            for number, info in enumerate(_members(tf)):
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
        raise _truncated(archive, str(exc) or type(exc).__name__) from None
    return replace(source, reader=MemberReader(str(path), "raw"), refs=refs)

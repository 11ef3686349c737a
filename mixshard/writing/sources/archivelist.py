"""The members of a tar or zip archive listed as the extracted folder would show them: member
names mapped to the relative paths extraction would make under `within`, what would be
skipped, and tar hard links resolved as extraction resolves them (the file their target wrote,
or what an earlier link resolved to). `archive.open_source` turns a listing into a source."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ...core.errors import Arg, SourceError
from .scanning import ScanResult, classify, is_image_name, split_folders
from .tarscan import Unusual, tar_members
from .zipmembers import member_end, zip_kind

if TYPE_CHECKING:  # imported where used
    import tarfile


MAX_MEMBER_BYTES = 512 << 20  # no image is larger; a bigger member is not read into memory


def extracted_path(name: str) -> str | None:
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

    def __init__(self, within: str, accept: Callable[[str], bool] = is_image_name) -> None:
        self.within, self.accept = within, accept  # which names are read (images, or clips)
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
        target = extracted_path(link) if kind == "hardlink" else None
        if target:
            self.link_targets.add(target)
        rel = extracted_path(name)
        if rel is None:
            if self.accept(name):
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
        if any(p.startswith(".") for p in parts) or kind == "dir" or not self.accept(rel):
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

        def where(sub: str) -> Arg:
            return Arg("within", posixpath.join(self.within, sub))

        if not explicit and top and not self.loose:
            below, splits = split_folders([p.split("/", 1)[1] for p in images if "/" in p])
            if splits and not below:
                pick = next((n for n in splits if n.startswith("train")), splits[0])
                raise SourceError(
                    f"{label} holds one folder, {top}/, of dataset splits ({', '.join(splits)}): "
                    "pass ", where(f"{top}/{pick}"), " to pack one split, as if the archive had "
                    "been extracted and that folder given",
                )  # fmt: skip
            raise SourceError(
                f"{label} holds one folder, {top}/: pass ", where(top), " (or a folder inside it, "
                "as if the archive had been extracted and that folder given), or ",
                Arg("within", "."), " to pack the archive's root",
            )  # fmt: skip
        skipped = [{"path": p, "reason": r} for p, r in self.skipped.items()]
        return classify(label, images, skipped, sorted(self.tops), labels, where)


def truncated(path: str, what: str) -> SourceError:
    return SourceError(
        f"{path} is truncated or damaged ({what}); download it again (or check it against its "
        "published checksum)"
    )


def tar_kind(info: tarfile.TarInfo) -> str:
    if info.isreg():
        return "file"
    if info.isdir():
        return "dir"
    if info.islnk():
        return "hardlink"
    return "link" if info.issym() else "other"


def tar_infos(tf: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """A tar's members in order, one pass, without keeping them (1.8M would take a GB)."""
    while (info := tf.next()) is not None:
        tf.members = []  # type: ignore[attr-defined]  # TarFile's list of what it has read
        yield info


Entry = tuple[str, str, Any, int, str]  # name, kind, reference, size, hard link target


def list_tar(
    path: str, within: str, compressed: bool, accept: Callable[[str], bool] = is_image_name
) -> _Listing:
    """A tar's members under `within`: referenced by offset, or in a compressed one by their
    number in the archive; hard links resolved (a second pass when the first could not)."""
    fast = not compressed
    try:
        listing = _listed(tar_entries(path, compressed, fast), within, accept)
    except (Unusual, OSError):
        if not fast:
            raise
        fast = False  # tarfile lists it afresh, and says what is wrong with it
        listing = _listed(tar_entries(path, compressed, fast), within, accept)
    if listing.pending:
        try:
            resolve_links(listing, tar_entries(path, compressed, fast))
        except (Unusual, OSError):  # it listed as usual a moment ago
            raise truncated(path, "it changed while it was listed") from None
    return listing


def _listed(entries: Iterator[Entry], within: str, accept: Callable[[str], bool]) -> _Listing:
    listing = _Listing(within, accept)
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
        norm = extracted_path(name)
        if norm in listing.link_targets:
            target = extracted_path(link) if kind == "hardlink" else None
            latest[norm] = ref if kind == "file" else latest.get(target) if target else None


def tar_entries(path: str, compressed: bool, fast: bool) -> Iterator[Entry]:
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
            for number, info in enumerate(tar_infos(tf)):
                end = info.offset_data + info.size
                if not compressed and info.isreg() and end > size:
                    raise truncated(path, f"member {info.name} ends past the end of the file")
                ref = (number, info.size) if compressed else (info.offset_data, info.size)
                yield info.name, tar_kind(info), ref, info.size, info.linkname
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise truncated(path, str(exc) or type(exc).__name__) from None


def list_zip(path: str, within: str, accept: Callable[[str], bool] = is_image_name) -> _Listing:
    listing = _Listing(within, accept)
    import zipfile

    size = os.path.getsize(path)
    try:
        with zipfile.ZipFile(path) as zf:
            for i, info in enumerate(zf.infolist()):
                kind = "other" if info.flag_bits & 1 else zip_kind(info)  # encrypted
                if member_end(info) > size:
                    raise truncated(path, f"member {info.filename} ends past the end of the file")
                listing.add(info.filename, kind, i, info.file_size)
        return listing
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise truncated(path, str(exc)) from None

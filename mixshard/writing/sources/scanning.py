"""Source tree -> naturally sorted list of (relative path, label), and the class names.

Two layouts are accepted: an ImageFolder tree (each top-level subfolder is a class; images are
found recursively inside it) and a flat folder (COCO `val2017/`: one unlabeled set). Class
labels follow torchvision's `ImageFolder` (plain sorted folder names). Directory symlinks are
followed, except those that lead back to a folder above them (a loop, reported). Hidden files
and folders are not read.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...core.constants import IMAGE_EXTENSIONS, LABEL_MODES, MANIFEST_NAME, NO_LABEL
from ...core.errors import Arg, SourceError
from ...core.packpath import packs_in, tilde_hint

FOLDERS = Arg("labels", "folders")
_DIGITS = re.compile(r"(\d+)")
# Top-level folder names that are a dataset's splits, not its classes (train, val2017, ...).
_SPLIT = re.compile(r"(train|training|val|valid|validation|test|testing|dev)(\d{4})?", re.I)


def natural_key(text: str) -> tuple:
    """Sort key that orders `img2` before `img10`; ties fall back to the plain string."""
    parts: list = _DIGITS.split(text)  # text, digits, text, ...: the digits at odd places
    parts[1::2] = map(int, parts[1::2])
    return (tuple(parts), text)


def path_key(relpath: str) -> tuple:
    """Natural sort key of a `/`-separated relative path, component by component (the keys
    of folder names, shared by all the files in them, are made once)."""
    *folders, name = relpath.split("/")
    return (*map(_folder_key, folders), natural_key(name))


_folder_key = functools.lru_cache(maxsize=1 << 16)(natural_key)


def is_image_name(name: str) -> bool:
    """True when `name` has one of the accepted image extensions, in any letter case."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def accepted_extensions() -> str:
    """The accepted extensions, for error messages."""
    return ", ".join(IMAGE_EXTENSIONS) + " (any letter case)"


@dataclass(frozen=True)
class ScanResult:
    """What `scan` found.

    Attributes:
        items: `(relative path, label)` in pack order before shuffling; paths use `/`.
        classes: class names, index = label; empty for an unlabeled set.
        skipped: `{"path", "reason"}` for entries that look like images but cannot be read.
        labels: the resolved label mode, `"folders"` or `"none"`.
    """

    items: list[tuple[str, int]]
    classes: list[str]
    skipped: list[dict[str, str]] = field(default_factory=list)
    labels: str = "none"


def walk(
    root: Path, accept: Callable[[str], bool] = is_image_name
) -> tuple[list[str], list[dict[str, str]]]:
    """All files under `root` whose names `accept` takes (images; a clip pack's images and
    videos), relative and `/`-separated, and the entries to report."""
    images: list[str] = []
    skipped: list[dict[str, str]] = []
    root_stat = os.stat(root)

    def visit(folder: Path, rel: str, ancestors: frozenset) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            skipped.append({"path": rel or ".", "reason": f"unreadable folder: {exc.strerror}"})
            return
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue  # hidden files and folders (.DS_Store, .git, .ipynb_checkpoints)
            child = f"{rel}/{name}" if rel else name
            image = accept(name)
            try:
                kind = _kind(entry, image)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    skipped.append({"path": child, "reason": "symlink loop"})
                elif entry.is_symlink() and image:
                    skipped.append({"path": child, "reason": "broken symlink"})
                elif image:
                    skipped.append({"path": child, "reason": f"unreadable: {exc.strerror}"})
                continue
            if isinstance(kind, tuple):  # a folder
                if kind in ancestors:
                    skipped.append({"path": child, "reason": "symlink loop"})
                    continue
                visit(Path(entry.path), child, ancestors | {kind})
            elif image:
                if kind:
                    images.append(child)
                else:
                    # A FIFO named x.jpg would block the decoder forever.
                    skipped.append({"path": child, "reason": "not a regular file"})

    visit(root, "", frozenset({(root_stat.st_dev, root_stat.st_ino)}))
    return images, skipped


def _kind(entry: os.DirEntry, image: bool) -> tuple[int, int] | bool:
    """A folder's `(device, inode)` (symlinks followed), else whether it is a regular file.
    The kind of an entry that is no symlink comes from the folder listing (`d_type`): no
    `stat` of every file (~5 µs each here, a round trip each on a network file system); a
    file that is no image is not looked at further.

    Raises:
        OSError: a symlink is broken or loops, or the entry cannot be read.
    """
    if entry.is_symlink():
        st = os.stat(entry.path)
        return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else stat.S_ISREG(st.st_mode)
    if entry.is_dir(follow_symlinks=False):
        st = entry.stat(follow_symlinks=False)
        return (st.st_dev, st.st_ino)
    return image and entry.is_file(follow_symlinks=False)


def class_folders(root: Path) -> list[str]:
    """The class names of an ImageFolder tree as torchvision finds them: every top-level
    folder (symlinks followed), in plain sorted order, so labels equal
    `torchvision.datasets.ImageFolder(root).class_to_idx`."""
    names = []
    for entry in os.scandir(root):
        with contextlib.suppress(OSError):
            if entry.is_dir():
                names.append(entry.name)
    return sorted(names)


def _resolve_mode(src, labels: str, loose: list[str], with_images: list[str]) -> str:
    if labels != "auto":
        return labels
    if loose and with_images:
        raise SourceError(
            f"{src} holds both loose images ({len(loose)}, e.g. {loose[0]}) and class "
            f"folders ({len(with_images)}, e.g. {with_images[0]}/); pass ", FOLDERS,
            " to use the class folders (loose images are then reported as skipped) or ",
            Arg("labels", "none"), " to pack every image as one unlabeled set",
        )  # fmt: skip
    return "folders" if with_images else "none"


def _no_images(name: str) -> str:
    if name.startswith("."):
        return "hidden folder: not read (its label stays reserved)"
    return "empty class folder: no images (its label stays reserved)"


def scan(src: str | os.PathLike, labels: str = "auto") -> ScanResult:
    """List the images of an ImageFolder tree or a flat folder.

    Args:
        src: the source folder.
        labels: `"auto"` (class folders when the top level holds only folders with images, one
            unlabeled set when it holds only images), `"folders"` or `"none"`.

    Returns:
        A `ScanResult` with naturally sorted items. Classes are every top-level folder in
        torchvision's order; an empty or unreadable one keeps its label and is reported in
        `skipped`.

    Raises:
        ValueError: an unknown `labels` mode.
        SourceError: SRC is missing, not a folder, holds no images, or mixes loose images and
            class folders under `labels="auto"`.
    """
    if labels not in LABEL_MODES:
        raise ValueError(f"unknown labels mode {labels!r}; use one of {', '.join(LABEL_MODES)}")
    root = Path(src)
    refuse_pack_source(root)
    if not root.exists():
        raise SourceError(f"source folder not found: {src}{tilde_hint(src)}")
    if not root.is_dir():
        raise SourceError(f"source must be a folder of images, got a file: {src}")
    try:
        images, skipped = walk(root)
        classes = class_folders(root)
    except OSError as exc:
        raise SourceError(f"cannot read source folder {src}: {exc.strerror}") from exc
    return classify(src, images, skipped, classes, labels)


def classify(
    src: str | os.PathLike,
    images: list[str],
    skipped: list[dict[str, str]],
    classes: list[str],
    labels: str,
    where: Callable[[str], str | Arg] | None = None,
) -> ScanResult:
    """What `scan` makes of a listing: the image paths found (relative, `/`-separated), the
    entries already reported, the top-level folder names (sorted) and the labels mode. Shared
    by the folder walk and archive listings, so both give the same result for the same tree;
    `where(sub)` says how to pass SRC's folder `sub` instead (`refuse_split_folders`)."""
    images = sorted(images, key=path_key)
    if not images:
        raise SourceError(
            f"no images found in {src} (searched recursively). "
            f"Accepted extensions: {accepted_extensions()}"
        )
    loose = [p for p in images if "/" not in p]
    with_images = sorted({p.split("/", 1)[0] for p in images if "/" in p})
    if labels != "folders":
        refuse_split_folders(src, images, where)
    mode = _resolve_mode(src, labels, loose, with_images)
    if mode == "none":
        skipped.sort(key=lambda s: path_key(s["path"]))
        return ScanResult([(p, NO_LABEL) for p in images], [], skipped, "none")
    if not with_images:
        raise SourceError(
            FOLDERS, f": {src} has no subfolders with images (a flat folder); use ",
            Arg("labels", "none"), " or ", Arg("labels", "auto"),
        )  # fmt: skip
    index = {name: i for i, name in enumerate(classes)}
    items = [(p, index[p.split("/", 1)[0]]) for p in images if "/" in p]
    skipped += [{"path": p, "reason": "a loose image outside the class folders"} for p in loose]
    reported = {s["path"] for s in skipped}
    skipped += [
        {"path": name, "reason": _no_images(name)}
        for name in sorted(set(classes) - set(with_images))
        if name not in reported
    ]
    skipped.sort(key=lambda s: path_key(s["path"]))
    return ScanResult(items, classes, skipped, "folders")


def refuse_pack_source(root: Path) -> None:
    """A SRC that is a mixshard pack (or a folder of packs) is not an image folder: say so,
    before its shards are searched for images.

    Raises:
        SourceError: `root` holds `index.json`, or sub-folders that are packs and no images.
    """
    if (root / MANIFEST_NAME).is_file():
        raise SourceError(
            f"{root} is a mixshard pack (it holds {MANIFEST_NAME}), not an image folder; pack "
            "the folder of the original images instead (an existing pack is read as it is)"
        )
    packs = packs_in(root) if root.is_dir() else []
    if packs and not any(is_image_name(n) for n in os.listdir(root)):
        raise SourceError(
            f"{root} is a folder of mixshard packs ({', '.join(packs[:5])}), not an image "
            "folder; pack the folder of the original images instead"
        )


def split_folders(images: list[str]) -> tuple[str, list[str]]:
    """Where a listing holds a dataset's splits: `("", ["train", "val"])` at its top level,
    `("places365_standard", ["train", "val"])` one level down (SRC two levels too high: the
    folder an archive was extracted into), or `("", [])`."""
    tops: set[str] = set()
    below: dict[str, set[str]] = {}
    for p in images:
        parts = p.split("/", 2)
        if len(parts) > 1:
            tops.add(parts[0])
        if len(parts) > 2:
            below.setdefault(parts[0], set()).add(parts[1])
    splits = sorted(n for n in tops if _SPLIT.fullmatch(n))
    if splits:
        return "", splits
    for top in sorted(below):
        splits = sorted(n for n in below[top] if _SPLIT.fullmatch(n))
        if splits:
            return top, splits
    return "", []


def refuse_split_folders(
    src: str | os.PathLike, images: list[str], where: Callable[[str], str | Arg] | None = None
) -> None:
    """A SRC one or two levels too high holds a dataset's splits (`train/`, `val/`) where
    classes belong: packing it would mix validation images into the pool, or pack train and
    val together as one class. `where(sub)` says how to pass the folder `sub` of SRC instead
    (default: the path `SRC/sub`).

    Raises:
        SourceError: a top-level folder with images, or a folder right below one, has a split
            name; the message names the folder to pass instead.
    """
    top, splits = split_folders(images)
    if not splits:
        return
    pick = next((n for n in splits if n.lower().startswith("train")), splits[0])
    where = where or (lambda sub: str(Path(src) / sub))
    if top:
        names = ", ".join(f"{top}/{n}" for n in splits)
        found = f"{src} holds dataset splits one level down ({names})"
        sub = f"{top}/{pick}"
    else:
        found = f"the top-level folders of {src} are dataset splits ({', '.join(splits)})"
        sub = pick
    raise SourceError(
        f"{found}, not classes; pass one split as the source instead, e.g. ", where(sub),
        " (or pass ", FOLDERS, " if they really are classes)",
    )  # fmt: skip

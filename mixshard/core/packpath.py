"""What a path a user gave for a pack names: the pack folder itself or its `index.json` (both
are accepted everywhere), and when it is not a pack, what it is instead, so that the error says
what to do (pack an image folder, pick one of the packs in a folder, use a shard's folder).
"""

from __future__ import annotations

import os
from pathlib import Path

from .constants import IMAGE_EXTENSIONS, JOURNAL_GLOB, MANIFEST_NAME, SHARD_SUFFIX

# How many folder entries a description looks at: a folder of 1.8M images is not listed.
_PEEK = 2000


def pack_dir(path: str | os.PathLike) -> Path:
    """The pack folder a path names: the folder itself, or the folder of an `index.json`."""
    p = Path(path)
    if p.name == MANIFEST_NAME and not p.is_dir():
        return p.parent
    return p


def tilde_hint(path: str | os.PathLike) -> str:
    """A note for a path that starts with a literal `~` (a shell that did not expand it), else
    an empty string."""
    text = os.fspath(path)
    if not text.startswith("~"):
        return ""
    return (
        f" (it starts with a literal ~, which was not expanded: write "
        f"{os.path.expanduser(text) if text.startswith('~/') else '$HOME/...'} instead)"
    )


def _entries(folder: Path) -> list[os.DirEntry]:
    out = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                out.append(entry)
                if len(out) >= _PEEK:
                    break
    except OSError:
        return []
    return out


def _is_image(name: str) -> bool:
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _has_images(folder: Path, depth: int) -> bool:
    """True when `folder` holds an image within `depth` levels (a bounded look)."""
    entries = _entries(folder)
    if any(e.is_file() and _is_image(e.name) for e in entries):
        return True
    if depth == 0:
        return False
    return any(
        e.is_dir() and not e.name.startswith(".") and _has_images(Path(e.path), depth - 1)
        for e in entries[:50]
    )


def packs_in(folder: Path) -> list[str]:
    """The names of the sub-folders of `folder` that hold a finished pack."""
    return sorted(
        e.name for e in _entries(folder) if e.is_dir() and (Path(e.path) / MANIFEST_NAME).is_file()
    )


def not_a_pack(where: Path) -> str:
    """Why the existing path `where` (with no `index.json`) is not a pack, and what to do."""
    if where.is_file():
        folder = where.parent
        if where.name.endswith(SHARD_SUFFIX) and (folder / MANIFEST_NAME).is_file():
            return (
                f"{where} is a shard file of the pack {folder}; pass the pack folder {folder} "
                "(or its index.json)"
            )
        return f"{where} is a file, not a pack; pass a pack folder (or its index.json)"
    if any(where.glob(JOURNAL_GLOB)):
        return (
            f"no {MANIFEST_NAME} in {where}: an interrupted pack; finish it with "
            f"`mixshard pack SRC {where} --resume` (the same SRC and options)"
        )
    packs = packs_in(where)
    if packs:
        shown = ", ".join(str(where / p) for p in packs[:5]) + (", ..." if len(packs) > 5 else "")
        return (
            f"no {MANIFEST_NAME} in {where}: a folder of {len(packs)} pack(s), not a pack; "
            f"pass one of them: {shown}"
        )
    if _has_images(where, 2):
        return (
            f"no {MANIFEST_NAME} in {where}: an image folder, not a pack; pack it with "
            f"`mixshard pack {where} OUT` (OUT: a new folder outside it)"
        )
    return (
        f"no {MANIFEST_NAME} in {where}: not a mixshard pack (no images, packs or journal "
        f"there either); make one with `mixshard pack SRC {where}`"
    )

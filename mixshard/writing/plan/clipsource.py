"""A clip pack's source: a folder of video files or of frame folders, or either inside a .tar
or .zip, -> its clips in natural order of their names, each with its frames in play order.

Each video file directly in SRC is one clip (`video10.mp4`); each folder directly in SRC that
holds images is one clip (DAVIS: `JPEGImages/480p/<clip>/00000.jpg ...`), its images found
recursively in natural path order, as an image pack finds a class's. Videos are probed here,
once, for their frame count and rate (`video.probe_video`: a demux, no decoding), so the plan
lists every frame before any is decoded; a video that cannot be read is reported in `skipped`
like an unreadable image. Archives are listed by the image pack's own listing (`archive.py`),
so a clip pack read in place is byte-identical to one of the extracted folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...core import presets
from ...core.constants import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from ...core.errors import Arg, ArgumentError, ImageDecodeError, SourceError
from ...core.packpath import tilde_hint
from ..pixels.video import probe_video
from ..pixels.videofile import open_video

# the archive listing's own parts: a clip pack lists an archive as an image pack does
from ..sources.archive import MemberReader, PackInput, _compressed, is_archive
from ..sources.archivelist import extracted_path as _norm
from ..sources.archivelist import list_tar as _list_tar
from ..sources.archivelist import list_zip as _list_zip
from ..sources.scanning import natural_key, path_key, refuse_pack_source, walk


def is_video_name(name: str) -> bool:
    """True when `name` has one of the accepted video extensions, in any letter case."""
    return os.path.splitext(name)[1].lower() in VIDEO_EXTENSIONS


def _is_clip_file(name: str) -> bool:
    ext = os.path.splitext(name)[1].lower()
    return ext in VIDEO_EXTENSIONS or ext in IMAGE_EXTENSIONS


@dataclass(frozen=True)
class FoundClip:
    """One clip of the source.

    Attributes:
        name: the video file's name, or the frame folder's (relative to SRC: a top-level name).
        video: whether it is a video file (else a folder of frames).
        fps: frames per second of the source (0: unknown, as for every frame folder).
        total: the frames it holds (a video's packets; a folder's images).
        frames: a frame folder's images, relative to SRC, in play order (empty for a video).
    """

    name: str
    video: bool
    fps: float
    total: int
    frames: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClipScan:
    """What `find_clips` found: the clips in natural order of their names, and the entries
    not packed (`{"path", "reason"}`, in natural path order)."""

    clips: list[FoundClip]
    skipped: list[dict[str, str]] = field(default_factory=list)


def _no_clips(label: str) -> SourceError:
    return SourceError(
        f"no clips found in {label}: a clip pack is made of the video files "
        f"({', '.join(VIDEO_EXTENSIONS)}) directly in SRC, or of its folders of frames (one "
        "folder of images per clip, e.g. DAVIS's JPEGImages/480p)"
    )


def _group(files: list[str]) -> tuple[list[str], dict[str, list[str]], list[dict[str, str]]]:
    """Videos directly in SRC, frame folders (name -> the images directly in it), and the
    files that are neither (reported)."""
    videos: list[str] = []
    folders: dict[str, list[str]] = {}
    skipped: list[dict[str, str]] = []
    for rel in files:
        parts = rel.split("/")
        if is_video_name(rel) and len(parts) == 1:
            videos.append(rel)
        elif is_video_name(rel):
            skipped.append({"path": rel, "reason": _NESTED_VIDEO})
        elif len(parts) == 2:
            folders.setdefault(parts[0], []).append(rel)
        elif len(parts) == 1:
            skipped.append({"path": rel, "reason": _LOOSE})
        else:
            skipped.append({"path": rel, "reason": f"{_NESTED} ({parts[0]}/{parts[1]}/)"})
    return videos, folders, skipped


_NESTED_VIDEO = "a video inside a folder: only the video files directly in SRC are clips"
_LOOSE = "an image directly in SRC: a clip's frames go in a folder of their own"
_NESTED = "an image in a folder inside a clip's folder: a clip's frames lie directly in it"


def _too_high(label: str, skipped: list[dict[str, str]]) -> SourceError | None:
    """The error of a SRC one level above its frame folders (DAVIS's `JPEGImages` instead of
    `JPEGImages/480p`): only images two folders down were found."""
    nested = [s["path"] for s in skipped if s["reason"].startswith(_NESTED)]
    if not nested:
        return None
    top = nested[0].split("/")[0]
    return SourceError(
        f"no clips found in {label}, but folders of frames one level down ({top}/"
        f"{nested[0].split('/')[1]}/, ...): pack its folder {top}/ instead (as SRC, or as ",
        Arg("within"), " of an archive): a clip's frames lie directly in its folder",
    )  # fmt: skip


def _list(src: str, within: str | None) -> tuple[PackInput, list[str], list[dict[str, str]]]:
    """The source and its image and video files (relative), with the entries reported."""
    if os.path.isfile(src) and not is_archive(src):
        raise SourceError(
            f"source must be a folder of videos or of frame folders, got a file: {src} (an "
            f"archive of one is read when its name ends in .tar or .zip)"
        )
    if not os.path.isfile(src):
        if within is not None:
            raise ArgumentError(Arg("within"), " picks a folder inside an archive; SRC is not one")
        root = Path(src)
        refuse_pack_source(root)
        if not root.is_dir():
            raise SourceError(f"source folder not found: {src}{tilde_hint(src)}")
        try:
            files, skipped = walk(root, _is_clip_file)
        except OSError as exc:
            raise SourceError(f"cannot read source folder {src}: {exc.strerror}") from exc
        return PackInput(src, MemberReader(src, "folder")), files, skipped
    return _members(src, within)


def _members(path: str, within: str | None) -> tuple[PackInput, list[str], list[dict[str, str]]]:
    """A plain tar's or a zip's videos and images under `within`, listed by the image pack's
    own listing (`archive.py`), the source that reads them and the entries reported.

    Raises:
        SourceError: as `open_source`, and for a compressed tar (no random access).
    """
    rel = _norm(within or "")
    if rel is None:
        raise ValueError(f"within must be a relative path inside the archive, got {within!r}")
    label = f"{path}:{rel}" if rel else path
    if path.lower().endswith(".zip"):
        listing, kind = _list_zip(path, rel, _is_clip_file), "zip"
    elif _compressed(path):
        raise SourceError(
            f"{path} is compressed: videos and frames are read in place from a plain .tar or "
            "a .zip; decompress it first (gunzip)"
        )
    else:
        listing, kind = _list_tar(path, rel, False, _is_clip_file), "raw"
    full = os.path.abspath(path)
    source = PackInput(label, MemberReader(full, kind), dict(listing.images), full)
    if listing.found and not listing.images:  # nothing to read: the caller says what it wants
        return source, [], [{"path": p, "reason": r} for p, r in listing.skipped.items()]
    found = listing.result(label, "none", within is not None)
    return source, [p for p, _ in found.items], found.skipped


def find_clips(
    src: str | os.PathLike,
    within: str | None = None,
    clip_list: str | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> tuple[PackInput, ClipScan]:
    """List the clips of SRC: its video files (probed) and its frame folders.

    Args:
        src: the folder, or a .tar / .zip archive of one.
        within: the folder inside an archive that holds the clips, as for an image pack.
        clip_list: only the clips of this benchmark list (`core/presets.py`), in its order
            (by name, or name without extension); a clip of it not in SRC is a `SourceError`.
        progress: called with a video's name and the bytes read of it while a long probe runs.

    Raises:
        ValueError: `within` with a folder, or not a relative path.
        SourceError: SRC missing, a file that is not an archive, a compressed tar, no clips,
            or no clip that can be read.
    """
    source, files, skipped = _list(str(src), within)
    videos, folders, more = _group(files)
    skipped += more
    if clip_list is not None:  # before probing: only the list's videos are opened
        names = videos + list(folders)
        keep = [names[i] for i in presets.select_clips(clip_list, names, source.label, SourceError)]
        videos = [n for n in keep if n in set(videos)]
        folders = {n: folders[n] for n in keep if n in folders}
    clips: list[FoundClip] = []
    for name in videos:
        try:
            info = probe_video(open_video(source.reader, name, source.refs.get(name)), progress)
        except ImageDecodeError as exc:
            skipped.append({"path": name, "reason": exc.reason})
            continue
        clips.append(FoundClip(name, True, info.fps, info.frames))
    for name, frames in folders.items():
        frames.sort(key=path_key)
        clips.append(FoundClip(name, False, 0.0, len(frames), tuple(frames)))
    skipped.sort(key=lambda s: path_key(s["path"]))
    if not clips:
        if not skipped:
            raise _no_clips(source.label)
        raise _too_high(source.label, skipped) or _no_readable(source.label, skipped)
    if clip_list is None:
        clips.sort(key=lambda c: natural_key(c.name))
    else:  # the list's order
        rank = {n: i for i, n in enumerate(keep)}
        clips.sort(key=lambda c: rank[c.name])
    return source, ClipScan(clips, skipped)


def _no_readable(label: str, skipped: list[dict[str, str]]) -> SourceError:
    first = skipped[0]
    return SourceError(
        f"no readable clip in {label}: all {len(skipped)} entries were skipped "
        f"(first: {first['path']}: {first['reason']}); nothing was packed"
    )

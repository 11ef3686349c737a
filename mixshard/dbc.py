"""A drop-in for DBC's natural-video background (deep_bisim4control's `dmc2gym`,
`natural_imgsource.RandomVideoSource`), its frames from a clip pack.

DBC (`--img_source video`) decodes and resizes a shuffled list of videos into memory when the
environment is made, draws one offset, and each observation shows the next frame where blue
dominates (its loading order and draws are listed in docs/migrating.md, "DBC's video source").

`RandomVideoSource` takes the same arguments, makes the same draws of python's and numpy's
global generators in the same order, and plays the same frames, read from a clip pack of the
videos instead of decoded (`make dbc-videos`), each file of the list found among the pack's
clips by its path. `arr` is uint8 (DBC's float64 is 8x the memory); `get_image` returns
float64, as DBC's. docs/migrating.md has the one line, the packing and how the grey levels
compare with DBC's.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .core.clips import Clip
from .core.constants import RESAMPLE_MODES
from .core.errors import ManifestError, MixshardError
from .datasets import pack_folder
from .reading.buffers import read_images_into
from .reading.source import resolve_source
from .writing.pixels.image import grey_pixels

DATASET = "dbc-video"  # the pack's folder in $MIXSHARD_DATA (or dbc-video-<size>)
DBC_RESAMPLE = RESAMPLE_MODES[1]  # cv2.resize's bilinear: half-pixel centres, no antialias


class RandomVideoSource:
    """DBC's `RandomVideoSource(shape, filelist, total_frames=None, grayscale=False)`, its
    frames from a clip pack.

    Args:
        shape: `(height, width)` of the observations (DBC's `shape2d`).
        filelist: the video files (DBC's glob of `resource_files`); shuffled in place, as
            DBC's are.
        total_frames: frames to load (DBC's `--total_frames`); None or 0: every frame of every
            file.
        grayscale: grey `(h, w, 1)` frames (DBC's dmc2gym always asks for them), else RGB.
        pack: the clip pack of the videos; default `$MIXSHARD_DATA/dbc-video` (or
            `dbc-video-<size>` for observations of another size than 84).

    Raises:
        MixshardError: no pack, an image pack, a pack of another frame size than `shape`, one
            made with other frames than each video's every frame, or files of `filelist` that
            are not among its clips (each named).
    """

    def __init__(
        self,
        shape: Sequence[int],
        filelist: list[str],
        total_frames: int | None = None,
        grayscale: bool = False,
        *,
        pack: str | os.PathLike | None = None,
    ) -> None:
        self.grayscale = grayscale
        self.total_frames = total_frames
        self.shape = shape
        self.filelist = filelist
        self._open(pack)
        self.build_arr()
        self.current_idx = 0
        self.reset()

    def _open(self, pack: str | os.PathLike | None) -> None:
        size = (int(self.shape[0]), int(self.shape[1]))
        folder = pack_folder(DATASET, size) if pack is None else Path(pack)
        source = resolve_source(folder)
        _check_pack(source.manifest, str(source.folder), size)
        clips = source.manifest.clips or ()
        _check_files(self.filelist, clips, str(source.folder))
        self._by_file = {f: _clip_of(f, clips) for f in self.filelist}
        self._pack = source.open_pack()
        self._size = source.manifest.size
        self._grey = bool(source.manifest.options.get("grey"))
        if self._grey and not self.grayscale:
            raise MixshardError(
                f"{source.folder} holds grey frames (packed with grey=True) and grayscale=False "
                "asks for colour: pack the videos without --grey"
            )

    def _frames(self, fname: str) -> np.ndarray:
        """The frames of `fname` as DBC keeps them: uint8 `(n, h, w, 1)` grey, or RGB."""
        clip = self._by_file[fname]
        rgb = np.empty((clip.count, 3, self._size, self._size), np.uint8)
        numbers = np.arange(clip.start, clip.start + clip.count)
        read_images_into(self._pack, numbers, rgb, f"{fname}: its clip holds a damaged block")
        if self._grey:  # the grey in every channel
            return np.ascontiguousarray(rgb[:, :1].transpose(0, 2, 3, 1))
        return grey(rgb) if self.grayscale else np.ascontiguousarray(rgb.transpose(0, 2, 3, 1))

    def build_arr(self) -> None:
        """DBC's loading order (see the module docstring), from the pack."""
        if not self.total_frames:
            random.shuffle(self.filelist)
            parts = [self._frames(f) for f in self.filelist]
            self.arr = np.concatenate(parts) if parts else self._empty(0)
            self.total_frames = len(self.arr)
            return
        self.arr = self._empty(self.total_frames)
        filled, file_i = 0, 0
        while filled < self.total_frames:
            if file_i % len(self.filelist) == 0:
                random.shuffle(self.filelist)
            file_i += 1
            frames = self._frames(self.filelist[file_i % len(self.filelist)])
            take = min(len(frames), self.total_frames - filled)
            self.arr[filled : filled + take] = frames[:take]
            filled += take

    def _empty(self, n: int) -> np.ndarray:
        return np.zeros((n, self._size, self._size, 1 if self.grayscale else 3), np.uint8)

    def reset(self) -> None:
        """DBC's draw of the first frame (numpy's global generator)."""
        self._loc = np.random.randint(0, len(self.arr))  # total_frames

    def get_image(self) -> np.ndarray:
        """The next frame, float64 `(h, w, 1)` (grey) or `(h, w, 3)`, as DBC's."""
        img = self.arr[self._loc % len(self.arr)].astype(np.float64)
        self._loc += 1
        return img


def grey(rgb: np.ndarray) -> np.ndarray:
    """uint8 `(n, 3, h, w)` RGB -> uint8 `(n, h, w, 1)` grey: BT.601's weights, rounded."""
    return np.ascontiguousarray(grey_pixels(rgb)[:, :1].transpose(0, 2, 3, 1))


def _check_pack(manifest: Any, where: str, size: tuple[int, int]) -> None:
    """The pack holds each video's every frame at `size`; a warning for PIL's filter."""
    if manifest.clips is None:
        raise ManifestError(
            f"{where} is an image pack, not a clip pack; pack DBC's videos with clips=True "
            f"(make dbc-videos SRC=<videos> ...)"
        )
    if (manifest.size, manifest.size) != size:
        square = "" if size[0] == size[1] else "; packs are square: observations must be too"
        raise MixshardError(
            f"{where} holds {manifest.size}x{manifest.size} frames, DBC's background is "
            f"{size[0]}x{size[1]} (height x width): pack the videos at that size (--size "
            f"{size[0]}){square}"
        )
    o = manifest.options
    if o.get("every", 1) != 1 or o.get("max_frames") is not None:
        raise MixshardError(
            f"{where} was packed with every={o.get('every')}, max_frames={o.get('max_frames')}: "
            "DBC reads every frame of each video; pack them all (no --every, --max-frames)"
        )
    if o.get("resample") != DBC_RESAMPLE:
        warnings.warn(
            f"{where} was resized with {o.get('resample')!r}, not cv2.resize's bilinear "
            f"({DBC_RESAMPLE!r}, as DBC resizes): pack it again with --resample {DBC_RESAMPLE}",
            RuntimeWarning,
            stacklevel=4,
        )


def _matches(fname: str, clips: Sequence[Clip]) -> list[Clip]:
    """The clips whose name (a path relative to the pack's source) ends `fname`'s path."""
    path = Path(os.path.abspath(fname)).as_posix()
    return [c for c in clips if path == c.name or path.endswith("/" + c.name)]


def _check_files(filelist: list[str], clips: Sequence[Clip], where: str) -> None:
    """`ValueError` for no files; `MixshardError` naming the files no clip matches."""
    if not filelist:
        raise ValueError("filelist is empty: DBC's resource_files matched no file")
    missing = [f for f in filelist if not _matches(f, clips)]
    if missing:
        more = f", ... ({len(missing)} in all)" if len(missing) > 5 else ""
        raise MixshardError(
            f"{where} holds no clip for {', '.join(missing[:5])}{more}: pack the folder of "
            "DBC's resource_files (make dbc-videos SRC=<videos> ...)"
        )


def _clip_of(fname: str, clips: Sequence[Clip]) -> Clip:
    """The one clip of `fname` (the longest name when several end its path)."""
    return max(_matches(fname, clips), key=lambda c: len(c.name))

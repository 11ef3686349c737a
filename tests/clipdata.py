"""Tiny video clips and frame folders for the clip pack tests, made with PyAV in tmp_path.

Every frame's colour says which clip and which frame it is: red `10 + 8 t` (frame `t`), green
`60 + 50 c` (clip `c`), blue 128, flat, so that H.264 keeps it within a few levels and play
order can be asserted frame by frame.
"""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import av
import numpy as np
from PIL import Image

# (file name, clip number in natural order, frames): natural order is video1, video2, video10
VIDEOS = (("video2.mp4", 1, 12), ("video10.mp4", 2, 20), ("video1.mp4", 0, 15))
FPS = 10
WIDTH, HEIGHT = 64, 48  # not square: the centre crop is exercised
TOLERANCE = 6  # levels H.264 may move a flat colour


def colour(clip: int, t: int) -> tuple[int, int, int]:
    return (10 + 8 * t, 60 + 50 * clip, 128)


def frame(clip: int, t: int, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """Frame `t` of clip `clip`, RGB `(height, width, 3)`."""
    return np.broadcast_to(np.uint8(colour(clip, t)), (height, width, 3)).copy()


def make_video(path: Path, clip: int, frames: int, options: dict[str, str] | None = None) -> Path:
    """An H.264 mp4 of `frames` frames of clip `clip` at `FPS`; `options` are the muxer's
    (`{"movflags": "faststart"}` puts the index, with its frame count, before the frames)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", options=options or {}) as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for t in range(frames):
            image = av.VideoFrame.from_ndarray(frame(clip, t), format="rgb24")
            for packet in stream.encode(image):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def make_videos(root: Path) -> Path:
    """`VIDEOS` in `root` (faststart, so that cutting one short leaves its header)."""
    for name, clip, n in VIDEOS:
        make_video(root / name, clip, n, {"movflags": "faststart"})
    return root


# (folder, clip number in natural order, frames)
FOLDERS = (("bear", 0, 7), ("car10", 2, 5), ("car2", 1, 6))


def make_frame_folders(root: Path) -> Path:
    """DAVIS-like frame folders (`bear/00000.png ...`) of noisy PNG frames; frame `t`'s top-left
    pixel is `t`, so play order shows."""
    rng = np.random.default_rng(0)
    for name, _, n in FOLDERS:
        (root / name).mkdir(parents=True, exist_ok=True)
        for t in range(n):
            pixels = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
            pixels[0, 0] = t
            Image.fromarray(pixels).save(root / name / f"{t:05d}.png")
    return root


def tar_of(folder: Path, dst: Path, top: str) -> Path:
    """A plain tar of `folder`'s files under the folder `top/`."""
    with tarfile.open(dst, "w") as tf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                tf.add(p, f"{top}/{p.relative_to(folder).as_posix()}")
    return dst


def zip_of(folder: Path, dst: Path, top: str) -> Path:
    """A zip of `folder`'s files under the folder `top/`."""
    with zipfile.ZipFile(dst, "w") as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, f"{top}/{p.relative_to(folder).as_posix()}")
    return dst

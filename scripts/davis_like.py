"""A DAVIS-shaped frame tree from real videos, to test the Distracting Control Suite's
backgrounds with when DAVIS 2017 is not at hand.

DAVIS 2017's 480p frames are `JPEGImages/480p/<clip>/00000.jpg ...`, 854 x 480 px, 25 to 104
frames a clip. This decodes the first frames of each video in VIDEOS (PyAV), resizes them to
854 x 480 (PIL bicubic) and writes them as JPEGs (quality 90) under the first DAVIS 2017
training clips' names with DAVIS's own lengths (`bear` 82 frames, `bmx-bumps` 90, ...), so
that DCS's `dataset_videos="train"` with `num_videos=4` or `8` (easy, medium) finds them:

    python scripts/davis_like.py ../shared/real-videos /tmp/davis-like
    mixshard pack /tmp/davis-like/JPEGImages/480p /tmp/davis-800 --clips --crop full \\
        --size 800 --resample bilinear-no-antialias
"""

from __future__ import annotations

import argparse
from pathlib import Path

import av
from PIL import Image

# the first DAVIS 2017 training clips and their frame counts
CLIPS = (
    ("bear", 82), ("bmx-bumps", 90), ("boat", 75), ("boxing-fisheye", 87),
    ("breakdance-flare", 71), ("bus", 80), ("car-turn", 80), ("cat-girl", 89),
    ("classic-car", 63), ("color-run", 84),
)  # fmt: skip
WIDTH, HEIGHT = 854, 480


def write_clip(video: Path, folder: Path, frames: int) -> int:
    """The first `frames` frames of `video` as DAVIS-shaped JPEGs in `folder`; how many."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    with av.open(str(video)) as container:
        for frame in container.decode(video=0):
            image = frame.to_image().resize((WIDTH, HEIGHT), Image.BICUBIC)
            image.save(folder / f"{n:05d}.jpg", quality=90)
            n += 1
            if n == frames:
                break
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("videos", type=Path, help="a folder of videos (at least 10)")
    parser.add_argument("out", type=Path, help="the tree's root (JPEGImages/480p/... below)")
    args = parser.parse_args()
    videos = sorted(p for p in args.videos.iterdir() if p.suffix in (".mp4", ".avi", ".mov"))
    if len(videos) < len(CLIPS):
        raise SystemExit(f"{args.videos} holds {len(videos)} videos; {len(CLIPS)} are needed")
    root = args.out / "JPEGImages" / "480p"
    for (name, frames), video in zip(CLIPS, videos):
        got = write_clip(video, root / name, frames)
        print(f"{name}: {got} frames of {video.name}")


if __name__ == "__main__":
    main()

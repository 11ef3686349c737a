"""How far `compat.VideoWrapper`'s backgrounds are from DMC-GB's, on real clips.

DMC-GB decodes each mp4 (OpenCV) and resizes the frame of each step to the observation with
`F.interpolate(bilinear, align_corners=False)` on 0..1 floats, truncated back to uint8. The
drop-in plays frames a clip pack resized once (`mixshard pack --clips --crop full --resample
bilinear-no-antialias`, as `make dmcgb-videos` packs; `--resample bilinear`: PIL's antialiased
filter, as packs were made before issue 48). This script packs the clips, decodes them again
with PyAV (the FFmpeg decoder OpenCV wraps; cv2 is not a dependency) and reports, per clip and
overall, the mean and the largest difference in levels, the share of channel values within 1
level and the share more than 8 levels apart.

    python scripts/bench_dmcgb_fidelity.py ../shared/real-videos [--size 84] [--resample bilinear]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import av
import numpy as np
import torch
import torch.nn.functional as F

import mixshard


def dmcgb_frames(path: Path, size: int) -> np.ndarray:
    """A clip's frames as DMC-GB's `VideoWrapper` shows them: `(n, 3, size, size)` uint8."""
    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    rgb = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).float() / 255.0
    out = F.interpolate(rgb, size=(size, size), mode="bilinear", align_corners=False)
    return (out * 255.0).byte().numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("videos", type=Path, help="a folder of .mp4 clips (DMC-GB's video_hard)")
    parser.add_argument("--size", type=int, default=84)
    parser.add_argument("--resample", default="bilinear-no-antialias")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pack"
        mixshard.pack(
            args.videos, out, clips=True, crop="full", size=args.size, resample=args.resample
        )
        source = mixshard.ShardStream(out, 1, shuffle=False)
        packed = np.concatenate([b.numpy() for b in source])
        clips = mixshard.Manifest.load(out).clips or ()
    print("| clip | frames | mean abs difference | max | within 1 level | > 8 levels |")
    print("|---|---|---|---|---|---|")
    diffs = []
    for clip in clips:
        ref = dmcgb_frames(args.videos / clip.name, args.size)
        ours = packed[clip.start : clip.start + clip.count]
        n = min(len(ref), len(ours))
        d = np.abs(ours[:n].astype(np.int16) - ref[:n].astype(np.int16))
        diffs.append(d)
        print(
            f"| {clip.name} | {n} | {d.mean():.2f} | {d.max()} | {(d <= 1).mean():.4%} "
            f"| {(d > 8).mean():.2%} |"
        )
    d, frames = np.concatenate([x.ravel() for x in diffs]), sum(len(x) for x in diffs)
    print(
        f"| all | {frames} | {d.mean():.2f} | {d.max()} | {(d <= 1).mean():.4%} "
        f"| {(d > 8).mean():.2%} |"
    )


if __name__ == "__main__":
    main()

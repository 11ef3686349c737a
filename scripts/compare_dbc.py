"""mixshard's `RandomVideoSource` against DBC's own, in DBC's own dmc2gym, on a whole episode.

DBC (deep_bisim4control) composites grey natural video behind dm_control's renders in its
`dmc2gym.wrappers.DMCWrapper` (`img_source="video"`): `natural_imgsource.RandomVideoSource`
loads `total_frames` frames when the environment is made, and `_get_obs` pastes the next one
where blue exceeds green and red. This script runs one episode of DBC's own `DMCWrapper` (its
`local_dm_control_suite`, seeded random actions) twice per mode: with DBC's `RandomVideoSource`,
then with `mixshard.compat.RandomVideoSource` put in its place (what the one-line change does),
its clips from a pack of the same videos (`make dbc-videos`: `--clips --crop full --grey
--resample bilinear-no-antialias`; `--rgb`: without `--grey`, the grey made from RGB),
python's and numpy's generators seeded alike before each. Printed per mode: the observations'
share of values equal and within 1 level, the largest difference, and the seconds each took to
make the environment (DBC loads its frames then).

scikit-video reads a video by running the `ffmpeg` program, which this machine lacks, so DBC's
`skvideo.io.vread` is replaced, in two modes: `frames` hands it the grey frames mixshard plays
(the pack's, made grey as `RandomVideoSource` makes them; DBC's `cv2.resize` to their own size
keeps them), so that only DBC's order, draws, schedule and mask are compared (goal: identical);
`decoded` hands it each video decoded to grey by PyAV (libswscale's grey, as `ffmpeg -pix_fmt
gray` converts), so DBC's `cv2.resize` runs on full frames, which measures the grey and the
resize. Not a CI test: it needs DBC's code, dm_control, OpenCV, gym 0.23 and scikit-video.

    git clone https://github.com/facebookresearch/deep_bisim4control /tmp/dbc
    pip install "gym==0.23.1" opencv-python-headless scikit-video six tqdm  # beside dm_control
    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONPATH=. python scripts/compare_dbc.py \\
        --dbc /tmp/dbc --videos ../shared/real-videos [--steps 1000] [--total-frames 1000]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torchvision  # noqa: F401  # before dm_control: triton's import crashed after it here

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # mixshard from this checkout

import mixshard  # noqa: E402
from mixshard import dbc  # noqa: E402
from mixshard.compat import RandomVideoSource  # noqa: E402
from mixshard.reading.source import resolve_source  # noqa: E402


def dbc_modules(checkout: Path):
    """DBC's `dmc2gym.wrappers` and `natural_imgsource`, from the checkout, on today's numpy
    (`np.int`, removed in numpy 1.24, is `int`)."""
    np.int = int  # type: ignore[attr-defined]
    sys.path.insert(0, str(checkout))
    import dmc2gym.natural_imgsource as natural
    import dmc2gym.wrappers as wrappers

    return wrappers, natural


def pyav_grey(fname: str, outputdict=None) -> np.ndarray:
    """`skvideo.io.vread(fname, outputdict={"-pix_fmt": "gray"})`: `(n, H, W, 1)` uint8, by
    libswscale's grey (FFmpeg's, the full-range Y plane) through PyAV."""
    import av

    with av.open(fname) as container:
        return np.stack([f.to_ndarray(format="gray") for f in container.decode(video=0)])[..., None]


def packed_grey(pack: Path):
    """A `vread` that hands out a video's frames as the pack holds them, grey as
    `RandomVideoSource` takes them (a grey pack's first channel, else `dbc.grey`)."""
    source = resolve_source(pack)
    clips = {c.name: c for c in source.manifest.clips or ()}
    opened = source.open_pack()
    size = source.manifest.size

    def vread(fname: str, outputdict=None) -> np.ndarray:
        clip = clips[os.path.basename(fname)]
        rgb = np.empty((clip.count, 3, size, size), np.uint8)
        opened.read_images(np.arange(clip.start, clip.start + clip.count), rgb)
        if source.manifest.options.get("grey"):
            return np.ascontiguousarray(rgb[:, :1].transpose(0, 2, 3, 1))
        return dbc.grey(rgb)

    return vread


def episode(wrappers, args, files: str) -> tuple[float, list[np.ndarray]]:
    """Seconds to make DBC's environment, and its observations over one episode."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    t0 = time.perf_counter()
    env = wrappers.DMCWrapper(
        args.domain, args.task, files, "video", args.total_frames,
        task_kwargs={"random": args.seed}, visualize_reward=False, from_pixels=True,
        height=args.size, width=args.size, frame_skip=args.action_repeat,
    )  # fmt: skip
    made = time.perf_counter() - t0
    actions = np.random.RandomState(args.seed + 1)  # not numpy's global generator
    shape = env.action_space.shape
    obs, done = [env.reset()], False
    while not done and len(obs) <= args.steps:
        o, _, done, _ = env.step(actions.uniform(-1, 1, shape).astype(np.float32))
        obs.append(o)
    return made, obs


def compare(wrappers, natural, args, files: str) -> tuple:
    """DBC's episode with its own source, then with mixshard's in its place."""
    own = natural.RandomVideoSource
    theirs = episode(wrappers, args, files)
    natural.RandomVideoSource = RandomVideoSource  # the one-line change
    try:
        mine = episode(wrappers, args, files)
    finally:
        natural.RandomVideoSource = own
    return theirs, mine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dbc", type=Path, required=True, help="DBC's checkout")
    parser.add_argument("--videos", type=Path, required=True, help="a folder of .mp4 clips")
    parser.add_argument("--domain", default="cheetah")
    parser.add_argument("--task", default="run")
    parser.add_argument("--size", type=int, default=84)
    parser.add_argument("--total-frames", type=int, default=1000)
    parser.add_argument("--action-repeat", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rgb", action="store_true", help="pack RGB (no --grey)")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="dbc-compare-"))
    mixshard.pack(args.videos, data / "dbc-video", clips=True, crop="full", size=args.size,
                  resample="bilinear-no-antialias", grey=not args.rgb)  # fmt: skip
    os.environ["MIXSHARD_DATA"] = str(data)
    wrappers, natural = dbc_modules(args.dbc.resolve())
    import skvideo.io

    files = str(args.videos.resolve() / "*.mp4")
    print(f"{args.domain}_{args.task}, {args.size} px, total_frames {args.total_frames}, "
          f"seed {args.seed}, videos {files}, {'RGB' if args.rgb else 'grey'} pack")  # fmt: skip
    print("| vread gives | steps | values equal | within 1 level | max difference "
          "| DBC's env made | mixshard's |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for mode, vread in (("frames", packed_grey(data / "dbc-video")), ("decoded", pyav_grey)):
        skvideo.io.vread = vread
        (t_theirs, theirs), (t_mine, mine) = compare(wrappers, natural, args, files)
        d = np.abs(np.stack(mine).astype(np.int16) - np.stack(theirs).astype(np.int16))
        print(f"| {mode} | {len(theirs) - 1} | {(d == 0).mean():.4%} | {(d <= 1).mean():.4%} "
              f"| {d.max()} | {t_theirs:.2f} s | {t_mine:.2f} s |")  # fmt: skip


if __name__ == "__main__":
    main()

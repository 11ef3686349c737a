"""mixshard's DMC-GB `VideoWrapper` against DMC-GB's own, on whole episodes of a real task.

Runs evaluation episodes of a dm_control task (walker_walk by default: 1000 steps at action
repeat 4, 84 px, seeded random actions) through DMControl-GB's own `make_env(..., mode)` for
`video_easy` and `video_hard`: its dmc2gym, its green sky (`ColorWrapper`), its `VideoWrapper`
(OpenCV decode of the mp4 at each reset, `_interpolate_bg`, `do_green_screen`). Every frame its
`VideoWrapper` gets from the renderer is kept with what it returned; the same rendered frames
then go through `mixshard.compat.VideoWrapper` (the same clip order: one wrapper over all the
episodes), its clips from clip packs made as `make dmcgb-videos` makes them (`--clips --crop
full --resample bilinear-no-antialias`) of the very files DMC-GB read. Printed per mode: the
share of channel values and of pixels within 1 level of DMC-GB's, the share equal, the largest
difference (goal: >= 99.9% within 1 level). Not a CI test: it needs DMC-GB's code, dm_control,
OpenCV and a renderer, all kept out of the project.

    (the venv and DMC-GB checkout of scripts/bench_dmcgb_env.py, with opencv-python-headless)
    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONPATH=. python scripts/compare_dmcgb.py \\
        --dmcgb /tmp/dmcgb [--episodes 2] [--size 84] [--max-frames 260] [--resample bilinear]

DMC-GB reads `src/env/data/<mode>/video<i>.mp4` from the working directory; the script runs in
a temporary folder of links to the checkout's files. A clip the checkout lacks (a shallow copy
without some of the large mp4s) is linked to `video_hard/video<i>.mp4` for both wrappers, and
named. `--max-frames` packs only the first frames of each clip, enough for an episode (251
frames are shown: the reset's and one per step), to keep the pack short.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torchvision  # noqa: F401  # before dm_control: triton's import crashed after it here

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # mixshard from this checkout

from bench_dmcgb_env import dmcgb_modules  # noqa: E402

import mixshard  # noqa: E402
from mixshard.compat import VideoWrapper  # noqa: E402

COUNTS = {"video_easy": 10, "video_hard": 100}


def run_folder(checkout: Path, modes: list[str]) -> tuple[Path, list[str]]:
    """A folder with DMC-GB's `src/env/data/<mode>/video<i>.mp4` as links to the checkout's
    files, and the clips linked to a stand-in (`video_hard/video<i>.mp4`) for want of theirs."""
    run = Path(tempfile.mkdtemp(prefix="dmcgb-compare-"))
    data = checkout / "src/env/data"
    stand_ins = []
    for mode in modes:
        (run / "src/env/data" / mode).mkdir(parents=True)
        for i in range(COUNTS[mode]):
            own = data / mode / f"video{i}.mp4"
            if not own.is_file():
                stand_ins.append(f"{mode}/video{i}.mp4")
                own = data / "video_hard" / f"video{i}.mp4"
            (run / "src/env/data" / mode / f"video{i}.mp4").symlink_to(own.resolve())
    return run, stand_ins


def pack_modes(run: Path, modes: list[str], args) -> Path:
    """`make dmcgb-videos`' packs of the run folder's clips, in `run/packs`."""
    packs = run / "packs"
    for mode in modes:
        mixshard.pack(
            run / "src/env/data" / mode, packs / f"dmcgb-{mode}", clips=True, crop="full",
            size=args.size, resample=args.resample, max_frames=args.max_frames,
        )  # fmt: skip
    return packs


class Replay:
    """A stand-in for dmc2gym's environment that hands out frames already rendered."""

    def __init__(self, frames: list[np.ndarray], size: int) -> None:
        self.frames, self.at = frames, 0
        self.observation_space = type("Box", (), {"shape": (3, size, size)})()
        self._max_episode_steps = len(frames) - 1

    def reset(self) -> np.ndarray:
        self.at = 1
        return self.frames[0]

    def step(self, action):
        self.at += 1
        return self.frames[self.at - 1], 0.0, False, {}


def dmcgb_episodes(wrappers, mode: str, args) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """Per episode, every (rendered frame, DMC-GB's output) its `VideoWrapper` made."""
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    own = wrappers.VideoWrapper._greenscreen

    def keep(self, obs):
        out = own(self, obs)
        seen.append((obs.copy(), out.copy()))
        return out

    wrappers.VideoWrapper._greenscreen = keep
    try:
        env = wrappers.make_env(args.domain, args.task, seed=args.seed, image_size=args.size,
                                mode=mode)  # fmt: skip
        rng = np.random.RandomState(args.seed)
        episodes = []
        for _ in range(args.episodes):
            seen.clear()
            env.reset()
            done = False
            while not done:
                action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
                _, _, done, _ = env.step(action)
            episodes.append(list(seen))
        return episodes
    finally:
        wrappers.VideoWrapper._greenscreen = own


def ours(episodes: list[list[tuple[np.ndarray, np.ndarray]]], mode: str, size: int):
    """mixshard's outputs of the same rendered frames, one wrapper over all the episodes."""
    replay = Replay([], size)
    wrapper = VideoWrapper(replay, mode, seed=0)
    out = []
    for frames in episodes:
        replay.frames = [f for f, _ in frames]
        got = [wrapper.reset()] + [wrapper.step(None)[0] for _ in frames[1:]]
        out.append(got)
    return out


def report(mode: str, episodes, outputs) -> None:
    theirs = np.stack([o for frames in episodes for _, o in frames]).astype(np.int16)
    mine = np.stack([o for frames in outputs for o in frames]).astype(np.int16)
    d = np.abs(mine - theirs)
    within = d <= 1
    print(
        f"| {mode} | {len(episodes)} | {len(theirs)} | {within.mean():.4%} | "
        f"{within.all(axis=1).mean():.4%} | {(d == 0).mean():.2%} | {d.max()} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dmcgb", type=Path, required=True, help="DMC-GB's checkout")
    parser.add_argument("--modes", nargs="+", default=["video_easy", "video_hard"])
    parser.add_argument("--domain", default="walker")
    parser.add_argument("--task", default="walk")
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--size", type=int, default=84)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-frames", type=int, default=260)
    parser.add_argument(
        "--resample", default="bilinear-no-antialias", help="the packs' filter ('bilinear': "
        "PIL's antialiased one, as packs were made before issue 48)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    run, stand_ins = run_folder(args.dmcgb.resolve(), args.modes)
    if stand_ins:
        print(f"not in the checkout, played from video_hard instead: {', '.join(stand_ins)}")
    os.environ["MIXSHARD_DATA"] = str(pack_modes(run, args.modes, args))
    wrappers, _ = dmcgb_modules(args.dmcgb.resolve())
    os.chdir(run)  # where DMC-GB reads src/env/data
    print(f"{args.domain}_{args.task}, {args.size} px, seed {args.seed}, packs: {args.resample}")
    print("| mode | episodes | frames | values within 1 level | pixels within 1 level "
          "| values equal | max difference |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for mode in args.modes:
        episodes = dmcgb_episodes(wrappers, mode, args)
        report(mode, episodes, ours(episodes, mode, args.size))


if __name__ == "__main__":
    main()

"""DMC-GB's own video evaluation in the real environment, against mixshard's masks.

Runs one evaluation episode of walker_walk with DMControl-GB's `make_env(..., mode="video_hard")`
(its dmc2gym, `VideoWrapper`, `FrameStack` and `ColorWrapper`, dm_control rendering on the
CPU) and times, per step, rendering, physics, the video frame's resize and `do_green_screen`.
Then the episode's rendered frames go through `mixshard.masks.green_screen` and
`mixshard.composite`: the masks must be the pixels `do_green_screen` replaced on every frame
and the composited frames its output, byte for byte (the script fails otherwise), and both are
timed (goal: mask + composite >= 100x faster than `do_green_screen`). Not a CI test: it needs
DMC-GB's code and dm_control, kept outside the project.

    git clone https://github.com/nicklashansen/dmcontrol-generalization-benchmark /work/ext/dmcgb
    python3 -m venv /work/dmc-venv
    /work/dmc-venv/bin/pip install torch torchvision dm-control "mujoco==3.17.0" "gym==0.23.1" \\
        opencv-python-headless xmltodict kornia termcolor imageio
    /work/dmc-venv/bin/pip uninstall -y triton  # its import crashed beside dm_control here
    apt-get install -y libosmesa6           # for MUJOCO_GL=osmesa (or libegl1 for egl)
    MUJOCO_GL=osmesa PYTHONPATH=. /work/dmc-venv/bin/python scripts/bench_dmcgb_env.py \\
        --dmcgb /work/ext/dmcgb [--videos ../shared/real-videos] [--rounds 5]

`--videos DIR` plays the mp4s of DIR (`video_hardN.mp4` or `videoN.mp4`) instead of the
checkout's `src/env/data/video_hard` (one episode plays video 1: DMC-GB's first reset moves
its index from 0 to 1). DMC-GB was written for dm_control of 2020, gym 0.17 and numpy 1.19;
`dmcgb_modules` adapts today's to it without editing its files (numpy's removed `np.int`,
its `suite.common.settings` module loaded from the checkout, model assets as bytes, and
`suite.load`'s `setting_kwargs`, which DMC-GB always passes as None).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from benchlib import machine, table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # mixshard from this checkout

from mixshard import composite, masks  # noqa: E402

TIMES: dict[str, list[float]] = {}
FRAMES: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (rendered, background, output)


def dmcgb_modules(root: Path):
    """DMC-GB's `env.wrappers` and `dmc2gym.wrappers`, imported from the checkout `root` on
    today's dm_control (see the module docstring for the four adaptations)."""
    np.int = int  # type: ignore[attr-defined]  # dmc2gym's _spec_to_box
    import dm_control.suite as suite
    import dm_control.suite.common as common

    path = root / "src/env/dm_control/dm_control/suite/common/settings.py"
    spec = importlib.util.spec_from_file_location("dm_control.suite.common.settings", path)
    assert spec is not None and spec.loader is not None, path
    settings = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(settings)
    as_text = settings.get_model_and_assets_from_setting_kwargs

    def as_bytes(*args, **kwargs):  # mujoco 3 takes assets as bytes, DMC-GB gives str
        xml, assets = as_text(*args, **kwargs)
        return xml, {k: v.encode() if isinstance(v, str) else v for k, v in assets.items()}

    settings.get_model_and_assets_from_setting_kwargs = as_bytes
    common.settings = settings
    load = suite.load

    def load_with_settings(*args, setting_kwargs=None, **kwargs):
        if setting_kwargs is not None:
            raise NotImplementedError("today's suite.load takes no setting_kwargs")
        return load(*args, **kwargs)

    suite.load = load_with_settings
    sys.path[:0] = [str(root / "src"), str(root / "src/env/dmc2gym")]
    import dmc2gym.wrappers
    from env import wrappers

    return wrappers, dmc2gym.wrappers


def data_root(root: Path, videos: Path | None) -> Path:
    """The folder to run in: DMC-GB reads `src/env/data/video_hard/videoN.mp4` from the
    working directory. With `videos`, a temporary one of links to the mp4s there."""
    if videos is None:
        if not (root / "src/env/data/video_hard/video1.mp4").is_file():
            sys.exit(f"{root}/src/env/data/video_hard has no video1.mp4: pass --videos DIR")
        return root
    run = Path(tempfile.mkdtemp(prefix="dmcgb-run-"))
    hard = run / "src/env/data/video_hard"
    hard.mkdir(parents=True)
    for mp4 in sorted(videos.glob("*.mp4")):
        index = mp4.stem.removeprefix("video_hard").removeprefix("video")
        if index.isdigit():
            (hard / f"video{int(index)}.mp4").symlink_to(mp4.resolve())
    if not (hard / "video1.mp4").exists():
        sys.exit(f"{videos} has no video_hard1.mp4 or video1.mp4")
    return run


def timed(name: str, fn, record=None):
    """`fn` that adds its seconds per call to TIMES[name] (and hands its call to `record`)."""

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        TIMES.setdefault(name, []).append(time.perf_counter() - t0)
        if record is not None:
            record(args, out)
        return out

    return wrapper


def instrument(wrappers, dmc):
    """Time DMC-GB's parts where they are called, and keep each frame's rendered obs, resized
    background and green-screened output. Returns DMC-GB's own `do_green_screen`."""

    def keep_frame(args, out):
        FRAMES.append((args[0].copy(), args[1].copy(), out.copy()))

    own = wrappers.do_green_screen
    wrappers.do_green_screen = timed("do_green_screen", own, keep_frame)
    video = wrappers.VideoWrapper
    video._interpolate_bg = timed("resize (F.interpolate)", video._interpolate_bg)
    video._load_video = timed("video decode (cv2, at reset)", video._load_video)
    dmc.DMCWrapper.render = timed("render", dmc.DMCWrapper.render)
    return own


def run_episode(make_env, seed: int, size: int) -> tuple[float, int, list[np.ndarray]]:
    """One evaluation episode with seeded random actions: (seconds, steps, observations)."""
    env = make_env("walker", "walk", seed=seed, image_size=size, mode="video_hard")
    rng = np.random.RandomState(seed)
    shape = env.action_space.shape
    t0 = time.perf_counter()
    obs, done, steps = [np.asarray(env.reset())], False, 0
    while not done:
        action = rng.uniform(-1, 1, shape).astype(np.float32)
        o, _, done, _ = env.step(action)
        obs.append(np.asarray(o))
        steps += 1
    return time.perf_counter() - t0, steps, obs


def dmcgb_replaced(do_green_screen, rendered: np.ndarray) -> np.ndarray:
    """`(H, W)` bool: the pixels DMC-GB's own function replaces in `rendered`, found by
    handing it the background `255 - rendered` (no channel of which equals the frame's)."""
    out = do_green_screen(rendered, 255 - rendered)
    replaced = (out != rendered).all(0)
    if not (replaced | (out == rendered).all(0)).all():
        raise AssertionError("do_green_screen changed part of a pixel")
    return replaced


def check_masks(do_green_screen) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mixshard's masks and composites of every frame of the episode against DMC-GB's:
    identical or AssertionError. Returns the frames, backgrounds and masks as tensors."""
    rendered = torch.from_numpy(np.stack([f[0] for f in FRAMES]))
    backgrounds = torch.from_numpy(np.stack([f[1] for f in FRAMES]))
    outputs = torch.from_numpy(np.stack([f[2] for f in FRAMES]))
    keep = masks.green_screen(rendered)
    for i, (frame, _, _) in enumerate(FRAMES):
        expected = ~torch.from_numpy(dmcgb_replaced(do_green_screen, frame))
        if not torch.equal(keep[i, 0], expected):
            raise AssertionError(f"frame {i}: {int((keep[i, 0] != expected).sum())} pixels differ")
    if not torch.equal(composite(rendered, backgrounds, keep), outputs):
        raise AssertionError("mixshard's composite differs from do_green_screen's output")
    return rendered, backgrounds, keep


def time_steps(own_green_screen, rendered, backgrounds, rounds: int) -> dict[str, float]:
    """Median seconds per frame of DMC-GB's `do_green_screen` and of mixshard's background
    step, timed in the same rounds (interleaved, so that a busy machine slows both alike):
    frame by frame as an environment steps (one `(1, 3, H, W)` obs per call, over the
    episode's frames), and the whole episode's frames batched."""
    n = rendered.shape[0]
    pairs = [(rendered[j : j + 1], backgrounds[j : j + 1]) for j in range(n)]
    arrays = [(r[0].numpy(), b[0].numpy()) for r, b in pairs]
    every = max(1, n // 25)  # 25 frames of the episode per round for DMC-GB's slow loop

    steps = {
        "DMC-GB do_green_screen": lambda j: own_green_screen(*arrays[j]),
        "mixshard mask": lambda j: masks.green_screen(pairs[j][0]),
        "mixshard mask + composite": lambda j: composite(
            pairs[j][0], pairs[j][1], masks.green_screen(pairs[j][0])
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in steps}
    samples["mixshard mask + composite, batched"] = []
    for _ in range(rounds):
        for name, step in steps.items():
            for j in range(0, n, 1 if name.startswith("mixshard") else every):
                t0 = time.perf_counter()
                step(j)
                samples[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        composite(rendered, backgrounds, masks.green_screen(rendered))
        samples["mixshard mask + composite, batched"].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(v) for name, v in samples.items()}


# ---- the mixshard drop-in: mixshard.compat.VideoWrapper -----------------------------------
# Built by the lead after merging (issue 39, point 2). When it exists, this runs the same
# episode (same seed, same actions) with DMC-GB's `make_env` calling mixshard's VideoWrapper
# in place of its own, reads the clips from $MIXSHARD_DATA/dmcgb-video_hard, and compares the
# observations with DMC-GB's: the kept pixels (DMC-GB's masks) must be equal, and the
# background's mean and max difference (the pack's resize is not F.interpolate) are reported.
def time_dropin(wrappers, seed: int, size: int, reference: list[np.ndarray]) -> list[list]:
    from mixshard import compat

    dropin = getattr(compat, "VideoWrapper", None)
    if dropin is None or not os.environ.get("MIXSHARD_DATA"):
        why = "not built yet" if dropin is None else "MIXSHARD_DATA not set"
        return [["drop-in `mixshard.compat.VideoWrapper`", why, "", ""]]
    own, wrappers.VideoWrapper = wrappers.VideoWrapper, dropin
    try:
        seconds, steps, obs = run_episode(wrappers.make_env, seed, size)
    finally:
        wrappers.VideoWrapper = own
    # the newest frame of each stacked observation: step t's (the reset's first), whose
    # rendering (the same seed and actions render the same frames) FRAMES[t] holds
    ours = np.stack([o[-3:] for o in obs]).astype(np.int16)
    theirs = np.stack([o[-3:] for o in reference]).astype(np.int16)
    rendered = torch.from_numpy(np.stack([f[0] for f in FRAMES[: len(obs)]]))
    keep = masks.green_screen(rendered).expand(-1, 3, -1, -1).numpy()
    diff = np.abs(ours - theirs)
    if diff[keep].any():
        raise AssertionError("the drop-in changed pixels DMC-GB keeps (or rendered others)")
    shown = diff[~keep]
    level = f"background vs DMC-GB: mean {shown.mean():.2f}, max {shown.max()} levels"
    return [["drop-in `mixshard.compat.VideoWrapper`: episode", f"{seconds:.2f} s", steps, level]]


# -------------------------------------------------------------------------------------------


def report(
    times: dict[str, list[float]],
    episode: float,
    steps: int,
    ours: dict[str, float],
    dropin: list[list],
) -> str:
    """The table: DMC-GB's parts per step and per episode, mixshard's, the ratio."""
    med = {k: statistics.median(v) for k, v in times.items()}
    total = {k: sum(v) for k, v in times.items()}
    parts = sum(total.values())
    rows = [["DMC-GB episode (reset + steps), wall", f"{episode:.2f} s", steps, ""]]
    for name in (
        "render",
        "do_green_screen",
        "resize (F.interpolate)",
        "video decode (cv2, at reset)",
    ):
        rows.append(
            [
                f"DMC-GB {name}",
                f"{med[name] * 1e3:.3f} ms",
                len(times[name]),
                f"{total[name]:.2f} s per episode ({100 * total[name] / episode:.0f}%)",
            ]
        )
    rows.append(["DMC-GB physics and the rest", "", "", f"{episode - parts:.2f} s per episode"])
    theirs = ours.pop("DMC-GB do_green_screen")
    rows.append(["DMC-GB do_green_screen, timed beside mixshard's", f"{theirs * 1e3:.3f} ms", "",
                 "the baseline of the ratios below"])  # fmt: skip
    for name, sec in ours.items():
        rows.append(
            [
                f"{name}, per frame",
                f"{sec * 1e6:.1f} us",
                "",
                f"{theirs / sec:,.0f}x faster than do_green_screen",
            ]
        )
    per_step = ours["mixshard mask + composite"] * len(times["do_green_screen"])
    replaced = ("do_green_screen", "resize (F.interpolate)", "video decode (cv2, at reset)")
    swapped = episode - sum(total[name] for name in replaced) + per_step
    rows.append(
        [
            "the same episode, mask + composite in place of do_green_screen, resize, decode",
            f"{swapped:.2f} s (computed)",
            steps,
            f"render {100 * total['render'] / swapped:.0f}% of it",
        ]
    )
    return table(["what", "median per call", "calls", "note"], rows + dropin)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dmcgb", type=Path, required=True, help="a DMC-GB checkout")
    ap.add_argument("--videos", type=Path, help="a folder of video_hard mp4s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=84, help="DMC-GB's image_size")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    args = ap.parse_args()
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    torch.set_num_threads(1)  # as one environment worker would have
    root = args.dmcgb.resolve()
    wrappers, dmc = dmcgb_modules(root)
    os.chdir(data_root(root, args.videos.resolve() if args.videos else None))
    own = instrument(wrappers, dmc)
    episode, steps, obs = run_episode(wrappers.make_env, args.seed, args.size)
    times = {k: list(v) for k, v in TIMES.items()}  # DMC-GB's episode only
    rendered, backgrounds, _ = check_masks(own)
    print(f"Command: {' '.join(['python', *sys.argv])}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"Machine: {machine()}; MUJOCO_GL={os.environ['MUJOCO_GL']}; torch threads 1; "
          f"load average {load} after the episode")  # fmt: skip
    print(f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"Masks identical to do_green_screen's on all {len(FRAMES)} frames; composite "
          "output identical to its output.\n")  # fmt: skip
    ours = time_steps(own, rendered, backgrounds, args.rounds)
    dropin = time_dropin(wrappers, args.seed, args.size, obs)
    print(report(times, episode, steps, ours, dropin))


if __name__ == "__main__":
    main()

"""What `mixshard.gym`'s wrapper adds to the step of a real pixel environment (issue 47 §4:
at most 5%).

A gymnasium sync vector env of real MuJoCo envs rendering `(N, H, W, 3)` uint8 frames
(`AddRenderObservation(render_only=True)`), stepped with random actions through its
autoresets, bare and wrapped in `VectorBackgroundWrapper` (a background per environment
behind a keep mask), the same env in turn; the ratio is the wrapped round's
median step time over the bare one's, from the same run; and the wrapper's own time in the
loop (a wrapped step's less its env's), which a busy machine's noise in the renders does not
drown; and that own time again in a loop of wrapped steps only, as a training loop runs them
(between two wrapped steps of the first loop runs a bare step's render too).

    pip install "gymnasium[mujoco]"
    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONPATH=. python scripts/bench_wrappers.py \\
        [--env InvertedPendulum-v5] [--num-envs 8] [--size 84] [--rounds 9] [--steps 40] \\
        [--pack PACK]

Without `--pack`, a procedural image pack at `--size` is made in a temporary folder (an image
pack's still backgrounds cost what a clip pack's do: one gather per step).
"""

from __future__ import annotations

import argparse
import functools
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

import mixshard  # noqa: E402
from mixshard.testdata import make_image_folder  # noqa: E402


def vector_env(name: str, n: int, size: int):
    """`n` sync copies of `name` whose observations are their `size` x `size` renders."""
    import gymnasium as gym

    render = functools.partial(gym.wrappers.AddRenderObservation, render_only=True)
    return gym.make_vec(
        name, num_envs=n, vectorization_mode="sync", wrappers=[render],
        render_mode="rgb_array", width=size, height=size,
    )  # fmt: skip


def not_black(obs: np.ndarray, info: dict) -> np.ndarray:
    """The README's mask: the render's black sky keyed out, a channel at a time (20x faster
    than numpy's `obs.any(-1)`, which reduces a last axis of 3 slowly)."""
    return (obs[..., 0] | obs[..., 1] | obs[..., 2]) > 0


def masks_to_try() -> dict:
    """The keep masks timed: none (the wrapper's own work alone: the clips stepped and each
    environment's background composited), the README's callable of the numpy observations,
    the same with numpy's `any`, a `mixshard.masks` builder, and the key made in the pass."""
    return {
        "None (blend everywhere)": None,
        "lambda obs, info: obs.any(-1)": lambda obs, info: obs.any(-1),
        "README's by channel (not_black)": not_black,
        "masks.color_key(rgb=(0, 0, 0))": functools.partial(
            mixshard.masks.color_key, rgb=(0, 0, 0)
        ),
        "keys.color_key((0, 0, 0)) (in the pass)": mixshard.keys.color_key((0, 0, 0)),
    }


def timed(env):
    """`env` behind a gymnasium vector wrapper that keeps each step's seconds in `.times`:
    under `VectorBackgroundWrapper`, a wrapped step's time less its env's is the wrapper's."""
    import gymnasium as gym

    class Timed(gym.vector.VectorWrapper):
        times: list[float]

        def step(self, actions):
            start = time.perf_counter()
            out = self.env.step(actions)
            self.times.append(time.perf_counter() - start)
            return out

    shim = Timed(env)
    shim.times = []
    return shim


def compare(raw, wrapped, rounds: int, steps: int) -> dict[str, float]:
    """Median step seconds, bare and wrapped: the same env (`raw`, under `wrapped`'s timing
    shim) stepped bare and wrapped in turn, each first every other time, so that a busy
    machine's drift falls on both (the wrapper then misses the bare steps' autoresets: which
    backgrounds show changes, not what a step costs); the median of the rounds' ratios; the
    median of the wrapper's own seconds in the loop; and the least mean pixel value of a bare
    step's frames (a render that failed gives black frames, fast)."""
    rng = np.random.default_rng(0)
    space, inner = raw.action_space, wrapped.env.times
    raw.reset(seed=0)
    wrapped.reset(seed=0)
    bare: list[float] = []
    wrap: list[float] = []
    own: list[float] = []
    ratios, darkest = [], 255.0
    for r in range(rounds + 1):  # round 0 warms up: the first renders, the mask's first call
        b, w = [], []
        for k in range(steps):
            pair = ((raw, b), (wrapped, w))
            for env, times in pair if k % 2 else pair[::-1]:  # each first half the time
                action = rng.uniform(space.low, space.high).astype(space.dtype)
                start = time.perf_counter()
                obs = env.step(action)[0]
                times.append(time.perf_counter() - start)
                if env is raw:
                    darkest = min(darkest, float(obs.mean()))
                elif r:
                    own.append(times[-1] - inner[-1])
        if r:
            bare += b
            wrap += w
            ratios.append(statistics.median(w) / statistics.median(b))
    return {
        "bare": statistics.median(bare),
        "wrapped": statistics.median(wrap),
        "ratio": statistics.median(ratios),
        "own": statistics.median(own),
        "darkest": darkest,
    }


def alone(wrapped, steps: int) -> float:
    """The median of the wrapper's own seconds in a loop of wrapped steps only (no bare step
    between two of them, as in training), after a few to warm up."""
    rng = np.random.default_rng(1)
    space, inner = wrapped.action_space, wrapped.env.times
    own = []
    for k in range(steps + 5):
        action = rng.uniform(space.low, space.high).astype(space.dtype)
        start = time.perf_counter()
        wrapped.step(action)
        if k >= 5:
            own.append(time.perf_counter() - start - inner[-1])
    return statistics.median(own)


def image_pack(size: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="bench-wrappers-"))
    make_image_folder(root / "src", classes=4, per_class=25, seed=0, max_side=160)
    mixshard.pack(root / "src", root / "pack", size=size, workers=1, labels="none")
    return root / "pack"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="InvertedPendulum-v5")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--size", type=int, default=84)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--pack", type=Path, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default torch's)")
    args = p.parse_args()
    if args.threads:
        # on a machine busier than its cores, torch's OpenMP threads wait on each other at
        # every op's barrier (a 100 us op took 20-80 ms at load 11 on 2 cores): one thread
        # measures what the wrapper costs rather than the scheduler
        torch.set_num_threads(args.threads)
    from mixshard.gym import VectorBackgroundWrapper

    pack = args.pack or image_pack(args.size)
    n = args.num_envs
    load = os.getloadavg()
    rows = []
    # one env for every row: a fourth vector env made after three were closed rendered black
    # frames here (MuJoCo 4.0.1 on Mesa's EGL), which the last column would show
    raw = vector_env(args.env, n, args.size)
    for label, mask in masks_to_try().items():
        bg = mixshard.Backgrounds(pack, n, frames=1, clip_order="no-repeat")
        wrapped = VectorBackgroundWrapper(timed(raw), bg, mask)
        t = compare(raw, wrapped, args.rounds, args.steps)
        own = f"{t['own'] * 1e6:.0f} (**{t['own'] / t['bare']:.1%}**)"
        solo = alone(wrapped, args.rounds * args.steps)
        solo_own = f"{solo * 1e6:.0f} (**{solo / t['bare']:.1%}**)"
        rows.append([label, f"{t['bare'] * 1e3:.2f}", f"{t['wrapped'] * 1e3:.2f}",
                     f"{t['ratio']:.3f}", own, solo_own, f"{t['darkest']:.2f}"])  # fmt: skip
    raw.close()
    after = os.getloadavg()
    threads = torch.get_num_threads()
    print(f"{args.env}, {n} envs, {args.size} x {args.size} renders, {threads} torch threads; "
          f"{machine()}")  # fmt: skip
    print(f"load average (1, 5, 15 min): before {load}, after {after}; "
          f"{args.rounds} rounds of {args.steps} steps, medians")  # fmt: skip
    heads = ["mask", "bare step, ms", "wrapped step, ms", "wrapped / bare",
             "the wrapper's own, µs (of a bare step)",
             "its own in a loop of wrapped steps only, µs", "darkest frames' mean"]  # fmt: skip
    print(table(heads, rows))


if __name__ == "__main__":
    main()

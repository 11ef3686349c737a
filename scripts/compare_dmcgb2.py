"""DMC-GB2's video and colour-video modes against `mixshard.dmcgb2`'s, on whole episodes.

Builds DMC-GB2's own environment twice with its own `envs.dmcgb.dmcgb_wrapper.make(task,
frame_stack=3, action_repeat=2, seed, mode)` (walker_walk: 500 steps an episode, 84 px): once
as it is (its `ColorVideoWrapper`: an OpenCV decode of the whole mp4 at each reset, PIL's
`Image.resize` of every frame to 256 px, texture 2 written and uploaded at every step), once
after the one-line change `dmcgb_photometric.ColorVideoWrapper =
video_modes(dmcgb_photometric.ColorVideoWrapper)`, the clips from packs made as `make
dmcgb2-videos` makes them (`--clips --crop full --size 256 --resample bicubic`) of the very
files DMC-GB2 read (`--modes color_video_easy color_video_hard`: the same packs, and the
colours DMC-GB2's `_load_colors` loads, recolouring the rebuilt model at each reset). Both get
the same seeded random actions. Printed per mode: whether the two rebuilt models are alike
when made and after every reset (textures and their bytes, materials, sites, bodies, geoms,
actuators), the largest difference and the share of equal bytes of texture 2 over every reset
and step, the same of the rendered 84 px frames, and the times of a reset and of a step's
texture update (against the bare upload; in the colour modes, of the model rebuild), timed
alternately. Not a CI test: it needs DMC-GB2's code and dm_control, kept out of the project.

    mixshard pack DATA/video_hard /tmp/packs/dmcgb2-video_hard --clips --crop full \\
        --size 256 --resample bicubic        # and video_easy
    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONPATH=. /work/simvenv/bin/python \\
        scripts/compare_dmcgb2.py --dmcgb2 /tmp/dmcgb2 --data DATA --packs /tmp/packs

`--data DATA` holds `video_easy/video<i>.mp4`, `video_hard/video<i>.mp4` and the colour
modes' `color_easy.pt` and `color_hard.pt` (DMC-GB2's `envs/dmcgb/data`, or links to its
files). Made as DMC-GB2's code is loaded, none in its files:
its data folder (`dmcgb_data_dir`, a module constant naming a path relative to the working
directory) is set to `DATA`, dm_control's model gets `tex_rgb` as a name of `tex_data`
(MuJoCo 3 renamed it; DMC-GB2 pins MuJoCo 3.1.1, whose dm_control 1.0.16 still named it so),
and torch's safe unpickling allows numpy's arrays (`COLOR_GLOBALS`: torch 2.6 made `torch.load`
refuse other than tensors by default; DMC-GB2 pins torch 2.0.1, which read its colour files).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch  # DMC-GB2's module imports it; before dm_control, as it does
from numpy._core.multiarray import _reconstruct

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # mixshard from this checkout
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import machine, paired, table  # noqa: E402

import mixshard  # noqa: E402
from mixshard.dmcgb2 import SCREEN_TEXTURE, video_modes  # noqa: E402
from mixshard.textures.target import physics_upload  # noqa: E402

# the compiled model's arrays that say the scenes are alike
MODEL_ARRAYS = (
    "tex_type", "tex_adr", "tex_nchannel", "mat_texid", "mat_rgba", "site_pos", "site_quat",
    "site_size", "site_matid", "site_bodyid", "body_pos", "body_quat", "geom_pos", "geom_size",
    "geom_matid", "actuator_trnid", "actuator_gear", "cam_pos", "tex_width", "tex_height",
    "tex_data",
)  # fmt: skip
# what torch.load's weights_only (torch >= 2.6) must allow to read DMC-GB2's colour files, a
# list of dicts of float64 arrays pickled by numpy 1 (DMC-GB2's torch 2.2 loaded any pickle)
COLOR_GLOBALS = [
    (_reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype,
    np.dtypes.Float64DType,
]  # fmt: skip


def load_dmcgb2(checkout: Path, data: Path) -> tuple[Any, Any]:
    """DMC-GB2's `dmcgb_wrapper` and `dmcgb_photometric` modules, with the two changes of the
    module docstring."""
    from dm_control.mujoco.wrapper import core

    sys.path.insert(0, str(checkout))
    import envs.dmcgb.dmcgb_photometric as photometric
    import envs.dmcgb.dmcgb_wrapper as wrapper

    photometric.dmcgb_data_dir = str(data)
    torch.serialization.add_safe_globals(COLOR_GLOBALS)  # its colour files, numpy arrays
    if not hasattr(core.MjModel, "tex_rgb"):
        core.MjModel.tex_rgb = property(lambda self: self.tex_data)  # type: ignore[attr-defined]
    return wrapper, photometric


def video_wrapper(env: Any) -> Any:
    """The `ColorVideoWrapper` (DMC-GB2's or ours) inside DMC-GB2's wrapper stack (each of
    whose wrappers hands on the attributes it lacks: the class is asked, not the object)."""
    while not hasattr(type(env), "_apply_video"):
        env = env.__dict__["_env"]
    return env


def screen(env: Any) -> np.ndarray:
    """Texture 2's bytes as the renderer reads them."""
    m = env.physics.model
    w, h, adr = (int(a[SCREEN_TEXTURE]) for a in (m.tex_width, m.tex_height, m.tex_adr))
    return np.array(m.tex_data[adr : adr + w * h * 3])


def models_alike(a: Any, b: Any) -> list[str]:
    """The names of `MODEL_ARRAYS` (and sizes) in which the two models differ."""
    ma, mb = a.physics.model.ptr, b.physics.model.ptr
    sizes = ("ntex", "nmat", "nsite", "nbody", "ngeom", "nu", "ntexdata")
    differ = [n for n in sizes if getattr(ma, n) != getattr(mb, n)]
    return differ + [n for n in MODEL_ARRAYS if not np.array_equal(getattr(ma, n), getattr(mb, n))]


def episodes(theirs: Any, ours: Any, count: int, seed: int) -> dict[str, Any]:
    """`count` episodes of both with the same actions: per reset and step, texture 2 and the
    newest 84 px frame of each, compared."""
    rng = np.random.default_rng(seed)
    spec = theirs.action_spec()
    worst = pixels = equal = seen = frames = steps = 0
    differ: set[str] = set()
    for _ in range(count):
        a, b = theirs.reset(), ours.reset()
        differ.update(models_alike(theirs, ours))  # the colour modes' rebuilt models
        while True:
            d = np.abs(screen(theirs).astype(np.int16) - screen(ours).astype(np.int16))
            worst, equal, seen = (
                max(worst, int(d.max())),
                equal + int((d == 0).sum()),
                seen + d.size,
            )
            fa, fb = (np.asarray(t.observation)[-3:].astype(np.int16) for t in (a, b))
            pixels, frames = max(pixels, int(np.abs(fa - fb).max())), frames + 1
            if a.last():
                break
            action = rng.uniform(spec.minimum, spec.maximum, spec.shape).astype(spec.dtype)
            a, b = theirs.step(action), ours.step(action)
            steps += 1
    got = dict(worst=worst, equal=equal / seen, pixels=pixels, frames=frames, steps=steps)
    return dict(got, differ=sorted(differ))


def timings(theirs: Any, ours: Any, runs: int) -> list[list[Any]]:
    """A reset of the whole stack (the environment's, the video's, the first 84 px render),
    and of the video wrapper alone (the suite environment's reset and the video's: DMC-GB2
    decodes and resizes the next clip, ours copies frame 0 out of the pack); a step's texture
    update (frame into texture 2, the upload) against the bare upload. Timed alternately."""
    rows = []
    pairs = [("reset, whole stack", ours, theirs)]
    pairs.append(("reset, video wrapper", video_wrapper(ours), video_wrapper(theirs)))
    for what, a, b in pairs:
        mine, base, ratio = paired(a.reset, b.reset, runs)
        rows.append([f"{what}, mixshard", f"{mine * 1e3:.2f}", "DMC-GB2's",
                     f"{base * 1e3:.1f}", f"{1 / ratio:.0f}x faster"])  # fmt: skip
    for name, env in (("DMC-GB2", theirs), ("mixshard", ours)):
        inner, bare = video_wrapper(env), physics_upload(env.physics)
        t, u, ratio = paired(inner._apply_video, lambda bare=bare: bare(SCREEN_TEXTURE), runs * 5)
        rows.append([f"texture update, {name}", f"{t * 1e3:.2f}", "bare upload",
                     f"{u * 1e3:.2f}", f"{ratio:.3f}"])  # fmt: skip
    return rows + rebuilds(video_wrapper(theirs), video_wrapper(ours), runs)


def rebuilds(theirs: Any, ours: Any, runs: int) -> list[list[Any]]:
    """In a colour-video mode, the model rebuild each reset begins with (both: the scene
    recoloured, its XML compiled, the physics reloaded), timed alternately; last, as it leaves
    texture 2 at its own size until the next reset."""
    if getattr(ours, "_colors", None) is None:
        return []
    mine, base, ratio = paired(lambda: ours._rebuild(ours._colors[0]), theirs._randomize_colors,
                               runs)  # fmt: skip
    return [["model rebuild, mixshard", f"{mine * 1e3:.2f}", "DMC-GB2's", f"{base * 1e3:.1f}",
             f"{ratio:.3f}"]]  # fmt: skip


def compare(wrapper: Any, photometric: Any, args: argparse.Namespace, mode: str) -> list[Any]:
    original = photometric.ColorVideoWrapper
    t0 = time.perf_counter()
    theirs = wrapper.make(args.task, 3, 2, args.seed, mode)
    made_theirs = time.perf_counter() - t0
    photometric.ColorVideoWrapper = video_modes(original)  # the one-line change
    try:
        t0 = time.perf_counter()
        ours = wrapper.make(args.task, 3, 2, args.seed, mode)
        made_ours = time.perf_counter() - t0
    finally:
        photometric.ColorVideoWrapper = original
    made = models_alike(theirs, ours)
    got = episodes(theirs, ours, args.episodes, args.seed)
    differ = sorted(set(made) | set(got["differ"]))
    row = [mode, "alike" if not differ else "differ: " + ", ".join(differ), got["frames"],
           got["worst"], f"{got['equal']:.4%}", got["pixels"],
           f"{made_theirs:.2f} s / {made_ours:.2f} s"]  # fmt: skip
    times = timings(theirs, ours, args.runs)
    video_wrapper(ours).close()
    return [row, times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dmcgb2", type=Path, required=True, help="DMC-GB2's checkout")
    parser.add_argument("--data", type=Path, required=True, help="video_easy/, video_hard/")
    parser.add_argument("--packs", type=Path, required=True, help="dmcgb2-video_easy, _hard")
    parser.add_argument("--task", default="walker_walk")
    modes = ["video_easy", "video_hard", "color_video_easy", "color_video_hard"]
    parser.add_argument("--modes", nargs="+", default=modes[:2], choices=modes)
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    os.environ["MIXSHARD_DATA"] = str(args.packs)
    wrapper, photometric = load_dmcgb2(args.dmcgb2.resolve(), args.data.resolve())
    print(machine(), f"mixshard {mixshard.__version__}, task {args.task}, seed {args.seed}\n")
    rows, times = [], []
    for mode in args.modes:
        row, timed = compare(wrapper, photometric, args, mode)
        rows.append(row)
        times += [[mode, *t] for t in timed]
    heads = ["mode", "models", "frames", "largest texture difference", "equal texture bytes",
             "largest 84 px frame difference", "env made (DMC-GB2 / mixshard)"]  # fmt: skip
    print(table(heads, rows))
    print("\n" + table(["mode", "what", "ms", "against", "ms", "ratio (median of runs)"], times))


if __name__ == "__main__":
    main()

"""The Distracting Control Suite's and DMC-VB's 3D video backgrounds against
`mixshard.distracting`'s, on real dm_control episodes: the sky texture's bytes at every reset
and step, a reset's time and a step's texture update. Not a CI test: it needs dm_control
(rendering on the CPU: Mesa's EGL) and the benchmarks' code, kept outside the project (the
numbers of a run: docs/benchmarks.md, "3D video distractors").

    python scripts/davis_like.py ../shared/real-videos /tmp/davis-like   # DAVIS-shaped JPEGs
    mixshard pack /tmp/davis-like/JPEGImages/480p /tmp/davis-800 --clips --crop full \\
        --size 800 --resample bilinear-no-antialias          # and --size 480 for /tmp/davis-480
    MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONPATH=.:$TFSITE python scripts/bench_distractors.py \\
        --dcs /tmp/dcs --davis /tmp/davis-like --pack /tmp/davis-800 [--small /tmp/davis-480] \\
        [--tf] [--dmcvb DMCVB/dmc_vision_benchmark/environments/distracting_suite.py \\
        --kubric /tmp/kubric-like --kubric-packs /tmp/kubric-800 /tmp/kubric-256]
    PYTHONPATH=.:$TFSITE python scripts/bench_distractors.py --tf-check /tmp/davis-like

`--dcs DIR` holds `distracting_control/background.py` of google-research (its latest release:
PIL reads, `cv2.resize`). It ran on today's MuJoCo and Python with two edits made as it is
loaded, not in its file: `tex_rgb` is `tex_data` since MuJoCo 3, and a clip's frames are
listed sorted, where it lists them with `Path.glob('*/')` (on Python 3.11 and later that
lists folders only, so it finds no frame; before, it listed them in the file system's order).
`--tf`: DCS resizing as its first release did (`tf.image.resize`, a truncating `tf.cast`), in
`tf_shim`. `--small PACK`: the same clips packed smaller, resized to the sky as each is read
(`resize=True`). `--dmcvb FILE`: DMC-VB's `KubricBackgroundEnv` against ours, on the videos of
`--kubric DIR`'s `train/` and each of `--kubric-packs` (`resize=True`); it needs mediapy
(`$TFSITE`; `MEDIAPY_FFMPEG`: the ffmpeg it runs) and gets TensorFlow as `tf_shim`, which
`--tf-check DIR` compares with TensorFlow's own (a run of its own: TensorFlow 2.21 crashed in
a process with dm_control's rendering).

Reported: the largest difference between the two skies over every reset and step of each
setting, the share of equal bytes, and the largest difference of 84 px renders; the
background reset of each (DCS reads and resizes every frame of the drawn clip; mixshard draws
the same and copies one frame), with the upload and without it (both stubbed), timed
alternately; a smaller pack's reset with its clip read ahead and not yet read (two resets in
a row); a step's texture update against the bare upload (`mjr_uploadTexture` in the physics'
context). Medians of `--runs` (texture updates: 5x as many); ratios of runs timed alternately.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import machine, paired, table  # noqa: E402

SKY = 800 * 800 * 3
# (name, DCS arguments): the suite's difficulties (4, 8, all clips) and modes
SETTINGS = (
    ("dynamic, easy (4 clips)", dict(dynamic=True, dataset_videos="train", num_videos=4)),
    ("dynamic, medium (8), video_alpha 0.5", dict(dynamic=True, num_videos=8, video_alpha=0.5)),
    ("static, hard (all 10)", dict(dynamic=False)),
    ("shuffle buffer 100", dict(dynamic=True, shuffle_buffer_size=100)),
)


def load_dcs(root: Path, tf: bool = False) -> types.ModuleType:
    """DCS's `background.py` with the two edits the module docstring names; `tf`: resizing
    as its first release did, `tf.cast(tf.image.resize(...), tf.uint8)` (`tf_shim`'s), in
    place of `cv2.resize`."""
    path = root / "distracting_control" / "background.py"
    text = path.read_text().replace("tex_rgb", "tex_data")
    if tf:
        text = text.replace(
            "cv2.resize(np.array(image), (ref_height, ref_width))",
            "tf.cast(tf.image.resize(image, [ref_height, ref_width]), tf.uint8)",
        )
    text = text.replace("Path(path).glob('*/')", "_listed(path)")
    text = text.replace("Path(video_path).glob('*/')", "_listed(video_path)")
    text += "\n\ndef _listed(folder):\n  return sorted(Path(folder).iterdir())\n"
    module = types.ModuleType("dcs_background")
    module.tf = tf_shim()  # type: ignore[attr-defined]
    exec(compile(text, str(path), "exec"), module.__dict__)  # noqa: S102 - their code, read here
    return module


def make_env(time_limit: float) -> Any:
    from dm_control import suite

    return suite.load("cartpole", "swingup", task_kwargs={"random": 0, "time_limit": time_limit})


def sky(env: Any) -> np.ndarray:
    return env.physics.model.tex_data[:SKY]


def pair(dcs: types.ModuleType | None, frames: Path, pack: Path, kw: dict, **ours_kw: Any) -> tuple:
    from mixshard.distracting import DistractingBackgroundEnv

    args = dict(ground_plane_alpha=0.3, seed=7, **kw)  # cartpole's, as DCS's suite sets it
    theirs = (
        None if dcs is None else dcs.DistractingBackgroundEnv(make_env(1.0), str(frames), **args)
    )
    ours = DistractingBackgroundEnv(make_env(1.0), pack, **args, **ours_kw)
    return theirs, ours


def compare(dcs: types.ModuleType, frames: Path, pack: Path, kw: dict, steps: int, **ours_kw):
    """`compare_envs` of DCS's environment and ours."""
    return compare_envs(*pair(dcs, frames, pack, kw, **ours_kw), steps)


def compare_envs(theirs: Any, ours: Any, steps: int) -> tuple[int, float, int]:
    """Largest sky difference and share of equal bytes over a reset and `steps` steps (two
    episodes and more), and the largest difference of the rendered 84 px frames."""
    worst, equal, seen, pixels = 0, 0, 0, 0
    for t in range(steps + 1):
        if t == 0:
            theirs.reset(), ours.reset()
        else:
            action = np.zeros(1)
            theirs.step(action), ours.step(action)
        diff = np.abs(sky(theirs).astype(np.int16) - sky(ours).astype(np.int16))
        worst, equal, seen = max(worst, int(diff.max())), equal + int((diff == 0).sum()), seen + SKY
        if t % 25 == 0:
            a, b = theirs.physics.render(84, 84), ours.physics.render(84, 84)
            pixels = max(pixels, int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max()))
    ours.close()
    return worst, equal / seen, pixels


def tf_shim() -> types.ModuleType:
    """What DMC-VB calls of TensorFlow, in numpy and torch: `tf.image.resize` (bilinear,
    half-pixel centres, no antialias: `F.interpolate`'s), `tf.cast` to uint8 (truncating),
    `tf.reshape(...).numpy()` and `tf.io.gfile.listdir`. `--tf-check` compares the resize with
    TensorFlow's own in a process without dm_control (TensorFlow 2.21 crashed beside
    dm_control's OpenGL here)."""
    import torch
    import torch.nn.functional as F

    def resize(image: Any, size: list[int]) -> np.ndarray:
        x = torch.from_numpy(np.array(image)).permute(2, 0, 1)[None].float()
        y = F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)
        return y[0].permute(1, 2, 0).numpy()

    tf = types.ModuleType("tensorflow")
    tf.uint8 = np.uint8  # type: ignore[attr-defined]
    tf.image = types.SimpleNamespace(resize=resize)  # type: ignore[attr-defined]
    tf.cast = lambda x, dtype: np.asarray(x).astype(dtype)  # type: ignore[attr-defined]
    tf.reshape = lambda x, shape: types.SimpleNamespace(numpy=lambda: np.reshape(x, shape))  # type: ignore[attr-defined]
    tf.io = types.SimpleNamespace(gfile=types.SimpleNamespace(listdir=os.listdir))  # type: ignore[attr-defined]
    return tf


def tf_check(videos: Path, size: int = 800) -> str:
    """The largest difference between TensorFlow's `tf.cast(tf.image.resize(...), tf.uint8)`
    and `tf_shim`'s, over every frame of the videos in `videos` (mp4, read by PyAV) and the
    JPEGs below it, each resized to `size` px; run in a process of its own."""
    import av
    import tensorflow as tf  # first (see `tf_shim`)
    from PIL import Image

    frames = [np.asarray(Image.open(p)) for p in sorted(videos.rglob("*.jpg"))[::10]]
    for path in sorted(videos.rglob("*.mp4")):
        with av.open(str(path)) as container:
            frames += [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    shim, worst, equal, seen = tf_shim(), 0, 0, 0
    for frame in frames:
        a = tf.cast(tf.image.resize(frame, [size, size]), tf.uint8).numpy().astype(np.int16)
        b = shim.cast(shim.image.resize(frame, [size, size]), np.uint8).astype(np.int16)
        worst, equal, seen = (
            max(worst, int(np.abs(a - b).max())),
            equal + int((a == b).sum()),
            seen + a.size,
        )
    return f"{len(frames)} frames: largest difference {worst}, {equal / seen:.4%} of bytes equal"


def load_dmcvb(path: Path) -> types.ModuleType:
    """DMC-VB's `distracting_suite.py` with `tex_rgb` read as `tex_data`, TensorFlow as
    `tf_shim` and mediapy's own video reading (`MEDIAPY_FFMPEG`: the ffmpeg it runs); the
    `distracting_control` modules it imports for `load` are left empty."""
    import imageio_ffmpeg
    import mediapy

    mediapy.set_ffmpeg(os.environ.get("MEDIAPY_FFMPEG", imageio_ffmpeg.get_ffmpeg_exe()))
    package = types.ModuleType("distracting_control")
    for name in ("camera", "color", "suite_utils"):
        module = types.ModuleType(f"distracting_control.{name}")
        setattr(package, name, module)
        sys.modules[module.__name__] = module
    sys.modules["distracting_control"] = package
    sys.modules["tensorflow"] = tf_shim()
    text = path.read_text().replace("tex_rgb", "tex_data")
    module = types.ModuleType("dmcvb_distracting_suite")
    exec(compile(text, str(path), "exec"), module.__dict__)  # noqa: S102 - their code, read here
    return module


def dmcvb_rows(dmcvb: types.ModuleType, videos: Path, packs: list[Path], steps: int) -> list[list]:
    """DMC-VB's sky against ours from a pack at 800 px and one smaller (`resize=True`)."""
    from mixshard.distracting import KubricBackgroundEnv

    rows = []
    for pack in packs:
        for dynamic in (True, False):
            args = dict(dataset_videos="train", dynamic=dynamic, seed=3, ground_plane_alpha=0.3)
            theirs = dmcvb.KubricBackgroundEnv(make_env(1.0), str(videos), **args)
            ours = KubricBackgroundEnv(make_env(1.0), pack, resize=True, **args)
            worst, share, pixels = compare_envs(theirs, ours, steps)
            mode = "dynamic" if dynamic else "static"
            rows.append([f"DMC-VB {mode}, {pack.name}", worst, f"{share:.4%}", pixels])
    return rows


def median_seconds(fn: Callable[[], Any], runs: int, before: Callable[[], Any] | None = None):
    times = []
    for _ in range(runs):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def stub_uploads(dcs: types.ModuleType, ours: Any) -> None:
    """Both uploads made no-ops (DCS's still enters its context, as it does)."""
    mjlib = types.SimpleNamespace(mjr_uploadTexture=lambda *args: None)
    dcs.mjbindings = types.SimpleNamespace(mjlib=mjlib)
    ours._writer.upload = lambda texture: None


def reset_rows(dcs: types.ModuleType, frames: Path, packs: list[Path], runs: int) -> list[list]:
    """A background reset, DCS's and ours, with and without the upload, timed alternately
    (`paired`: each run resets both, on the same clip, as the same seed draws them). A smaller
    pack (`resize=True`) is timed with its clip read ahead, and not read yet (two resets in a
    row), against DCS's median."""
    from dm_control.mujoco.wrapper import mjbindings

    rows = []
    for upload in (True, False):
        dcs.mjbindings = mjbindings
        theirs, ours = pair(dcs, frames, packs[0], dict(dynamic=True))
        smaller = [pair(None, frames, p, dict(dynamic=True), resize=True)[1] for p in packs[1:]]
        if not upload:
            for env in (ours, *smaller):
                stub_uploads(dcs, env)
        what = "with the upload" if upload else "without it (both stubbed)"
        for env in (theirs, ours, *smaller):
            env.reset()
        mine, base, ratio = paired(ours._reset_background, theirs._reset_background, runs)
        rows.append(
            [
                what,
                "800 px, one frame",
                f"{base * 1e3:.1f}",
                f"{mine * 1e3:.2f}",
                f"{1 / ratio:.0f}x",
            ]
        )
        for env in smaller:
            ready = median_seconds(
                env._reset_background, runs, lambda e=env: e._source.wait(e._next[0])
            )
            late = median_seconds(env._reset_background, runs, env._reset_background)
            for name, sec in (("clip read ahead", ready), ("not read yet", late)):
                name = f"{env._source.size} px, {name}"
                rows.append(
                    [what, name, f"{base * 1e3:.1f}", f"{sec * 1e3:.2f}", f"{base / sec:.1f}x"]
                )
        for env in (ours, *smaller):
            env.close()
    dcs.mjbindings = mjbindings
    return rows


def step_rows(dcs: types.ModuleType, frames: Path, pack: Path, runs: int) -> list[list]:
    """A step's texture update (frame into the sky, upload) against the bare upload."""
    from mixshard.textures.target import physics_upload

    rows = []
    for alpha in (1.0, 0.5):
        theirs, ours = pair(dcs, frames, pack, dict(dynamic=True, video_alpha=alpha))
        theirs.reset(), ours.reset()
        for name, env in (("DCS", theirs), ("mixshard", ours)):
            bare = physics_upload(env.physics)
            a, b, ratio = paired(env._apply, lambda bare=bare: bare(0), runs)
            rows.append([name, alpha, f"{a * 1e3:.2f}", f"{b * 1e3:.2f}", f"{ratio:.3f}"])
        ours.close()
    return rows


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dcs", type=Path, help="holds distracting_control/")
    parser.add_argument("--davis", type=Path, help="a DAVIS-shaped tree")
    parser.add_argument("--pack", type=Path, help="its clips packed at 800 px")
    parser.add_argument("--tf-check", type=Path, help="only: TensorFlow's resize against the shim")
    parser.add_argument("--small", type=Path, help="its clips packed smaller")
    parser.add_argument("--steps", type=int, default=230, help="steps compared (100 an episode)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tf", action="store_true", help="DCS resizing with TensorFlow")
    parser.add_argument("--dmcvb", type=Path, help="DMC-VB's environments/distracting_suite.py")
    parser.add_argument("--kubric", type=Path, help="holds train/ of Kubric-like videos")
    parser.add_argument("--kubric-packs", type=Path, nargs="*", default=[], help="their packs")
    args = parser.parse_args()
    if args.tf_check is not None:
        print(tf_check(args.tf_check))
        return
    dmcvb = None if args.dmcvb is None else load_dmcvb(args.dmcvb)
    dcs, frames = load_dcs(args.dcs, args.tf), args.davis / "JPEGImages" / "480p"
    print(machine(), "\n")
    rows = []
    for name, kw in SETTINGS:
        worst, share, pixels = compare(dcs, frames, args.pack, kw, args.steps)
        rows.append([name, worst, f"{share:.4%}", pixels])
    packs = [args.pack] + ([] if args.small is None else [args.small])
    for small in packs[1:]:
        kw = SETTINGS[0][1]
        worst, share, pixels = compare(dcs, frames, small, kw, args.steps, resize=True)
        rows.append([f"{SETTINGS[0][0]}, {small.name}", worst, f"{share:.4%}", pixels])
    if dmcvb is not None:
        rows += dmcvb_rows(dmcvb, args.kubric, args.kubric_packs, args.steps)
    heads = ["setting", "largest sky difference", "equal bytes", "84 px render difference"]
    print(table(heads, rows))
    heads = ["reset", "mixshard", "DCS ms", "mixshard ms", "DCS / mixshard"]
    print("\n" + table(heads, reset_rows(dcs, frames, packs, args.runs)))
    heads = ["texture update", "video_alpha", "ms", "bare upload ms", "ratio (median of runs)"]
    print("\n" + table(heads, step_rows(dcs, frames, args.pack, args.runs * 5)))
    sizes = [[p.name, f"{folder_bytes(p) / 1e9:.3f} GB"] for p in packs]
    print("\n" + table(["pack", "bytes"], sizes))


if __name__ == "__main__":
    main()

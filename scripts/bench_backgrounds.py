"""Benchmark `mixshard.Backgrounds` on the CPU: per-environment video backgrounds.

Rows, each a median of --runs timed calls after warm-up, each ratio against a baseline timed
in the same process:
  * `composite` for 1,024 environments, 3 frames, 84 px float obs (no mask; a per-pixel bool
    mask at alpha 1 and 0.5) against `obs.clone()` (goal <= 2x); and the bool mask through the
    torch ops (what a GPU runs, and a CPU without the compiled `_lerp`) for comparison;
  * `step` + `images` for 1,024 environments against `obs.clone()` (goal <= 1x);
  * `reset` of 64 of 1,024 environments by a bool mask and by an index tensor (goal <= 1 ms);
  * mixing (issue 50): `Backgrounds([pack, pack], weights=[0.5, 0.5])` against
    `Backgrounds(pack)`, paired calls of `step` + `composite` (per-pixel bool mask) with a
    reset of 64 environments every step, and of the reset alone, in wall and in CPU seconds
    (goal <= 1.10x in CPU seconds: what other jobs on a shared machine take does not count);
  * DMC-GB's video background (`VideoWrapper`: decode the whole clip at each reset, then per
    step `F.interpolate(bilinear, align_corners=False)` of one frame to 84 px) against
    `Backgrounds.reset` + 500 `step` + `images` for one environment (goal >= 100x). DMC-GB
    decodes with cv2; cv2 is no dependency of mixshard, so PyAV (which mixshard packs clips
    with) decodes here: the same FFmpeg H.264 decoder underneath.
Everything twice: with torch's default threads and with `torch.set_num_threads(1)`.

The clip pack comes from --videos (default ../shared/real-videos: DMControl-GB's `video_hard`
clips, 352 px H.264), made once into bench-out/ by `make_clip_pack`; --quick makes its own
40-frame clip instead.

    python scripts/bench_backgrounds.py [--runs 15] [--videos ../shared/real-videos] [--quick]
    python scripts/bench_backgrounds.py --only-step --default-malloc  # as a user's process runs
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from benchlib import OUT, ROOT, call_seconds, machine, paired, paired_cpu, table
from wholestep import step_rows

import mixshard
from mixshard.augment.kernels import fused

VIDEOS = ROOT.parent / "shared" / "real-videos"
SIZE = 84
N_ENVS, K, RESET = 1024, 3, 64
EPISODE = 500  # steps of a DMC-GB episode (and frames of a video_hard clip)


def decode(path: Path, max_frames: int | None = None) -> list:
    """Every frame of a video as an RGB `(H, W, 3)` uint8 array, in play order (PyAV)."""
    import av

    frames = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_ndarray(format="rgb24"))
            if max_frames is not None and len(frames) == max_frames:
                break
    return frames


def make_clip_pack(
    videos: list[Path], out: Path, max_frames: int | None = None, size: int = SIZE
) -> Path:
    """A clip pack of `videos` (one clip each), made once.

    Bench-only scaffolding until `mixshard pack SRC OUT --clips` exists (then this is that
    one command): the frames decoded with PyAV and saved as PNGs in one flat folder named in
    play order, packed with the image packer (no shuffle) and index.json rewritten as a clip
    pack (version 2, a `clips` list)."""
    from PIL import Image

    from mixshard.core.manifest import Manifest

    if (out / "index.json").exists():
        return out
    src = out.with_name(out.name + "-frames")
    src.mkdir(parents=True, exist_ok=True)
    clips, start = [], 0
    for v, path in enumerate(videos):
        frames = decode(path, max_frames)
        for f, frame in enumerate(frames):
            Image.fromarray(frame).save(src / f"v{v:03d}_f{f:05d}.png", compress_level=1)
        clips.append({"name": path.stem, "start": start, "count": len(frames), "fps": 25.0})
        start += len(frames)
    mixshard.pack(src, out, size=size, shuffle=False, labels="none", overwrite=True)
    data = json.loads((out / "index.json").read_text())
    data.update(version=2, classes=[c["name"] for c in clips], clips=clips)
    Manifest.from_dict(data, str(out)).save(out)
    return out


def dmcgb_episode(video: Path, steps: int) -> float:
    """Seconds for one episode of DMC-GB's video background: the clip decoded whole at the
    reset, then one frame per step resized to 84 px with F.interpolate (its `_interpolate_bg`:
    float 0..1, bilinear, align_corners=False, back to uint8)."""
    t0 = time.perf_counter()
    frames = decode(video)
    for step in range(steps):
        bg = torch.from_numpy(frames[step % len(frames)]).permute(2, 0, 1).float().unsqueeze(0)
        bg = F.interpolate(bg / 255.0, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
        (bg * 255.0).byte().squeeze(0)
    return time.perf_counter() - t0


def backgrounds_episode(bg: mixshard.Backgrounds, steps: int, images: bool) -> float:
    """Seconds for one episode of `Backgrounds`: reset, then per step `step` (+ `images`)."""
    t0 = time.perf_counter()
    bg.reset()
    for _ in range(steps):
        bg.step()
        if images:
            bg.images()
    return time.perf_counter() - t0


def torch_ops(fn):
    """`fn` with the compiled one-pass blend switched off: the torch ops a GPU runs."""

    def run():
        saved, fused._lerp = fused._lerp, None
        try:
            return fn()
        finally:
            fused._lerp = saved

    return run


def measure(pack: Path, video: Path, args: argparse.Namespace) -> list[list[object]]:
    """The rows of the table, at the current torch thread count."""
    n = args.envs
    g = torch.Generator().manual_seed(0)
    bg = mixshard.Backgrounds(pack, n, frames=K, playback="pingpong", cache="device")
    rows, step_images_sec = per_call_rows(pack, bg, g, args)
    rows += reset_rows(pack, bg, g, args)
    rows += mixing_rows(pack, g, args)
    return rows + episode_rows(pack, video, bg, step_images_sec, args)


def mixing_rows(pack: Path, g: torch.Generator, args: argparse.Namespace) -> list[list[object]]:
    """Two packs by weight against one: a step (reset of some, step, composite) and a reset,
    paired calls, the median of the per-call ratios."""
    n, k, threads = args.envs, args.reset, torch.get_num_threads()
    kw = dict(frames=K, playback="pingpong", cache="device")
    one = mixshard.Backgrounds(pack, n, **kw)
    mix = mixshard.Backgrounds([pack, pack], n, weights=[0.5, 0.5], **kw)
    obs = torch.rand(n, 3 * K, SIZE, SIZE, generator=g) * 255
    keep = torch.rand(n, 1, SIZE, SIZE, generator=g) < 0.3
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.randperm(n, generator=g)[:k]] = True

    def whole(b: mixshard.Backgrounds) -> torch.Tensor:
        b.reset(mask)
        b.step()
        return b.composite(obs, keep)

    rows: list[list[object]] = []
    for name, fn, base in (
        (f"reset of {k} of {n} + step + composite", partial(whole, mix), partial(whole, one)),
        (f"reset of {k} of {n}, bool mask", partial(mix.reset, mask), partial(one.reset, mask)),
    ):
        sec, _, ratio = paired(fn, base, args.runs * 2)
        _, _, cpu = paired_cpu(fn, base, args.runs * 2)
        mark = verdict(cpu <= 1.10, "<= 1.10x in CPU s")
        cell = f"{ratio:.3f}x (CPU s: {cpu:.3f}x)"
        rows.append([threads, f"a mix of 2 packs: {name}", ms(sec), cell, mark])
    return rows


def per_call_rows(
    pack: Path, bg: mixshard.Backgrounds, g: torch.Generator, args: argparse.Namespace
) -> tuple[list[list[object]], float]:
    """composite and step + images against obs.clone(); and step + images' seconds."""
    n, threads = args.envs, torch.get_num_threads()
    obs = torch.rand(n, 3 * K, SIZE, SIZE, generator=g) * 255
    keep = torch.rand(n, 1, SIZE, SIZE, generator=g) < 0.3
    flipping = mixshard.Backgrounds(pack, n, frames=K, playback="pingpong", flip=True)
    for _ in range(7):
        bg.step()
        flipping.step()

    def step_images(b: mixshard.Backgrounds) -> torch.Tensor:
        b.step()
        return b.images()

    cells = [
        ("composite, no mask, alpha 0.5", lambda: bg.composite(obs, alpha=0.5), 2.0),
        ("composite, per-pixel bool mask (green screen)", lambda: bg.composite(obs, keep), 2.0),
        (
            "composite, per-pixel bool mask, alpha 0.5",
            lambda: bg.composite(obs, keep, alpha=0.5),
            2.0,
        ),
        (
            "composite, per-pixel bool mask, in place (out=obs)",
            lambda: bg.composite(obs, keep, out=obs),
            None,
        ),  # noqa: E501
        (
            "composite, per-pixel bool mask, the torch ops (a GPU's path)",
            torch_ops(lambda: bg.composite(obs, keep)),
            None,
        ),
        ("step + images", lambda: step_images(bg), 1.0),
        ("step + images, flip=True", lambda: step_images(flipping), None),
    ]
    rows: list[list[object]] = []
    clones, seconds = [], {}
    for name, fn, goal in cells:
        seconds[name], clone, ratio = paired(fn, obs.clone, args.runs)
        clones.append(clone)
        mark = "" if goal is None else verdict(ratio <= goal, f"<= {goal:g}x")
        rows.append([threads, name, ms(seconds[name]), f"{ratio:.2f}x", mark])
    shape = f"{n} x {3 * K} x {SIZE} x {SIZE} float32"
    clone_row = [threads, f"obs.clone() ({shape}), median", ms(statistics.median(clones))]
    return [[*clone_row, "1.00x", ""], *rows], seconds["step + images"]


def reset_rows(
    pack: Path, bg: mixshard.Backgrounds, g: torch.Generator, args: argparse.Namespace
) -> list[list[object]]:
    """A reset of `args.reset` environments: by mask, by index, and with the pool."""
    n, k, threads = args.envs, args.reset, torch.get_num_threads()
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.randperm(n, generator=g)[:k]] = True
    index = torch.nonzero(mask).squeeze(1)
    pooled = mixshard.Backgrounds(pack, n, frames=K, playback="pingpong", cache="pool")
    rows: list[list[object]] = []
    for name, which, b in (
        ("bool mask", {"envs": mask}, bg),
        ("index tensor", {"index": index}, bg),
        ("bool mask, cache='pool'", {"envs": mask}, pooled),
    ):
        sec = call_seconds(lambda which=which, b=b: b.reset(**which), args.runs * 4)
        rows.append(
            [threads, f"reset of {k} of {n}, {name}", ms(sec), "", verdict(sec <= 1e-3, "<= 1 ms")]
        )  # noqa: E501
    pooled.close()
    return rows


def episode_rows(
    pack: Path,
    video: Path,
    bg: mixshard.Backgrounds,
    step_images_sec: float,
    args: argparse.Namespace,
) -> list[list[object]]:
    """An episode of DMC-GB's video background against Backgrounds'."""
    n, steps, threads = args.envs, args.steps, torch.get_num_threads()
    reps = max(3, args.runs // 3)
    one = mixshard.Backgrounds(pack, 1, frames=K, playback="pingpong", cache="device")
    theirs = statistics.median(dmcgb_episode(video, steps) for _ in range(args.video_runs))
    name = f"DMC-GB: decode the clip + {steps} x F.interpolate, per env"
    rows: list[list[object]] = [[threads, name, ms(theirs), "1.00x", ""]]
    plain = statistics.median(backgrounds_episode(one, steps, False) for _ in range(reps))
    full = statistics.median(backgrounds_episode(one, steps, True) for _ in range(reps))
    # n environments share each call: an episode's share of one environment, from the
    # medians above (reset of all n, then `steps` x step + images)
    shared = (call_seconds(bg.reset, args.runs) + steps * step_images_sec) / n
    for name, sec in (
        (f"Backgrounds: reset + {steps} x step, 1 env", plain),
        (f"Backgrounds: reset + {steps} x (step + images), 1 env", full),
        (f"Backgrounds: reset + {steps} x (step + images), per env of {n}", shared),
    ):
        speedup = theirs / sec
        mark = verdict(speedup >= 100, ">= 100x")
        rows.append([threads, name, ms(sec), f"{speedup:,.0f}x faster", mark])
    return rows


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def verdict(ok: bool, goal: str) -> str:
    return f"{goal}: {'met' if ok else 'NOT met'}"


def parse_args() -> argparse.Namespace:
    # no abbreviations: `__main__` looks for --default-malloc by its whole name
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=15, help="timed calls per median")
    parser.add_argument("--videos", type=Path, default=VIDEOS, help="folder of video clips")
    parser.add_argument("--quick", action="store_true", help="tiny: one short clip, 64 envs")
    parser.add_argument("--only-step", action="store_true", help="only the whole-step rows")
    parser.add_argument("--only-mixing", action="store_true", help="only the mixing rows")
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help="glibc's malloc as a user's process has it: an output over 32 MB is mapped fresh "
        "at every call and pays its page faults, the clone's as the step's (default: held in "
        "steady state, the kernels' own cost)",
    )
    parser.add_argument(
        "--avx2",
        action="store_true",
        help="the compiled pass's AVX-512 loops off, as on a CPU without AVX-512 VBMI (the "
        "compiler's own AVX-512 copies of the map keys still run where the CPU has them)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    lerp = fused._lerp
    if args.avx2 and lerp is not None:
        lerp.wide(False)
    video, packs = prepare(args)
    command = "python scripts/bench_backgrounds.py" + (" --quick" if args.quick else "")
    command += " --only-step" if args.only_step else ""
    command += " --only-mixing" if args.only_mixing else ""
    command += " --default-malloc" if args.default_malloc else ""
    command += " --avx2" if args.avx2 else ""
    print(f"Command: {command}")
    held = " ".join(f"{k}={os.environ[k]}" for k in MALLOC if k in os.environ)
    print("Malloc:", held or "glibc's defaults")  # as this process runs, not as asked
    loops = "not built" if lerp is None else "AVX-512" if lerp.wide() else "AVX2 or narrower"
    policy = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(f"Compiled pass: {loops} loops; OMP_WAIT_POLICY {policy}")
    print(f"Machine: {machine()}; torch {torch.__version__}; {datetime.date.today()}")
    print(f"Load average at the start: {os.getloadavg()[0]:.2f}")
    m = mixshard.Manifest.load(packs[SIZE])
    size = f"{m.total_bytes / 1e6:.1f} MB"
    print(f"Clip pack: {len(m.clips or ())} clips, {m.count} frames of {m.size} px ({size})")
    default = torch.get_num_threads()
    rows = []
    for threads in sorted({default, 1}, reverse=True):
        torch.set_num_threads(threads)
        if args.only_mixing:
            rows += mixing_rows(packs[SIZE], torch.Generator().manual_seed(0), args)
            continue
        if not args.only_step:
            rows += measure(packs[SIZE], video, args)
        for n, k, side in args.steps_at:
            rows += step_rows(packs[side], n, k, side, args.runs)
    torch.set_num_threads(default)
    print()
    print(table(["torch threads", "what", "ms per call", "vs baseline", "goal"], rows))
    print(f"Load average at the end: {os.getloadavg()[0]:.2f}")


def prepare(args: argparse.Namespace) -> tuple[Path, dict[int, Path]]:
    """The video of DMC-GB's row and the clip packs of the whole-step rows, by size; the
    sizes of the run into args."""
    if args.quick:  # its own short clip: runs anywhere (the test suite)
        args.runs, args.envs, args.reset, args.steps, args.video_runs = 3, 64, 8, 40, 2
        args.steps_at = [(64, 3, SIZE), (64, 1, 32)]
        video = OUT / "backgrounds-quick.mp4"
        if not video.exists():
            write_synthetic_video(video, 40)
        videos, name, frames = [video], "backgrounds-clips-quick", None
    else:
        videos = sorted(p for p in args.videos.glob("*.mp4"))
        if not videos:
            sys.exit(f"no .mp4 clips in {args.videos} (pass --videos DIR)")
        args.envs, args.reset, args.steps, args.video_runs = N_ENVS, RESET, EPISODE, 3
        args.steps_at = [(1024, 3, SIZE), (4096, 1, 128)]
        video, name, frames = videos[0], "backgrounds-clips", None
    packs = {}
    for _, _, side in args.steps_at:
        suffix = "" if side == SIZE else f"-{side}"
        packs[side] = make_clip_pack(videos, OUT / (name + suffix), frames, size=side)
    return video, packs


def write_synthetic_video(out: Path, frames: int, side: int = 96) -> Path:
    """A short H.264 clip of moving procedural frames (PyAV), for --quick: no real clip
    needed."""
    import av
    import numpy as np

    out.parent.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:side, 0:side]
    with av.open(str(out), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.height = stream.width = side
        stream.pix_fmt = "yuv420p"
        for f in range(frames):
            rgb = np.stack([(x + 3 * f) % 256, (y * 2) % 256, (x + y + f) % 256], -1)
            frame = av.VideoFrame.from_ndarray(rgb.astype(np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return out


# glibc malloc held in steady state: no fresh mmap (and page faults on every write) per output
# of up to 260 MB, freed memory kept for the next call: the kernels' own cost. With glibc's
# defaults every allocation over 32 MB is mapped afresh however long a run is (--default-malloc)
MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}

if __name__ == "__main__":
    if "--default-malloc" not in sys.argv and any(
        os.environ.get(k) != v for k, v in MALLOC.items()
    ):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC})
    main()

"""Benchmark `mixshard pack --clips` against the loop it replaces, in one run, whole processes.

Source: the real clips in `--videos` (default ../shared/real-videos: DMControl-GB's
`video_hard` 0-9, 352 px H.264, 500 frames each). The baseline is the loop a user writes
without mixshard, one process: PyAV decode of each video, PIL centre crop and resize to 84
bilinear, `np.save` of each clip's frames. Each run times, as whole processes (`python ...`,
start-up included), the baseline and `mixshard pack SRC OUT --clips --workers 1`; the cells
are the medians of `--runs` runs, interleaved so that a busy neighbour slows both alike.
Reported: frames/s (one worker: per core), frames per CPU second (the process and its
children, from `getrusage`: a decoder's own threads count), the ratio to the baseline, and the
sizes of the source, the baseline's `.npy` files and the pack.

`--quick` packs two short generated videos (no real clips needed): the script's own test.

    python scripts/bench_clips.py [--runs 3] [--videos DIR] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import OUT, ROOT, fmt_rate, machine, table

from mixshard.core.manifest import Manifest

REAL = ROOT.parent / "shared" / "real-videos"

# The loop `pack --clips` replaces: one process, PyAV then PIL, one .npy per clip.
BASELINE = """
import sys
from pathlib import Path

import av
import numpy as np
from PIL import Image

src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
frames = 0
for video in sorted(src.iterdir()):
    clip = []
    with av.open(str(video)) as container:
        for frame in container.decode(video=0):
            img = frame.to_image()
            side = min(img.size)
            left, top = (img.size[0] - side) // 2, (img.size[1] - side) // 2
            img = img.crop((left, top, left + side, top + side)).resize((84, 84), Image.BILINEAR)
            clip.append(np.asarray(img).transpose(2, 0, 1))
    np.save(out / (video.stem + ".npy"), np.stack(clip))
    frames += len(clip)
print(frames)
"""


def _timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of the process and its children) of a command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _quick_videos(folder: Path) -> Path:
    """Two short generated H.264 videos (for the script's own test)."""
    import av
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(2):
        with av.open(str(folder / f"video_{k}.mp4"), "w") as container:
            stream = container.add_stream("libx264", rate=25)
            stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
            for _ in range(20):
                pixels = rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)
                for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
    return folder


def _report(
    args: argparse.Namespace,
    src: Path,
    runs: int,
    cells: dict[str, list[tuple[float, float]]],
    base_out: Path,
    pack_out: Path,
) -> None:
    """Print the command, machine, the timing table and the sizes."""
    manifest = Manifest.load(pack_out)
    frames = manifest.count
    rows = []
    base_wall = statistics.median(w for w, _ in cells["baseline"])
    base_cpu = statistics.median(c for _, c in cells["baseline"])
    labels = {
        "baseline": "PyAV decode + PIL resize + np.save, a loop",
        "pack": "mixshard pack --clips --workers 1",
    }
    for name, runs_of in cells.items():
        wall = statistics.median(w for w, _ in runs_of)
        cpu = statistics.median(c for _, c in runs_of)
        rows.append([
            labels[name], frames, f"{wall:.2f}", fmt_rate(frames / wall), fmt_rate(frames / cpu),
            f"{base_wall / wall:.2f}", f"{base_cpu / cpu:.2f}",
        ])  # fmt: skip
    quick = " --quick" if args.quick else f" --runs {args.runs}"
    print(f"Command: python scripts/bench_clips.py{quick}")
    print(f"Machine: {machine()}")
    print(f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    clips = len(manifest.clips or ())
    print(f"Source: {src} ({clips} clips, {frames} frames); medians of {runs} run(s), whole "
          "processes, interleaved\n")  # fmt: skip
    headers = ["packer", "frames", "s", "frames/s (per core)", "frames per CPU s",
               "ratio to baseline", "ratio (CPU)"]  # fmt: skip
    print(table(headers, rows))
    print()
    print(table(
        ["what", "bytes", "bytes per frame"],
        [[f"source ({src.name})", f"{_bytes(src):,}", f"{_bytes(src) / frames:,.0f}"],
         ["baseline .npy files", f"{_bytes(base_out):,}", f"{_bytes(base_out) / frames:,.0f}"],
         ["clip pack (shards + index.json)", f"{_bytes(pack_out):,}",
          f"{_bytes(pack_out) / frames:,.0f}"]],
    ))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--videos", type=Path, default=REAL)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    src = _quick_videos(OUT / "src" / "quick-videos") if args.quick else args.videos
    if not src.is_dir():
        sys.exit(f"no videos in {src}: pass --videos DIR (or --quick)")
    work = OUT / "clips"
    base_out, pack_out = work / "baseline", work / "pack"
    cells: dict[str, list[tuple[float, float]]] = {"baseline": [], "pack": []}
    commands = {
        "baseline": [sys.executable, "-c", BASELINE, str(src), str(base_out)],
        "pack": [sys.executable, "-m", "mixshard", "pack", str(src), str(pack_out), "--clips",
                 "--workers", "1", "--quiet"],
    }  # fmt: skip
    for _ in range(runs):
        for name, argv in commands.items():
            shutil.rmtree(base_out if name == "baseline" else pack_out, ignore_errors=True)
            cells[name].append(_timed(argv))
    _report(args, src, runs, cells, base_out, pack_out)


if __name__ == "__main__":
    main()

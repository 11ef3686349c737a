"""Every benchmark script in its --quick mode, so that none can rot unnoticed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from mixshard.augment.kernels import fused

ROOT = Path(__file__).resolve().parent.parent


def test_bench_fidelity_quick(tmp_path):
    script = ROOT / "scripts" / "bench_fidelity.py"
    res = subprocess.run(
        [sys.executable, str(script), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith(f"Command: python scripts/bench_fidelity.py --quick --out {tmp_path}\n")
    header = (
        "| source of the 84 px images | mean | std | detail p10 | detail median | detail p90 "
        "| p10 / median / p90 vs reference | colour hist. distance | disk | per 1.8M images |"
    )
    lines = out.splitlines()
    first = lines.index(header)
    assert lines[first + 1] == "|" + "|".join(["---"] * 10) + "|"
    rows = lines[first + 2 : first + 8]
    assert rows[0].startswith("| reference: `RandomResizedCrop(84)` per draw | ")
    assert "| 1.00 / 1.00 / 1.00 | 0.000 |" in rows[0]
    assert rows[1].startswith("| pack `--crop center` (default) | ")
    assert rows[1].endswith("| 38.2 GB |") and rows[5].endswith("| 152.7 GB |")
    assert "Goals for the reference-like configurations:" in out
    assert (tmp_path / "fidelity.md").read_text().splitlines()[4] == header


def quick(script: str, tmp_path: Path, *args: str) -> str:
    """Run a benchmark in its --quick mode, writing under tmp_path; its stdout."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MIXSHARD_BENCH_OUT": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_bench_pack_quick(tmp_path):
    out = quick("bench_pack.py", tmp_path)
    assert (
        "| source | packer | workers | img/s | img/s per core | ratio to naive | "
        "img/s per CPU second | ratio to naive (CPU) |"
    ) in out
    main = out.split("Paired:")[0]
    for packer in ("naive PIL loop", "mixshard pack, folder", "mixshard pack, .tar",
                   "mixshard pack, .zip"):  # fmt: skip
        assert main.count(f"| {packer} | 1 |") == 2, packer
    assert main.count("| mixshard pack, folder | 2 |") == 2
    assert "Packing all of Places365-Standard (1,839,960 images) from its .tar" in out
    assert "| rate used \\ cores | 1 | 2 | 8 | 16 | 32 | 64 |" in out
    share = r"With --workers 2 on the \d+-shard source, per image: the pack process itself \d+ µs"
    assert re.search(share, out)
    assert "| --workers N on N cores, capped by the pack process | - | " in out
    assert "| source | naive loop img/s per CPU s | pack's decode img/s per CPU s | ratio |" in out
    assert "| source | packer | fixed cost (CPU) | img/s per CPU s beyond it | ratio |" in out
    assert "| source | packer | workers | ratio to naive (CPU), paired |" in out
    assert "| 256 px (Places365-like) | mixshard pack, folder | 1 | " in out.split("Paired:")[1]


def test_bench_fidelity_decode_quick(tmp_path):
    out = quick("bench_fidelity.py", tmp_path, "--decode")
    assert out.count("| `--crop center` | ") == 3 and out.count("| `--crop random` | ") == 3
    for decode in ("full decode, PIL's resize (reference)", "full decode, pack's resize",
                   "pack's decode (DCT-scaled) and resize"):  # fmt: skip
        assert f"| `--crop center` | {decode} | " in out, decode
    for crop in ("center", "random"):
        assert f"* `--crop {crop}`, pack's decode (DCT-scaled) and resize: detail p10 " in out


def test_bench_stream_quick(tmp_path):
    out = quick("bench_stream.py", tmp_path)
    assert "| pipeline | num_workers | img/s | img/s per core | vs (a) | vs (b) |" in out
    for name in ("(a) reference", "(b) plain webdataset", "order=global", "order=block"):
        assert out.count(name) == 1, name
    assert "RSS of a fresh process running ShardStream(infinite=True)" in out


def test_bench_overlay_quick(tmp_path):
    out = quick("bench_overlay.py", tmp_path, "--device", "cpu")
    for row in ("obs.clone() (floor)", "mixshard.blend", "Overlay, device cache", "Overlay, pool"):
        assert f"| 16 | {row}" in out, row


def test_bench_cold_quick(tmp_path):
    out = quick("bench_cold.py", tmp_path)
    assert out.splitlines()[0] == (
        "| case | what | images/s | 2nd half of the pass, img/s | share of (i) "
        "| first batch/call s | call µs | call / obs.clone() | peak RSS MB |"
    )
    assert "| cold (quick) | (iii) loader, order=block |" in out


def test_bench_compat_quick(tmp_path):
    out = quick("bench_compat.py", tmp_path)
    assert "| device | N | per call | ms | vs obs.clone() |" in out
    assert "| cpu | 16 | obs.clone() |" in out and "| 1.00x |" in out
    for name in ("composite, per-pixel bool mask", "compat.random_overlay, splice"):
        assert f"| cpu | 16 | {name} |" in out


def test_bench_clips_quick(tmp_path):
    out = quick("bench_clips.py", tmp_path)
    assert out.startswith("Command: python scripts/bench_clips.py --quick\n")
    assert "(2 clips, 40 frames)" in out
    assert "| PyAV decode + PIL resize + np.save, a loop | 40 | " in out
    assert "| mixshard pack --clips --workers 1 | 40 | " in out
    assert "| baseline .npy files | 846,976 | 21,174 |" in out  # two 128-byte .npy headers


def test_bench_backgrounds_quick(tmp_path):
    out = quick("bench_backgrounds.py", tmp_path)
    assert "| torch threads | what | ms per call | vs baseline | goal |" in out
    assert "Clip pack: 1 clips, 40 frames of 84 px" in out
    # the kernels' own cost: no fresh mapping (and page faults) per output
    assert "Malloc: MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1099511627776\n" in out
    for row in (
        "composite, no mask, alpha 0.5",
        "composite, per-pixel bool mask (green screen)",
        "composite, per-pixel bool mask, alpha 0.5",
        "step + images",
        "reset of 8 of 64, bool mask",
        "DMC-GB: decode the clip + 40 x F.interpolate, per env",
        "Backgrounds: reset + 40 x (step + images), per env of 64",
        # the whole step (mask + composite) of issue 47, each source, layout and dtype
        "whole step, green screen (keys.green_screen), NCHW 64x9x84x84 uint8",
        "whole step, segmentation ids (keys.from_segmentation), NHWC 64x84x84x9 float32",
        "whole step, depth (keys.from_depth), NHWC 64x32x32x3 uint8",
        "mask, then composite: masks.green_screen + composite, NCHW 64x9x84x84 uint8",
        "step + reset of 3 of 64 (5%), vs clone of 64x32x32x3 uint8",
    ):
        assert f"| {row} |" in out, row


def test_bench_backgrounds_can_run_as_a_users_process_does(tmp_path):
    out = quick("bench_backgrounds.py", tmp_path, "--only-step", "--default-malloc", "--avx2")
    assert "Malloc: glibc's defaults\n" in out
    assert "| whole step, depth (keys.from_depth), NHWC 64x32x32x3 uint8 |" in out
    if fused._lerp is not None:  # the AVX-512 loops off, and said so
        assert "Compiled pass: AVX2 or narrower loops; OMP_WAIT_POLICY " in out


def test_bench_mixing_quick(tmp_path):
    out = quick("bench_mixing.py", tmp_path)
    assert out.startswith("Command: python scripts/bench_mixing.py --quick\n")
    shares = [line for line in out.splitlines() if line.startswith("| 0.")]
    assert len(shares) == 12 and all(line.endswith("| met |") for line in shares)
    assert out.count("composited obs | step 357 | equal |") == 2
    assert out.count("batches | call 123 | equal |") == 6 and "refused" not in out
    sizes = [line for line in out.splitlines() if " envs | " in line]
    assert len(sizes) == 3 and all(line.endswith("| met |") for line in sizes)
    assert out.count("| Overlay, ") == 12 and "NOT met" not in out and "DIFFERENT" not in out

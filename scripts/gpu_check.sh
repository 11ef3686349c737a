#!/usr/bin/env bash
# The CUDA checks, in one call: the tests marked `cuda` (pytest -m cuda; among them
# tests/test_device.py runs the pool, the prefetch ring and Overlay with each cache under
# torch.cuda.set_sync_debug_mode("error"): no hot call may make a host sync), the CUDA rows of
# scripts/bench_overlay.py (blend vs the reference blend and obs.clone(); Overlay per call with
# the device cache, the pool and the stream; peak extra device memory), scripts/bench_compat.py
# (composite and each compat drop-in per call at N=128/256, against SGQN's and MaDi's own
# pastes), and prefetch(loader, "cuda") against a plain .to("cuda"). It makes its own data
# (generated JPEGs, packed) and
# writes its outputs under $OUT (default ./gpu-out): machine.txt, pytest_cuda.txt,
# sync_debug.txt, bench_overlay_cuda.txt (Overlay per call at N=128 and 256 with the device
# cache, the pool and the stream), bench_compat_cuda.txt, prefetch.txt, masks.txt
# (masks.green_screen + composite at 4,096 environments, issue 39), backgrounds_cuda.txt
# (Backgrounds at 4,096 environments: composite, step + images and a reset, against
# obs.clone(), under set_sync_debug_mode("error")), whole_step_cuda.txt (issue 47: the whole
# step, a key of mixshard.keys and the composite, at 4,096 x 128 x 128 x 3 channels-last uint8
# and float32, goal under 250 us, under set_sync_debug_mode("error")).
#
# webdataset and braceexpand may be missing where torch is: put their wheels in .whl/ and they
# are installed into /tmp/site first, e.g.
#   pip download --no-deps --only-binary=:all: -d .whl webdataset braceexpand psutil
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export MIXSHARD_BENCH_OUT=${MIXSHARD_BENCH_OUT:-/tmp/mixshard-bench}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c \
  "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } \
  2>&1 | tee "$OUT/machine.txt"
python3 -m pytest -m cuda -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest_cuda.txt"
python3 -m pytest -m cuda -v -p no:cacheprovider tests/test_device.py 2>&1 | tee "$OUT/sync_debug.txt"
python3 scripts/bench_overlay.py --device cuda --runs 50 2>&1 | tee "$OUT/bench_overlay_cuda.txt"
python3 scripts/bench_compat.py --device cuda --runs 50 2>&1 | tee "$OUT/bench_compat_cuda.txt"
python3 - <<'PY' 2>&1 | tee "$OUT/prefetch.txt"
# host-to-device copy rate of prefetch(loader) against a plain synchronous .to(device)
import os, time, torch, mixshard
from pathlib import Path
pack = Path(os.environ["MIXSHARD_BENCH_OUT"]) / "overlay-pack-3000"  # made by bench_overlay
for label, wrap in [("plain .to(cuda)", lambda it: (b.to("cuda") for b in it)),
                    ("mixshard.prefetch", lambda it: mixshard.prefetch(it, "cuda"))]:
    it = wrap(iter(mixshard.loader(pack, 256, num_workers=4, infinite=True)))
    for _ in range(20): next(it)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(500): (next(it).float() * 2).sum()
    torch.cuda.synchronize()
    print(f"{label}: {500 * 256 / (time.perf_counter() - t0):,.0f} images/s")
PY
python3 - <<'PY' 2>&1 | tee "$OUT/masks.txt"
# issue 39: masks.green_screen + composite for 4,096 environments (3 frames, 84 px, uint8 obs),
# against obs.clone(), with no host sync in the timed calls
import time, torch
from mixshard import composite, masks
g = torch.Generator(device="cuda").manual_seed(0)
obs = torch.randint(0, 256, (4096, 9, 84, 84), generator=g, device="cuda", dtype=torch.uint8)
obs[:, 1::3, :42] = 204  # a green half
bg = torch.randint(0, 256, (4096, 3, 84, 84), generator=g, device="cuda", dtype=torch.uint8)
step = lambda: composite(obs, bg, masks.green_screen(obs))
cpu = masks.green_screen(obs[:64].cpu())
assert torch.equal(masks.green_screen(obs[:64]).cpu(), cpu), "cuda mask differs from the cpu's"
for label, fn in [("obs.clone()", obs.clone), ("green_screen + composite", step),
                  ("green_screen", lambda: masks.green_screen(obs))]:
    for _ in range(5): fn()
    torch.cuda.synchronize(); torch.cuda.set_sync_debug_mode("error")
    t0 = time.perf_counter()
    for _ in range(50): fn()
    torch.cuda.set_sync_debug_mode(0); torch.cuda.synchronize()
    print(f"{label}: {(time.perf_counter() - t0) / 50 * 1e3:.3f} ms per call, 4096 envs")
PY
python3 - <<'PY' 2>&1 | tee "$OUT/backgrounds_cuda.txt"
# Backgrounds at 4,096 environments on CUDA, every call under set_sync_debug_mode("error")
import sys, tempfile, time, torch, mixshard
from pathlib import Path
sys.path.insert(0, "tests")
from helpers import clip_pack
DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda"
pack = clip_pack(Path(tempfile.mkdtemp()), [50] * 20, size=84, block_size=64)
n = 4096
bg = mixshard.Backgrounds(pack, n, frames=3, playback="pingpong", flip=True, device=DEV)
obs = torch.rand(n, 9, 84, 84, device=DEV) * 255
keep = torch.rand(n, 1, 84, 84, device=DEV) < 0.3
done = torch.rand(n, device=DEV) < 256 / n
sync = torch.cuda.synchronize if DEV == "cuda" else (lambda: None)
def seconds(fn, runs=50):
    for _ in range(5): fn()
    sync(); t0 = time.perf_counter()
    for _ in range(runs): fn()
    sync(); return (time.perf_counter() - t0) / runs
clone = seconds(obs.clone)
if DEV == "cuda": torch.cuda.set_sync_debug_mode("error")
try:
    rows = {"composite, per-pixel bool mask": seconds(lambda: bg.composite(obs, keep)),
            "composite, no mask, alpha 0.5": seconds(lambda: bg.composite(obs, alpha=0.5)),
            "step + images": seconds(lambda: (bg.step(), bg.images())),
            "reset of ~256 (bool mask)": seconds(lambda: bg.reset(done))}
finally:
    if DEV == "cuda": torch.cuda.set_sync_debug_mode("default")
print(f"obs.clone() of {n} x 9 x 84 x 84 float32: {clone * 1e3:.3f} ms")
for name, sec in rows.items():
    print(f"Backgrounds {name}: {sec * 1e3:.3f} ms ({sec / clone:.2f}x obs.clone())")
PY
python3 - <<'PY' 2>&1 | tee "$OUT/whole_step_cuda.txt"
# The whole step (issue 47) at 4,096 x 128 x 128 x 3 channels-last on CUDA, each key, every
# call under set_sync_debug_mode("error"); goal: under 250 us a step on an H200
import sys, tempfile, time, torch, mixshard
from pathlib import Path
sys.path.insert(0, "tests"); sys.path.insert(0, "scripts")
from helpers import clip_pack
from wholestep import scene, GREEN, FAR
from mixshard import keys
DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
pack = clip_pack(Path(tempfile.mkdtemp()), [50] * 20, size=128, block_size=64)
bg = mixshard.Backgrounds(pack, n, frames=1, playback="loop", device=DEV)
sync = torch.cuda.synchronize if DEV == "cuda" else (lambda: None)
def seconds(fn, runs=50):
    for _ in range(5): fn()
    sync(); t0 = time.perf_counter()
    for _ in range(runs): fn()
    sync(); return (time.perf_counter() - t0) / runs
for dtype in (torch.uint8, torch.float32):
    obs, seg, depth = (t.to(DEV) for t in scene(n, 1, 128, "NHWC", dtype))
    clone = seconds(obs.clone)
    done = torch.rand(n, device=DEV) < 0.05
    sources = {"green screen": keys.green_screen(), "colour key": keys.color_key(GREEN, 60),
               "segmentation ids": keys.from_segmentation(seg, background=[0]),
               "depth": keys.from_depth(depth, FAR)}
    bg.composite(obs, sources["green screen"], layout="NHWC")  # (the range check: one sync)
    if DEV == "cuda": torch.cuda.set_sync_debug_mode("error")
    try:
        rows = {name: seconds(lambda key=key: bg.composite(obs, key, layout="NHWC"))
                for name, key in sources.items()}
        rows["step + reset of 5%"] = seconds(lambda: (bg.step(), bg.reset(done)))
    finally:
        if DEV == "cuda": torch.cuda.set_sync_debug_mode("default")
    print(f"obs.clone() of {n} x 128 x 128 x 3 {dtype}: {clone * 1e6:.0f} us")
    for name, sec in rows.items():
        what = name if name.startswith("step") else f"whole step, {name}"
        goal = "" if name.startswith("step") else f" (goal < 250 us: {'met' if sec < 250e-6 else 'NOT met'})"
        print(f"{what}: {sec * 1e6:.0f} us ({sec / clone:.2f}x obs.clone()){goal}")
PY

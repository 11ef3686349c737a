#!/usr/bin/env bash
# The GPU checks, as one script for a lent GPU machine (the `device` tool's `run`):
#   pytest -m cuda, then the CUDA rows of bench_overlay.py and a prefetch timing.
# Results go to $OUT (default ./gpu-out). That machine has torch but not webdataset: carry its
# wheels in .whl/ (see /work/.library/device/README.md), e.g.
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#       webdataset==1.0.2 braceexpand==0.1.7
# then: run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=420)
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
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c \
  "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } \
  2>&1 | tee "$OUT/machine.txt"
python3 -m pytest -m cuda -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest_cuda.txt"
python3 scripts/bench_overlay.py --device cuda --runs 50 2>&1 | tee "$OUT/bench_overlay_cuda.txt"
python3 - <<'PY' 2>&1 | tee "$OUT/prefetch.txt"
# host-to-device copy rate of prefetch(loader) against a plain synchronous .to(device)
import time, torch, mixshard
from pathlib import Path
pack = Path("bench-out/stream-pack")
for label, wrap in [("plain .to(cuda)", lambda it: (b.to("cuda") for b in it)),
                    ("mixshard.prefetch", lambda it: mixshard.prefetch(it, "cuda"))]:
    it = wrap(iter(mixshard.loader(pack, 256, num_workers=4, infinite=True)))
    for _ in range(20): next(it)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(500): (next(it).float() * 2).sum()
    torch.cuda.synchronize()
    print(f"{label}: {500 * 256 / (time.perf_counter() - t0):,.0f} images/s")
PY

"""`make demo`: the whole job on an embedded default, no download and no GPU needed.

1. generate a small procedural ImageFolder (5 classes, mixed sizes, formats and modes),
2. `mixshard pack` it into 84 px uint8 shards,
3. print `mixshard inspect` of the result.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from mixshard.synthetic import make_image_folder

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
SRC = DEMO / "src"
PACK = DEMO / "pack"


def run(*args: str) -> None:
    """Run `python -m mixshard ARGS`, echoing the command as a user would type it."""
    print(f"$ mixshard {shlex.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "mixshard", *args], check=True)


def main() -> None:
    t0 = time.perf_counter()
    marker = SRC / ".complete"
    if not marker.exists():
        print(f"generating a procedural ImageFolder in {SRC.relative_to(ROOT)} ...", flush=True)
        paths = make_image_folder(SRC, classes=5, per_class=60, seed=0)
        marker.touch()
        print(f"  {len(paths)} images in 5 classes", flush=True)
    run("pack", str(SRC.relative_to(ROOT)), str(PACK.relative_to(ROOT)), "--overwrite")
    run("inspect", str(PACK.relative_to(ROOT)))
    print(f"demo finished in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()

"""`make demo` runs scripts/demo.py: a small run of it writes the overlay figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent


def test_demo_writes_the_overlay_figure(tmp_path):
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--out", str(tmp_path), "--quick"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert f"wrote {tmp_path / 'overlay.png'}: 6 rows" in res.stdout
    assert "images/s" in res.stdout and "mixshard inspect" in res.stdout
    img = Image.open(tmp_path / "overlay.png")
    # 6 rows of 84 px tiles with 4 px gaps, drawn at 2x: 3 obs frames | background | 3 blended
    assert img.size[1] == (6 * 84 + 5 * 4) * 2
    assert img.size[0] == (7 * 84 + 4 * 1 + 2 * 6) * 2

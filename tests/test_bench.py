"""The benchmark scripts that are cheap enough for the suite, in their --quick modes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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

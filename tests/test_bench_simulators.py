"""`scripts/bench_simulators.py --quick`: it runs wherever the simulators are missing, and says
for each one whether it ran or why it could not."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_run_names_each_simulator_it_ran_or_why_not(tmp_path):
    # dm_control: the quickest of the real ones where it is installed (a few seconds)
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_simulators.py"), "--quick"]
        + ["--only", "dm_control", "--only", "maniskill3", "--timeout", "100"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "MIXSHARD_BENCH_OUT": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert out.startswith("Command: python scripts/bench_simulators.py --quick --only dm_control")
    assert "| simulator | version | envs | RGB step (ms) | + ids (ms) | + background (ms) |" in out
    assert re.search(r"load average before/after \d+\.\d/\d+\.\d", out)
    for name, module in (("dm_control", "dm_control"), ("maniskill3", "mani_skill")):
        ran = re.search(
            rf"^\| {name} \| [\d.]+ \| \d+ \| [\d.-]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", out, re.M
        )
        missing = f"could not run {name}: "
        if importlib.util.find_spec(module) is None:
            assert f"{missing}not installed (pip install" in out
        else:  # installed: a row, or a reason (ManiSkill3 without its Vulkan driver)
            assert ran or missing in out
    assert (tmp_path / "bench_simulators.json").is_file()

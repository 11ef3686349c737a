"""scripts/bench_peers.py's round order (the peers themselves are not installed here)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import bench_peers  # noqa: E402


def test_every_pair_runs_each_way_as_often_over_any_even_number_of_rounds():
    for n in (2, 3, 5):
        libs = [f"lib{i}" for i in range(n)]
        for rounds in (2, 4, 6, 10):
            orders = [bench_peers.round_order(libs, r) for r in range(rounds)]
            assert all(sorted(o) == libs for o in orders)
            for a, b in itertools.permutations(libs, 2):
                before = sum(o.index(a) < o.index(b) for o in orders)
                assert before == rounds // 2, (n, rounds, a, b)


def test_each_library_runs_first_and_after_several_others():
    libs = ["mixshard", "ffcv", "base"]
    orders = [bench_peers.round_order(libs, r) for r in range(6)]
    assert sorted(o[0] for o in orders) == sorted(libs * 2)
    for lib in libs:
        before = {o[o.index(lib) - 1] for o in orders if o.index(lib) > 0}
        assert len(before) == 2, lib

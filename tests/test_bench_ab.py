"""scripts/bench_ab.py: the figures it reads out of a benchmark's printed tables, and its verdict
on B against A."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import bench_ab  # noqa: E402

COLD = """# bench_cold on 2 cores
| case | what | images/s | share of (i) | first batch/call s | call µs | peak RSS MB |
|---|---|---|---|---|---|---|
| cold | (i) sequential read | 123,456 | 100% |  |  | 300 |
| warm | pool call / cached call, per run: 0.91, 1.02 |  |  |  | 0.95 |  |
not a table line

| pipeline | num_workers | img/s | vs (a) |
|---|---|---|---|
| (c) loader | 0 | 1,000 | 2.5x |
| (c) loader | 2 | 1,900 | 4.0x |
"""


def test_figures_name_rows_by_their_text_cells_and_figures_by_their_headers():
    assert bench_ab.figures(COLD) == {
        ("cold; (i) sequential read", "images/s"): 123456.0,
        ("cold; (i) sequential read", "share of (i)"): 100.0,
        ("cold; (i) sequential read", "peak RSS MB"): 300.0,
        # decimals in a row's text are per-run values: the name stays the same from run to run
        ("warm; pool call / cached call, per run: #, #", "call µs"): 0.95,
        # a second table; a num_workers cell names the row, not a figure
        ("table 2: (c) loader; 0", "img/s"): 1000.0,
        ("table 2: (c) loader; 0", "vs (a)"): 2.5,
        ("table 2: (c) loader; 2", "img/s"): 1900.0,
        ("table 2: (c) loader; 2", "vs (a)"): 4.0,
    }


def test_verdict_within_tolerance_else_by_the_headers_direction():
    assert bench_ab.verdict("images/s", 0.95, 0.10) == "yes"
    assert bench_ab.verdict("images/s", 0.85, 0.10) == "no, WORSE"
    assert bench_ab.verdict("img/s", 1.2, 0.10) == "no, better"
    assert bench_ab.verdict("call µs", 1.2, 0.10) == "no, WORSE"
    assert bench_ab.verdict("first batch/call s", 0.8, 0.10) == "no, better"
    assert bench_ab.verdict("peak RSS MB", 1.3, 0.10) == "no, WORSE"
    assert bench_ab.verdict("bytes", 1.3, 0.10) == "no"  # direction unknown


def test_a_refs_modules_are_byte_compiled_whatever_the_environment_says(tmp_path, monkeypatch):
    # with PYTHONDONTWRITEBYTECODE set, a fresh worktree compiled every module it imported in
    # every run: a first call timed the compiler on the ref's source size
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    (tmp_path / "mixshard" / "sub").mkdir(parents=True)
    (tmp_path / "mixshard" / "sub" / "mod.py").write_text("X = 1\n")
    bench_ab.byte_compile(tmp_path)
    tag = sys.implementation.cache_tag
    assert [p.name for p in (tmp_path / "mixshard" / "sub" / "__pycache__").iterdir()] == [
        f"mod.{tag}.pyc"
    ]


def test_a_ref_runs_its_own_script_unless_told_to_run_this_trees(tmp_path):
    ref, repo = tmp_path / "ref", tmp_path / "repo"
    for folder in (ref, repo):
        (folder / "scripts").mkdir(parents=True)
        (folder / "scripts" / "bench_x.py").write_text("")
    own = bench_ab.script_of(ref, repo, "bench_x.py --runs 2")
    assert own[1:] == [str(ref / "scripts" / "bench_x.py"), "--runs", "2"]
    here = bench_ab.script_of(ref, repo, "bench_x.py --runs 2", own=False)
    assert here[1:] == [str(repo / "scripts" / "bench_x.py"), "--runs", "2"]

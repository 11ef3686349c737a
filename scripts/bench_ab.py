"""Run benchmarks on two git refs of mixshard, alternated, and compare their figures row by row.

    python scripts/bench_ab.py REF_A REF_B --bench "bench_cold.py PACK --runs 1" \\
        --bench "bench_stream.py --runs 3" --bench "bench_overlay.py --runs 10" --rounds 3

Each ref is checked out with `git worktree add --detach` in a temporary folder (REF `.` is this
working tree as it is, uncommitted changes included). A compiled module (`mixshard/**/*.c`) is
copied from this tree when its C source is the same in the ref, else built there
(`setup() build_ext --inplace`, from pyproject.toml's ext-modules), and its modules are
byte-compiled (as an install does). Then, for each round, each benchmark runs on A and on B:
`python <ref>/scripts/<script> ARGS...` (the ref's own copy of the script; this tree's where
the ref has none, or for both refs with `--this-scripts`, when this tree's copy measures more)
with `PYTHONPATH=<ref>`, in the ref's folder
(which ref goes first alternates by round and benchmark: the first of a pair ran faster),
and `MIXSHARD_BENCH_OUT` one folder shared by both refs (the same generated sources and packs:
`--separate-out` gives each ref its own).

Figures are read from the markdown tables the benchmarks print (`| a | b |` lines): a row is
named by its first cell and its other non-numeric cells (decimals in them replaced by `#`), a
figure is any numeric cell (`1,234`, `2.05x`, `97%`, `0.52`), named by its column's header
(numeric cells under N, num_workers, workers or threads name the row).
A figure with the same value in every run is left out. Printed per figure: median of A, median
of B, B/A, and whether B is within 10% of A (`--tolerance`), else better or worse when the
header tells the direction (img/s, images/s: higher is better; s, µs, MB: lower). Each run's
output is kept in the temporary folder's `logs/` (printed; `--keep` keeps the worktrees too).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import table

HERE = Path(__file__).resolve().parent
KEY_HEADERS = {"n", "num_workers", "workers", "threads"}  # numeric cells that name a row
NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+\s*(x|%|s|ms|µs|MB|GB)?$")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def checkout(repo: Path, ref: str, where: Path) -> tuple[Path, str]:
    """A worktree of `ref` at `where` (or `repo` itself for `.`), its compiled modules in
    place; returns (folder, what it is)."""
    if ref == ".":
        byte_compile(repo)
        return repo, f"working tree at {git('rev-parse', '--short', 'HEAD', cwd=repo)} + changes"
    sha = git("rev-parse", "--verify", f"{ref}^{{commit}}", cwd=repo)
    git("worktree", "add", "--detach", str(where), sha, cwd=repo)
    build = False
    for src in where.glob("mixshard/**/*.c"):
        mine = repo / src.relative_to(where)
        built = sorted(mine.parent.glob(f"{src.stem}.*.so"))
        if mine.exists() and built and filecmp.cmp(src, mine, shallow=False):
            shutil.copy2(built[0], src.parent / built[0].name)
        else:
            build = True
    if build:
        print(f"building the compiled modules of {ref} ...", file=sys.stderr)
        cmd = [sys.executable, "-c", "from setuptools import setup; setup()", "build_ext"]
        subprocess.run([*cmd, "--inplace"], cwd=where, check=True, capture_output=True)
    byte_compile(where)
    return where, f"{ref} = {sha[:10]}"


def byte_compile(folder: Path) -> None:
    """Write the `.pyc` of `folder`'s package, as an install does: with PYTHONDONTWRITEBYTECODE
    set, a fresh worktree would compile every module it imports in every run, and a startup
    figure (a first batch, a first call) would time the compiler on the ref's source size."""
    cmd = [sys.executable, "-m", "compileall", "-q", str(folder / "mixshard")]
    subprocess.run(cmd, check=True, capture_output=True)


def script_of(folder: Path, repo: Path, bench: str, own: bool = True) -> list[str]:
    """The command of one benchmark run in `folder`: its own copy of the script if it has one
    (and `own`), else this tree's."""
    name, *args = shlex.split(bench)
    for base in ((folder / "scripts",) if own else ()) + (repo / "scripts", HERE):
        if (base / name).exists():
            return [sys.executable, str(base / name), *args]
    raise SystemExit(f"bench_ab: no script {name} in {folder / 'scripts'} nor {HERE}")


def figures(text: str) -> dict[tuple[str, str], float]:
    """{(row name, column header): value} of every markdown table in `text`."""
    found: dict[tuple[str, str], float] = {}
    lines = text.splitlines()
    t = 0
    for i, line in enumerate(lines):
        if not (line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---")):
            continue
        t += 1
        headers = cells(line)
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            got = cells(row)
            name = [got[0]] + [c for h, c in zip(headers[1:], got[1:]) if keyed(h, c)]
            key = re.sub(r"\d+\.\d+", "#", "; ".join(name))
            key = key if t == 1 else f"table {t}: {key}"
            for head, c in zip(headers[1:], got[1:]):
                if c and not keyed(head, c):
                    found[key, head] = float(re.sub(r"[^\d.+-]", "", c.replace("µs", "")))
    return found


def keyed(header: str, cell: str) -> bool:
    """Whether a cell names its row rather than holds a figure."""
    return bool(cell) and (header.lower() in KEY_HEADERS or not NUMBER.match(cell))


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def verdict(header: str, ratio: float, tolerance: float) -> str:
    if abs(ratio - 1) <= tolerance:
        return "yes"
    h = header.lower()
    higher = any(u in h for u in ("/s", "share", "vs reference", "vs (", "vs mapped"))
    lower = not higher and any(u in h for u in (" s", "µs", "mb", "seconds", "clone"))
    if not (higher or lower):
        return "no"
    return "no, better" if (ratio > 1) == higher else "no, WORSE"


def run(args: argparse.Namespace) -> None:
    repo = Path(git("rev-parse", "--show-toplevel", cwd=Path.cwd()))
    tmp = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    (tmp / "logs").mkdir()
    sides, added = {}, []
    try:
        for side, ref in (("A", args.ref_a), ("B", args.ref_b)):
            folder, what = checkout(repo, ref, tmp / side)
            sides[side] = (folder, what)
            if folder != repo:
                added.append(folder)
            print(f"{side}: {what} ({folder})")
        print(f"logs: {tmp / 'logs'}\n")
        got: dict[tuple[int, str], list[dict]] = {}
        for r in range(args.rounds):
            for b, bench in enumerate(args.bench):
                # which ref goes first alternates by round: the first of a pair read 5-15%
                # faster on the 2-core VM (its page cache and CPU state), whatever the code
                order = list(sides.items()) if (r + b) % 2 == 0 else list(sides.items())[::-1]
                for side, (folder, _) in order:
                    out = tmp / ("out" if not args.separate_out else f"out-{side}")
                    env = {**os.environ, "PYTHONPATH": str(folder), "MIXSHARD_BENCH_OUT": str(out)}
                    cmd = script_of(folder, repo, bench, own=not args.this_scripts)
                    t0 = time.perf_counter()
                    done = subprocess.run(
                        cmd, cwd=folder, env=env, capture_output=True, text=True, check=False
                    )
                    took = time.perf_counter() - t0
                    log = tmp / "logs" / f"bench{b + 1}-{side}-round{r + 1}.txt"
                    log.write_text(done.stdout + "\n--- stderr\n" + done.stderr)
                    if done.returncode != 0:
                        raise SystemExit(f"bench_ab: {cmd} failed on {side}, see {log}")
                    found = figures(done.stdout)
                    print(f"round {r + 1} {side} {bench}: {took:.0f} s, {len(found)} figures")
                    got.setdefault((b, side), []).append(found)
        report(args, got)
    finally:
        if not args.keep:
            for folder in added:
                git("worktree", "remove", "--force", str(folder), cwd=repo)


def report(args: argparse.Namespace, got: dict[tuple[int, str], list[dict]]) -> None:
    headers = ["row", "figure", "median A", "median B", "B/A", f"within {args.tolerance:.0%}?"]
    headers.append("runs A / runs B")
    for b, bench in enumerate(args.bench):
        a_runs, b_runs = got[b, "A"], got[b, "B"]
        keys = list(dict.fromkeys(k for run in a_runs + b_runs for k in run))
        rows = []
        for key in keys:
            va = [run[key] for run in a_runs if key in run]
            vb = [run[key] for run in b_runs if key in run]
            if len(set(va + vb)) == 1 and va and vb:
                continue  # a constant (N, num_workers, ...)
            ma = statistics.median(va) if va else None
            mb = statistics.median(vb) if vb else None
            ratio = mb / ma if ma and mb is not None else None
            ok = verdict(key[1], ratio, args.tolerance) if ratio is not None else "only one side"
            runs = " / ".join(", ".join(fmt(v) for v in vs) for vs in (va, vb))
            rows.append([key[0], key[1], fmt(ma), fmt(mb), f"{ratio:.2f}" if ratio else "", ok])
            rows[-1].append(runs)
        print(f"\n{bench}: {args.rounds} rounds, A then B")
        print(table(headers, rows) if rows else "(no figures found in its tables)")


def fmt(v: float | None) -> str:
    return "" if v is None else f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ref_a")
    parser.add_argument("ref_b")
    parser.add_argument("--bench", action="append", required=True, help="SCRIPT ARGS...")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--separate-out", action="store_true", help="one bench-out per ref")
    parser.add_argument("--keep", action="store_true", help="keep the worktrees")
    parser.add_argument(
        "--this-scripts", action="store_true", help="run this tree's scripts on both refs"
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()

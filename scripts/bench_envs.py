"""One cell of `bench_cold.py` under several environments, alternated round by round: the A/B of
a read path that an environment switch turns off (`MIXSHARD_MMAP=0`: reads without mappings).

    python scripts/bench_envs.py PACK --kind pread --cold \\
        --env "" --env "MIXSHARD_MMAP=0" --rounds 3

Each `--env` is one variant: space-separated `NAME=VALUE`s added to this environment (`""`: as
it is). `--kind` is a cell of bench_cold.py (`pread`: the global order, `in_memory=False`;
`block`, `global`, `seq`, ...); each cell runs in a fresh process after the pack's files are
evicted from the page cache (`--cold`) or read into it. Prints the medians per variant and
their ratio to the first variant's; writes bench-out/bench_envs.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from bench_cold import cell, shard_files
from benchlib import OUT, fmt_rate, machine, table


def with_env(variant: str, fn):
    pairs = dict(kv.split("=", 1) for kv in variant.split())
    saved = {k: os.environ.get(k) for k in pairs}
    os.environ.update(pairs)
    try:
        return fn()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pack", type=Path)
    parser.add_argument("--kind", default="pread", help="a bench_cold.py cell")
    parser.add_argument(
        "--env", action="append", required=True, help="NAME=VALUE ... (one variant)"
    )
    parser.add_argument("--cold", action="store_true", help="evict the pack before each cell")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=30, help="seconds per cell at most")
    args = parser.parse_args()
    count = json.loads((args.pack / "index.json").read_text())["count"]
    done: dict[str, list[dict]] = {v: [] for v in args.env}
    kw = dict(cold="evict" if args.cold else "", procs=None, budget=args.budget, limit=count)
    for r in range(args.rounds):
        for variant in args.env:
            if not args.cold:
                for path in shard_files(args.pack):
                    path.read_bytes()
            got = with_env(variant, lambda: cell(args.kind, args.pack, **kw))
            got["rate"] = got["images"] / got["seconds"]
            done[variant].append(got)
            print(f"round {r + 1} [{variant}]: {fmt_rate(got['rate'])} images/s", flush=True)
    base = statistics.median(g["rate"] for g in done[args.env[0]])
    rows = []
    for variant, got in done.items():
        rate = statistics.median(g["rate"] for g in got)
        steady = [g["steady"] for g in got if g.get("steady")]
        firsts = [g["first"] for g in got if "first" in g]
        rows.append(
            [
                variant or "(as it is)",
                fmt_rate(rate),
                fmt_rate(statistics.median(steady)) if steady else "",
                f"{statistics.median(firsts):.2f}" if firsts else "",
                ", ".join(fmt_rate(g["rate"]) for g in got),
                f"{rate / base:.2f}x",
            ]
        )
    state = "evicted before each cell (cold)" if args.cold else "in the page cache (warm)"
    print(
        f"\nbench_cold.py cell {args.kind!r}, {count:,} images, pack {state}, fresh process "
        f"per cell, median of {args.rounds} alternated rounds; {machine()}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}\n"
    )
    headers = ["environment", "images/s", "2nd half img/s", "first batch s", "per round"]
    print(table([*headers, "vs first"], rows))
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_envs.json").write_text(json.dumps({"kind": args.kind, "cells": done}, indent=1))


if __name__ == "__main__":
    main()

"""The global order's memory copy: against one pread per image in steady state, or against the
mapped reads over a run's first epochs.

    python scripts/bench_memcopy.py PACK [--rounds 3]
    python scripts/bench_memcopy.py PACK --epochs 3 [--rounds 5] [--cold]

Steady state (the default): both loaders (2 worker threads, batch 256) run over the same pack in
the same process, in interleaved rounds of one epoch each; the copy is filled first (its fill
time is printed). Warm figures: read the shards once before (`cat PACK/*.tar > /dev/null`).

`--epochs N`: the first N epochs of a fresh run, fill included, each cell in a fresh process,
the three ways a pack that fits in memory is read in the global order, alternated round by
round (copy, mapped, reads, copy, ...):

* copy: `in_memory=True` (the copy is filled in the background after the first epoch);
* mapped: `in_memory=False` (the shards are mapped as the warm pass reads them);
* reads: `in_memory=False` with `MIXSHARD_MMAP=0` (a batch per io_uring call, else `pread`).

The clock starts before `mixshard.loader` (torch imported first) and is read after each epoch's
last batch; medians of the cumulative times over the rounds. The pack is read into the page
cache before each cell, or evicted from it with `--cold`. Writes bench-out/bench_memcopy.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path

from benchlib import OUT, evict, machine, peak_rss_mb, run_json, table

import mixshard

HERE = Path(__file__).resolve()
MODES = {  # mode: (in_memory, environment)
    "copy": (True, {}),
    "mapped": (False, {}),
    "reads": (False, {"MIXSHARD_MMAP": "0"}),
}


def steady(pack: str, rounds: int) -> None:
    kw = dict(num_workers=2, infinite=True, order="global")
    copy = mixshard.loader(pack, 256, in_memory=True, **kw)
    t = time.perf_counter()
    copy.stream.memory_copy.load(threading.Event())
    fill = time.perf_counter() - t
    reads = mixshard.loader(pack, 256, in_memory=False, **kw)
    batches = copy.stream.count // 256
    its = {"copy": iter(copy), "pread": iter(reads)}
    for it in its.values():
        next(it)
    rates: dict[str, list[float]] = {name: [] for name in its}
    for _ in range(rounds):
        for name, it in its.items():
            t = time.perf_counter()
            for _ in range(batches):
                next(it)
            rates[name].append(batches * 256 / (time.perf_counter() - t))
    print(f"fill {fill:.1f} s ({copy.stream.memory_copy.nbytes / 1e9:.1f} GB)")
    for name, got in rates.items():
        runs = " / ".join(f"{r:,.0f}" for r in got)
        print(f"{name}: median {statistics.median(got):,.0f} images/s ({runs})")
    copy.close()
    reads.close()


def epochs_cell(pack: str, mode: str, epochs: int) -> dict:
    """One fresh run of `epochs` epochs (in its own process): cumulative seconds after each."""
    import torch  # noqa: F401 - imported before the clock starts

    in_memory = MODES[mode][0]
    t0 = time.perf_counter()
    loader = mixshard.loader(
        pack, 256, num_workers=2, infinite=True, order="global", in_memory=in_memory
    )
    it = iter(loader)
    at, images = [], 0
    for _ in range(epochs):
        for _ in range(loader.batches_per_epoch):
            images += len(next(it))
        at.append(time.perf_counter() - t0)
    stream = loader.stream
    copy = stream.memory_copy.stats() if stream.memory_copy is not None else None
    result = {
        "mode": mode,
        "at": at,
        "images": images,
        "mapped": stream.pack.mapped_shards,
        "shards": len(stream.pack.shards),
        "copy": copy,
        "rss": peak_rss_mb(),
    }
    loader.close()
    return result


def filled(cells: list[dict]) -> str:
    """The copy's blocks filled at the end of each round, and the share of images read from it
    (none when the copy was not complete before the last epoch ended)."""
    stats = [c["copy"] for c in cells if c["copy"]]
    if not stats:
        return ""
    blocks = ", ".join(f"{s['blocks_copied']}" for s in stats)
    share = [s["from_memory"] / max(1, s["from_memory"] + s["from_preads"]) for s in stats]
    return f"{blocks} of {stats[0]['blocks']}; {100 * statistics.median(share):.0f}%"


def run_epochs(pack: Path, epochs: int, rounds: int, cold: bool) -> None:
    files = sorted(pack.glob("shard-*.tar"))
    done: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for r in range(rounds):
        for mode, (_, env) in MODES.items():
            if cold:
                evict(files)
            else:
                for path in files:
                    path.read_bytes()
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                args = [str(HERE), str(pack), "--cell", mode, "--epochs", str(epochs)]
                got = run_json(args)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            done[mode].append(got)
            cum = " ".join(f"{t:.2f}" for t in got["at"])
            print(f"round {r + 1} {mode}: {cum} s (mapped {got['mapped']})", flush=True)
    med = {
        m: [statistics.median(g["at"][e] for g in got) for e in range(epochs)]
        for m, got in done.items()
    }
    headers = [
        "mode",
        *[f"epochs 1-{e + 1} s" if e else "epoch 1 s" for e in range(epochs)],
        "vs mapped (all)",
    ]
    headers += ["per round, all epochs s", "shards mapped", "copy filled, images from it"]
    headers += ["peak RSS MB"]
    rows = []
    for mode, got in done.items():
        ratio = med["mapped"][-1] / med[mode][-1]
        last = ", ".join(f"{g['at'][-1]:.2f}" for g in got)
        mapped = f"{statistics.median(g['mapped'] for g in got):.0f}/{got[0]['shards']}"
        rss = f"{statistics.median(g['rss'] for g in got):.0f}"
        rows.append([mode, *[f"{t:.2f}" for t in med[mode]], f"{ratio:.2f}x", last, mapped])
        rows[-1] += [filled(got), rss]
    count = mixshard.Manifest.load(pack).count
    state = "evicted (cold)" if cold else "in the page cache (warm)"
    print(
        f"\nglobal order, batch 256, 2 worker threads, first {epochs} epochs of {count:,} images, "
        f"pack {state} at the start, fresh process per cell, median of {rounds} alternated "
        f"rounds; {machine()}; {time.strftime('%Y-%m-%d %H:%M')}\n"
    )
    print(table(headers, rows))
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_memcopy.json").write_text(json.dumps({"cold": cold, "cells": done}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pack", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, help="the first N epochs of a run, per mode")
    parser.add_argument("--cold", action="store_true", help="--epochs: evict the pack first")
    parser.add_argument("--cell", choices=list(MODES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(epochs_cell(str(args.pack), args.cell, args.epochs)))
    elif args.epochs:
        run_epochs(args.pack, args.epochs, args.rounds, args.cold)
    else:
        steady(str(args.pack), args.rounds)


if __name__ == "__main__":
    main()

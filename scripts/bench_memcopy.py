"""The global order's memory copy in steady state: a filled copy against one pread per image.

    python scripts/bench_memcopy.py PACK [--rounds 3]

Both loaders (2 worker threads, batch 256) run over the same pack in the same process, in
interleaved rounds of one epoch each; the copy is filled first (its fill time is printed).
Warm figures: read the shards once before (`cat PACK/*.tar > /dev/null`).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import mixshard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pack")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kw = dict(num_workers=2, infinite=True, order="global")
    copy = mixshard.loader(args.pack, 256, in_memory=True, **kw)
    t = time.perf_counter()
    copy.stream.memory_copy.load(threading.Event())
    fill = time.perf_counter() - t
    reads = mixshard.loader(args.pack, 256, in_memory=False, **kw)
    batches = copy.stream.count // 256
    its = {"copy": iter(copy), "pread": iter(reads)}
    for it in its.values():
        next(it)
    rates: dict[str, list[float]] = {name: [] for name in its}
    for _ in range(args.rounds):
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


if __name__ == "__main__":
    main()

"""`Overlay` on the CPU with one torch thread and with two, in one process, alternated: the
device cache and the pool, each call against `obs.clone()` at the same thread count, medians of
25 calls, 3 rounds. `busy` runs a spinning process beside it (an environment, another job).

    python scripts/bench_threads.py PACK quiet|busy
"""

import statistics
import subprocess
import sys
import time

import torch

import mixshard

pack = sys.argv[1]
obs = torch.rand(128, 9, 84, 84) * 255


def med(f, n=25):
    for _ in range(3):
        f()
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs) * 1e3


out = {}
busy = (
    subprocess.Popen([sys.executable, "-c", "while True: pass"]) if sys.argv[2] == "busy" else None
)
try:
    for cache in ("device", "pool"):
        ov = mixshard.Overlay(pack, cache=cache, pool=512, seed=0)
        for _round in range(3):
            for th in (1, 2):
                torch.set_num_threads(th)
                c = med(obs.clone)
                o = med(lambda ov=ov: ov(obs))
                out.setdefault((cache, th), []).append((o / c, 128 / o * 1e3))
        ov.close()
finally:
    if busy:
        busy.kill()
for (cache, th), v in sorted(out.items()):
    print(
        f"{sys.argv[2]:5s} cache={cache:6s} threads={th}: x clone "
        + " ".join(f"{r:.2f}" for r, _ in v)
        + " | images/s "
        + " ".join(f"{ips:,.0f}" for _, ips in v)
    )

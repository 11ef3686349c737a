"""Reading packs from disk, cold and warm, as they are read for real.

For one pack (a few GB, e.g. 200,000 images: `mixshard pack SRC P --crop random --variants 20`
from 10,000 sources), in one run, each cell in a fresh process:

* cold, fits in RAM: the pack's files are evicted from the page cache before each cell
  (`posix_fadvise(DONTNEED)`, no root needed);
* warm: the pack is in the page cache;
* larger than RAM: the cell runs in a memory cgroup of `--cgroup-mb` MB (page cache counts
  against it: needs root), which reproduces a pack larger than the machine's memory;

and for each: (i) sequential read of the shard files (the ceiling), (ii) `order="global"`,
(iii) `order="block"`, (iv) `Overlay` with a pool and with the whole pack cached, N=128, CPU.
`--real PACK` adds the figures of a pack larger than this machine's RAM, read after dropping
the whole page cache (root): first batch, loader rate, first `Overlay` call, its rate, peak RSS.
`--reference SRC` adds the reference ImageFolder pipeline + blend, cold, for comparison.

    python scripts/bench_cold.py PACK [--reference SRC] [--real PACK] [--runs 3]
    python scripts/bench_cold.py --quick          # a tiny generated pack (the test suite)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import (
    OUT,
    drop_caches,
    evict,
    fmt_rate,
    machine,
    memory_cgroup,
    peak_rss_mb,
    reference_batches,
    run_json,
    table,
)

BATCH = 256
N = 128  # observations per Overlay call
HERE = Path(__file__).resolve()
RUN = int(os.environ.get("MIXSHARD_BENCH_RUN", "0"))  # block order: blocks per read (0: default)
PASSES = int(os.environ.get("MIXSHARD_BENCH_PASSES", "1"))  # loader cells: passes over the pack


def shard_files(pack: Path) -> list[Path]:
    return sorted(pack.glob("shard-*.tar"))


# ---------------------------------------------------------------- one cell, in its own process


def measure_seq(pack: Path, budget: float) -> dict:
    """Read every shard file once, in order, 8 MB at a time."""
    import mixshard

    m = mixshard.Manifest.load(pack)
    buf = bytearray(8 << 20)
    total, t0 = 0, time.perf_counter()
    for path in shard_files(pack):
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
        if time.perf_counter() - t0 > budget:
            break
    seconds = time.perf_counter() - t0
    return {"images": total / (m.total_bytes / m.count), "seconds": seconds, "rss": peak_rss_mb()}


def measure_loader(pack: Path, order: str, budget: float, limit: int) -> dict:
    """A pass over the pack (or `limit` images, or `budget` seconds) with `mixshard.loader`
    (`MIXSHARD_BENCH_PASSES` passes); `order="pread"` is the global order as it reads by
    default (the read plan `"auto"`: one `pread` per image, copies out of mappings once the
    pack is in the page cache), `order="global"` the global order never mapped
    (`read="pread"`), a baseline in the same run."""
    import mixshard

    mixshard.loader  # noqa: B018 - import torch before the clock starts
    t0 = time.perf_counter()
    kw: dict = {"run": RUN} if RUN and order == "block" else {}
    if order == "pread":  # (the cell's name as it was before the read plan: its rows compare)
        order = "global"
    elif order == "global":
        kw = {"read": "pread"}
    loader = mixshard.loader(pack, BATCH, num_workers=2, infinite=True, order=order, **kw)
    it = iter(loader)
    next(it)
    first = time.perf_counter() - t0
    images = BATCH
    batches = min(loader.batches_per_epoch, limit // BATCH) * PASSES
    half = None  # (images, time) half-way: the steady rate leaves the start out
    for i in range(batches - 1):
        images += len(next(it))
        if half is None and i >= batches // 2:
            half = (images, time.perf_counter())
        if time.perf_counter() - t0 > budget:
            break
    seconds = time.perf_counter() - t0
    loader.close()
    steady = (images - half[0]) / (t0 + seconds - half[1]) if half else None
    return {
        "images": images,
        "seconds": seconds,
        "first": first,
        "steady": steady,
        "rss": peak_rss_mb(),
        "order": loader.stream.order,
    }


def measure_overlay(pack: Path, cache: str, budget: float, limit: int) -> dict:
    """`Overlay(pack, cache=...)` on CPU: the first call, then calls until `limit` images or
    `budget` seconds; the µs of a call is the median over the second half of those calls
    (hundreds of calls: a pool is full by then, and one slow call moves nothing). Each call is
    followed by an `obs.clone()`, timed: `per_clone` is the median of the ratios call / clone,
    the call against the same bytes moved by this process at that moment (a memory-bound call
    moves with the host's memory traffic, which the process cannot see). The rate leaves the
    clones' time out (a pool's reader refills during them)."""
    import torch

    import mixshard

    torch.set_num_threads(1)
    obs = torch.rand(N, 9, 84, 84) * 255
    # a pool of a tenth of the pack (as for a pack ten times the memory it may use)
    count = mixshard.Manifest.load(pack).count
    pool = max(1024, count // 10) if cache == "pool" else None
    t0 = time.perf_counter()
    overlay = mixshard.Overlay(pack, cache=cache, flip=False, seed=0, pool=pool)
    overlay(obs)
    first = time.perf_counter() - t0
    images, calls, clones = N, [], []
    while images < limit and time.perf_counter() - t0 < budget:
        t = time.perf_counter()
        overlay(obs)
        t1 = time.perf_counter()
        obs.clone()
        clones.append(time.perf_counter() - t1)
        calls.append(t1 - t)
        images += N
    seconds = time.perf_counter() - t0 - sum(clones)
    half = len(calls) // 2
    steady = calls[half:] or calls
    ratios = [c / k for c, k in zip(calls, clones)][half:]
    stats = overlay.stats()["cpu"]
    overlay.close()
    return {
        "images": images,
        "seconds": seconds,
        "first": first,
        "rss": peak_rss_mb(),
        "call_us": statistics.median(steady) * 1e6 if steady else None,
        "per_clone": statistics.median(ratios) if ratios else None,
        "calls": len(calls),
        "stats": stats,
    }


def measure_reference(src: Path, budget: float) -> dict:
    """The reference: ImageFolder + RandomResizedCrop(84) DataLoader (2 workers) + the
    reference blend (repeat over the frames, 5 ops), N images a call."""
    import torch

    torch.set_num_threads(1)
    obs = torch.rand(N, 9, 84, 84) * 255
    t0 = time.perf_counter()
    it = reference_batches(src, N, workers=2)
    images = 0
    while time.perf_counter() - t0 < budget:
        imgs = next(it).repeat(1, 3, 1, 1)
        out = ((1 - 0.5) * (obs / 255) + 0.5 * imgs) * 255
        images += len(out)
    return {"images": images, "seconds": time.perf_counter() - t0, "rss": peak_rss_mb()}


def measure(args: argparse.Namespace) -> None:
    pack = Path(args.pack)
    args.kind = args.measure
    if args.kind == "seq":
        result = measure_seq(pack, args.budget)
    elif args.kind in ("global", "pread", "block"):
        result = measure_loader(pack, args.kind, args.budget, args.limit)
    elif args.kind in ("pool", "device", "auto"):
        result = measure_overlay(pack, args.kind, args.budget, args.limit)
    else:
        result = measure_reference(pack, args.budget)
    print(json.dumps(result))


# ---------------------------------------------------------------- the run


def cell(
    kind: str, pack: Path, *, cold: str, procs: Path | None, budget: float, limit: int
) -> dict:
    """One measurement in a fresh process; `cold`: "evict" the pack's files, "drop" the whole
    page cache, or "" (warm)."""
    files = shard_files(pack) or sorted(p for p in pack.rglob("*") if p.is_file())
    if cold == "evict":
        evict(files)
    elif cold == "drop":
        drop_caches()
    args = [str(HERE), str(pack), "--measure", kind, "--budget", str(budget)]
    return run_json(args + ["--limit", str(limit)], procs=procs)


def median_of(results: list[dict]) -> dict:
    """The runs of one cell: the run of median rate, with the medians of rate, second-half
    rate and call µs over all runs."""
    rates = [r["images"] / r["seconds"] for r in results]
    best = results[rates.index(statistics.median_low(rates))]
    steady = [r["steady"] for r in results if r.get("steady")]
    calls = [r["call_us"] for r in results if r.get("call_us")]
    per_clone = [r["per_clone"] for r in results if r.get("per_clone")]
    return {
        **best,
        "rate": statistics.median(rates),
        "rates": rates,
        "steady_rate": statistics.median(steady) if steady else None,
        "call_us": statistics.median(calls) if calls else None,
        "calls_us": calls,
        "per_clone": statistics.median(per_clone) if per_clone else None,
    }


def median_cells(runs: int, kinds: list[str], *args, **kwargs) -> dict[str, dict]:
    """`runs` rounds of every kind, interleaved (a, b, c, a, b, c, ...), so that a slow spell
    of a shared machine hits every kind alike; then `median_of` each."""
    done: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(runs):
        for kind in kinds:
            done[kind].append(cell(kind, *args, **kwargs))
    return {kind: median_of(results) for kind, results in done.items()}


KINDS = [
    ("seq", "(i) sequential read of the shard files (ceiling)"),
    ("pread", "(ii) loader, order=global (the default read plan)"),
    ("global", "(ii) loader, order=global, read='pread' (never mapped)"),
    ("block", "(iii) loader, order=block"),
    ("pool", "(iv) Overlay, pool, N=128"),
    ("device", "(iv) Overlay, whole pack cached, N=128"),
]


def case_rows(name: str, results: dict[str, dict]) -> list[list[object]]:
    ceiling = results["seq"]["rate"]
    rows = []
    for kind, label in KINDS:
        if kind not in results:
            continue
        r = results[kind]
        first = f"{r['first']:.2f}" if "first" in r else ""
        call = f"{r['call_us']:,.0f}" if r.get("call_us") else ""
        per_clone = f"{r['per_clone']:.2f}x" if r.get("per_clone") else ""
        share = f"{100 * r['rate'] / ceiling:.0f}%"
        steady = fmt_rate(r["steady_rate"]) if r.get("steady_rate") else ""
        rows.append(
            [name, label, fmt_rate(r["rate"]), steady, share, first, call, per_clone]
            + [f"{r['rss']:.0f}"]
        )
    return rows


CASES = ("cold", "warm", "larger")


def run_cases(
    pack: Path, runs: int, cgroup_mb: int, budget: float, cases: tuple[str, ...] = CASES
) -> list[list[object]]:
    count = json.loads((pack / "index.json").read_text())["count"]
    kinds = [k for k, _ in KINDS]
    rows = []
    if "cold" in cases:
        cold = median_cells(runs, kinds, pack, cold="evict", procs=None, budget=budget, limit=count)
        rows += case_rows("cold, fits in RAM", cold)
    if "warm" in cases:
        for path in shard_files(pack):  # into the page cache first
            path.read_bytes()
        warm = median_cells(runs, kinds, pack, cold="", procs=None, budget=budget, limit=count)
        rows += case_rows("warm", warm)
        rows.append(pool_ratio_row(warm))
    if "larger" not in cases:
        return rows
    try:
        procs = memory_cgroup(cgroup_mb)
    except OSError as exc:
        print(f"(no memory cgroup: {exc}; the larger-than-RAM case is skipped)", file=sys.stderr)
        return rows
    big = median_cells(
        runs,
        [k for k in kinds if k != "device"],
        pack,
        cold="evict",
        procs=procs,
        budget=budget,
        limit=count,
    )
    rows += case_rows(f"larger than RAM ({cgroup_mb} MB cgroup)", big)
    return rows


def pool_ratio_row(results: dict[str, dict]) -> list[object]:
    """The pool's call time over the whole-pack cache's, run by run (they ran side by side)."""
    pairs = zip(results["pool"]["calls_us"], results["device"]["calls_us"])
    ratios = [p / d for p, d in pairs]
    each = ", ".join(f"{r:.2f}" for r in ratios)
    median = f"{statistics.median(ratios):.2f}" if ratios else ""
    return ["warm", f"pool call / cached call, per run: {each}", "", "", "", "", median, "", ""]


def real_rows(pack: Path, budget: float) -> list[list[object]]:
    """A pack larger than this machine's RAM, after `drop_caches`: loader and Overlay."""
    rows = []
    for kind, label in (("block", "loader (auto order)"), ("auto", "Overlay (cache=auto), N=128")):
        r = cell(
            kind,
            pack,
            cold="drop",
            procs=None,
            budget=budget,
            limit=10**9,
        )
        rate = r["images"] / r["seconds"]
        extra = f", pool waits {r['stats'].get('waits')}" if "stats" in r else ""
        rows.append([label, fmt_rate(rate), f"{r['first']:.2f}", f"{r['rss']:.0f}{extra}"])
    return rows


def quick() -> None:
    """A tiny generated pack, a few cells: the script keeps working (run by the test suite)."""
    import mixshard
    from mixshard.testdata import make_image_folder

    with tempfile.TemporaryDirectory() as tmp:
        make_image_folder(Path(tmp) / "src", classes=2, per_class=150, max_side=96)
        src, pack = Path(tmp) / "src", Path(tmp) / "pack"
        mixshard.pack(src, pack, shard_size=100, block_size=32, workers=1)
        results = median_cells(
            1, ["seq", "block", "pool"], pack, cold="evict", procs=None, budget=5, limit=300
        )
        print(table(HEADERS, case_rows("cold (quick)", results)))


HEADERS = [
    "case",
    "what",
    "images/s",
    "2nd half of the pass, img/s",
    "share of (i)",
    "first batch/call s",
    "call µs",
    "call / obs.clone()",
    "peak RSS MB",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pack", nargs="?", type=Path)
    parser.add_argument("--measure", metavar="KIND", help="one cell (run by the main command)")
    parser.add_argument("--limit", type=int, default=10**9, help="images per cell at most")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget", type=float, default=30, help="seconds per cell at most")
    parser.add_argument("--cgroup-mb", type=int, default=1536)
    parser.add_argument("--reference", type=Path, help="the source folder, for the reference")
    parser.add_argument("--real", type=Path, help="a pack larger than RAM (drops caches: root)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"which of {', '.join(CASES)} (default: all)"
    )
    args = parser.parse_args()
    if args.measure:
        measure(args)
        return
    if args.quick:
        quick()
        return
    print(f"# bench_cold on {machine()}; {time.strftime('%Y-%m-%d %H:%M')}")
    cases = tuple(args.cases.split(","))
    rows = run_cases(args.pack, args.runs, args.cgroup_mb, args.budget, cases)
    lines = [table(HEADERS, rows)]
    if args.reference:
        r = cell("reference", args.reference, cold="evict", procs=None, budget=args.budget, limit=0)
        lines.append(
            f"\nreference ImageFolder + blend, cold: {fmt_rate(r['images'] / r['seconds'])} "
            "images/s"
        )
    if args.real:
        lines.append(
            "\n"
            + table(
                ["real size, cold (drop_caches)", "images/s", "first s", "peak RSS MB"],
                real_rows(args.real, args.budget),
            )
        )
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_cold.md").write_text(text + "\n")


if __name__ == "__main__":
    main()

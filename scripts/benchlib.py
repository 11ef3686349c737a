"""Helpers shared by the benchmark scripts and the demo: timing, the page cache and memory
limits, machine description, tables, plots, the reference pipeline."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# where benchmarks write (sources, packs, tables, charts); the test suite points it elsewhere
OUT = Path(os.environ.get("MIXSHARD_BENCH_OUT", ROOT / "bench-out"))
SOURCES = {"256 px (Places365-like)": (256, 256), "640x480 (COCO-like)": (640, 480)}


def make_sources(count: int, only: str | None = None) -> dict[str, Path]:
    """`count` generated JPEGs of each size in SOURCES, or of the one named `only` (made once,
    into bench-out/src)."""
    import shutil

    from mixshard.testdata import make_jpeg_folder

    paths = {}
    for name, (w, h) in SOURCES.items():
        if only is not None and name != only:
            continue
        folder = OUT / "src" / f"{w}x{h}-{count}"
        if not (folder / ".complete").exists():
            shutil.rmtree(folder, ignore_errors=True)
            print(f"generating {count} {w}x{h} JPEGs in {folder} ...", file=sys.stderr)
            make_jpeg_folder(folder, count, width=w, height=h, classes=8, seed=1)
            (folder / ".complete").touch()
        paths[name] = folder
    return paths


def machine() -> str:
    """One line naming the machine the numbers come from. A VM's model name may be only the
    vendor's ("AMD EPYC") whatever the host: the CPU family and model numbers and the widest
    vector unit tell two hosts apart (on one AVX2-only host and one AVX-512 host of the same
    name, the same pack ran 1.6x apart)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            info = cpu_info(f.read())
    except OSError:
        info = {}
    name = info.get("model name", cpu)
    detail = [f"family {info['cpu family']} model {info['model']}"] if "model" in info else []
    detail += [info["vector"]] if "vector" in info else []
    more = f"; {', '.join(detail)}" if detail else ""
    return f"{os.cpu_count()} cores ({name}{more}), Python {platform.python_version()}"


def cpu_info(text: str) -> dict[str, str]:
    """The first processor's fields of a /proc/cpuinfo text that `machine` names, and its
    widest vector unit (`vector`: avx512, avx2, sse4_2 or none found)."""
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor only
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    flags = set(info.pop("flags", "").split())
    found = [v for v, flag in VECTOR_UNITS if flag in flags]
    keep = {k: info[k] for k in ("model name", "cpu family", "model") if k in info}
    return {**keep, "vector": found[0]} if found else keep


VECTOR_UNITS = (("avx512", "avx512f"), ("avx2", "avx2"), ("sse4_2", "sse4_2"))


def median_rate(fn: Callable[[], int], runs: int) -> tuple[float, list[float]]:
    """Run `fn` (which returns how many items it processed) `runs` times; median items/s."""
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates), rates


def paired(fn: Callable[[], Any], base: Callable[[], Any], runs: int) -> tuple[float, float, float]:
    """Median seconds of `fn` and of `base`, timed alternately (each run times both, so drift
    on a shared machine hits both alike), and the median of the per-run ratios fn / base."""
    for _ in range(2):
        fn(), base()
    a, b, ratios = [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        base()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
        ratios.append((t1 - t0) / (t2 - t1))
    return statistics.median(a), statistics.median(b), statistics.median(ratios)


def paired_cpu(
    fn: Callable[[], Any], base: Callable[[], Any], runs: int
) -> tuple[float, float, float]:
    """`paired`, in this process's CPU seconds (every thread's) instead of wall seconds: what
    other jobs on a shared machine take from it does not count (they moved `paired`'s ratios
    by 10-30% from one run to the next on the busy 2-core host)."""
    for _ in range(2):
        fn(), base()
    a, b, ratios = [], [], []
    for _ in range(runs):
        t0 = time.process_time()
        fn()
        t1 = time.process_time()
        base()
        t2 = time.process_time()
        a.append(t1 - t0)
        b.append(t2 - t1)
        ratios.append((t1 - t0) / max(t2 - t1, 1e-9))
    return statistics.median(a), statistics.median(b), statistics.median(ratios)


def call_seconds(
    fn: Callable[[], Any], runs: int, warmup: int = 3, sync: Callable[[], Any] | None = None
) -> float:
    """Median seconds of one call of `fn`, after `warmup` untimed calls; `sync` (e.g.
    `torch.cuda.synchronize`) runs before each clock read."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def items_rate(batches: Iterator[Any], count: int) -> float:
    """Items per second over the next `count` batches of an iterator (`len` of each)."""
    n = 0
    t0 = time.perf_counter()
    for _ in range(count):
        n += len(next(batches))
    return n / (time.perf_counter() - t0)


def rss_mb() -> float:
    """This process's resident memory in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    """The most resident memory this process has had so far, in MB."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 1024)


def evict(paths: list[Path]) -> None:
    """Drop these files from the page cache (no root needed): the next read comes from disk."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def drop_caches() -> None:
    """Drop the whole page cache (needs root)."""
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


CGROUP = Path("/sys/fs/cgroup/memory/mixshard-bench")


def memory_cgroup(limit_mb: int) -> Path:
    """A cgroup-v1 memory group limited to `limit_mb` (page cache counts against it), made or
    reset here; returns its `cgroup.procs`. Needs root."""
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "memory.limit_in_bytes").write_text(f"{limit_mb << 20}\n")
    return CGROUP / "cgroup.procs"


def run_json(args: list[str], procs: Path | None = None, timeout: float = 900) -> dict:
    """Run `python args...` (inside the cgroup whose `cgroup.procs` is given) and return the
    JSON object its last output line holds."""

    def enter() -> None:
        if procs is not None:
            procs.write_text(f"{os.getpid()}\n")

    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=enter,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A GitHub-flavoured markdown table."""
    cells = [[str(c) for c in r] for r in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    return "\n".join(lines)


def fmt_rate(rate: float) -> str:
    """`123456.7` -> `"123,457"`."""
    return f"{rate:,.0f}"


def bar_chart(path: Path, title: str, labels: list[str], values: list[float], unit: str) -> None:
    """Horizontal bar chart (log scale) of `values`; needs the `bench` extra (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.45 * len(labels)))
    ax.barh(range(len(values)), values, color="#4477aa")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel(unit)
    fig.suptitle(title, fontsize=10)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:,.0f}", va="center", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def reference_batches(src: Path, batch: int, workers: int):
    """The reference loader of random overlay (DMControl-GB's `_load_data` and
    `_get_data_batch`): torchvision ImageFolder with RandomResizedCrop(84) + flip + ToTensor in
    a shuffling DataLoader whose iterator is made anew at each epoch's end (minus `.cuda()`:
    the caller moves the batch)."""
    import torch
    import torchvision.datasets as datasets
    import torchvision.transforms as TF

    dataset = datasets.ImageFolder(
        str(src), TF.Compose([TF.RandomResizedCrop(84), TF.RandomHorizontalFlip(), TF.ToTensor()])
    )
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=False
    )
    it = iter(loader)
    while True:
        try:
            imgs, _ = next(it)
            if imgs.size(0) < batch:
                it = iter(loader)
                imgs, _ = next(it)
        except StopIteration:
            it = iter(loader)
            imgs, _ = next(it)
        yield imgs


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def use_local_s3(port: int) -> str:
    """Point every AWS client of this process (and its children) at an S3 server on
    127.0.0.1:`port` with made-up credentials, as the benchmarks' moto servers need; returns
    the endpoint."""
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
    )
    return endpoint

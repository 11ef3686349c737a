"""Helpers shared by the benchmark scripts: timing, machine description, tables, plots."""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench-out"


def machine() -> str:
    """One line naming the machine the numbers come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def median_rate(fn: Callable[[], int], runs: int) -> tuple[float, list[float]]:
    """Run `fn` (which returns how many items it processed) `runs` times; median items/s."""
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates), rates


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
    """The seed question's `_load_data` + `_get_data_batch`: torchvision ImageFolder with
    RandomResizedCrop(84) + flip + ToTensor in a shuffling DataLoader whose iterator is made
    anew at each epoch's end (minus `.cuda()`: the caller moves the batch)."""
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

"""Probes of the process's environment: its rank in a distributed run, the memory it may use and
the CPUs it may run on. Each respects the limits a container or scheduler sets (cgroups,
CPU affinity), which the machine-wide figures ignore."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from .constants import MANIFEST_NAME

_CGROUP_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def rank_world() -> tuple[int, int]:
    """`(rank, world_size)` from `torch.distributed` when it is initialised, else `(0, 1)`.

    Never imports torch: a process that has not imported it cannot be in a distributed run.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return 0, 1
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_dirs(controller: str) -> list[Path]:
    """This process's cgroup folders for `controller` (v1) or the unified tree (v2), from its
    own folder up to the root: a limit anywhere above applies too."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    dirs = []
    for line in lines:
        _, names, rel = line.split(":", 2)
        if controller in names.split(","):
            bases = [_CGROUP_ROOTS[0] / controller]
        elif names == "":
            bases = list(_CGROUP_ROOTS)
        else:
            continue
        for base in bases:
            here = base / rel.lstrip("/")
            while base in here.parents or here == base:
                dirs.append(here)
                if here == base:
                    break
                here = here.parent
    return [d for d in dirs if d.is_dir()]


def cgroup_memory_left() -> int | None:
    """Bytes this process's memory cgroups still allow (page cache counts against them), or
    None without a limit."""
    left = None
    for d in _cgroup_dirs("memory"):
        for limit_name, usage_name in (
            ("memory.max", "memory.current"),
            ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        ):
            limit, usage = _read_int(d / limit_name), _read_int(d / usage_name)
            if limit is None or usage is None or limit >= 1 << 60:
                continue
            # What the cgroup holds as reclaimable page cache is available to us as well.
            room = limit - usage + _cgroup_cache(d)
            left = room if left is None else min(left, room)
    return left


def _cgroup_cache(d: Path) -> int:
    try:
        lines = (d / "memory.stat").read_text().splitlines()
    except OSError:
        return 0
    stats = dict(line.split()[:2] for line in lines if len(line.split()) >= 2)
    for key in ("total_inactive_file", "inactive_file"):
        if key in stats and stats[key].isdigit():
            return int(stats[key])
    return 0


def available_memory() -> int:
    """Bytes of RAM this process can still get: the machine's available memory, or less when a
    memory cgroup (container, Slurm job) limits it."""
    import psutil  # here, not at the top: `mixshard pack` starts without it (~20 ms)

    free = psutil.virtual_memory().available
    left = cgroup_memory_left()
    return free if left is None else max(0, min(free, left))


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask (taskset, Slurm), capped by a cgroup CPU
    quota (containers), at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    for d in _cgroup_dirs("cpu"):
        quota = None
        try:
            fields = (d / "cpu.max").read_text().split()
            if fields and fields[0] != "max":
                quota = int(fields[0]) / int(fields[1])
        except (OSError, ValueError, IndexError):
            q, p = _read_int(d / "cpu.cfs_quota_us"), _read_int(d / "cpu.cfs_period_us")
            if q and p:
                quota = q / p
        if quota:
            cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def data_is_a_pack(data: str | os.PathLike, env: str = "MIXSHARD_DATA") -> str | None:
    """When the data folder (`MIXSHARD_DATA`) is itself a pack (`data/coco` instead of `data`),
    the message that says to set it to the folder above; else None."""
    folder = Path(data)
    if not (folder / MANIFEST_NAME).is_file():
        return None
    above = folder.resolve().parent
    return (
        f"{env}={data} is a pack itself (it holds index.json), not the folder that holds the "
        f"packs; set {env} to the folder above it: {env}={above}"
    )


def sized_pack_name(dataset: str, size: tuple[int, int]) -> str | None:
    """`<dataset>-<size>`, the folder name of a pack made for `size x size` observations
    (`make places365 SIZE=96`), or None for non-square sizes."""
    return f"{dataset}-{size[0]}" if size[0] == size[1] else None


def find_pack(roots: list[Path], dataset: str, size: tuple[int, int]) -> Path | None:
    """The pack folder of `dataset` for observations of `size` (height, width): in the first
    root that has one, `<root>/<dataset>-<size>` when it holds a finished pack (an
    `index.json`), else `<root>/<dataset>`; None when no root has either."""
    sized = sized_pack_name(dataset, size)
    for root in roots:
        for name in (sized, dataset):
            if name is not None and (root / name / MANIFEST_NAME).is_file():
                return root / name
    return None

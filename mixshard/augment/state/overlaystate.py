"""`Overlay.state_dict()`: per device, its generator (flips, crops, alpha; the single pack's
permutations), its cache's position and, in a mix, the samples drawn; for the `Overlay`, the
packs, the seed, the weights in force and which process drew. A state is one process's (the
draws are split by rank and DataLoader worker): loaded in another, it is refused with a
`ValueError` naming what differs. A pool's state is its calls' sizes, made again on load
(`imagepool.ImagePool._replay`). docs/design.md, "Mixing packs and resuming" (*State*,
*Workers and ranks*), says what a state holds and can continue, and why.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ...core.env import rank_world
from ..caches.cache import BackgroundCache, DeviceCache, StreamCache
from ..caches.imagepool import ImagePool
from ..caches.mixcache import MixedCache
from ..draws.mixing import Mix
from .genstate import pack_states, unpack_states

FORMAT = "mixshard.Overlay"
KEYS = ("format", "version", "packs", "seed", "process", "mix", "devices")


def process_tag() -> dict[str, Any]:
    """Which process draws: its rank and world size, and its DataLoader worker (id, number of
    workers, torch's seed of it) or None."""
    from torch.utils.data import get_worker_info

    rank, world = rank_world()
    info = get_worker_info()
    worker = None if info is None else [info.id, info.num_workers, int(info.seed)]
    return {"rank": rank, "world_size": world, "worker": worker}


def _parts(cache: BackgroundCache) -> list[BackgroundCache]:
    return cache.caches if isinstance(cache, MixedCache) else [cache]


def device_state(mode: str, cache: BackgroundCache, generator: torch.Generator) -> dict[str, Any]:
    """One device's state.

    Raises:
        ValueError: a pool whose call sizes changed too often (`ImagePool.state_dict`).
    """
    then = cache.perms.then if isinstance(cache, DeviceCache) else None
    parts = _parts(cache)
    return {
        "mode": mode,
        "generator": pack_states(then, generator.get_state()),
        "caches": [p.state_dict() for p in parts],  # type: ignore[attr-defined]
        "samples": cache.samples if isinstance(cache, MixedCache) else None,
        "carried": cache.carried() if isinstance(cache, MixedCache) else None,
    }


def load_device_state(
    state: dict[str, Any], cache: BackgroundCache, generator: torch.Generator
) -> None:
    """Continue one device from `device_state()` (before its first draw)."""
    then, now = unpack_states(state["generator"])
    parts = _parts(cache)
    if len(state["caches"]) != len(parts):
        raise ValueError(f"state holds {len(state['caches'])} caches, this Overlay {len(parts)}")
    for part, saved in zip(parts, state["caches"]):
        if isinstance(part, ImagePool):
            pass  # made from the state's calls (`pool_calls`)
        elif isinstance(part, DeviceCache):
            part.load_state_dict(saved, then)
        elif isinstance(part, StreamCache):
            part.load_state_dict(saved)
    if isinstance(cache, MixedCache):
        samples = state["samples"]
        if type(samples) is not int or samples < 0:
            raise ValueError(f"state samples must be an int >= 0, got {samples!r}")
        cache.samples = samples
        if state.get("carried") is not None:  # a mix of pools: each pool's last chunk again
            taken = [bool(pool_calls(state, k)) for k in range(len(parts))]
            cache.resume(state["carried"], taken)
    generator.set_state(now)


def check_overlay_state(
    state: Any, mine: dict[str, Any], mix: Mix | None, cache: str
) -> tuple[Mix | None, dict[str, dict[str, Any]]]:
    """An `Overlay.state_dict()` checked against `mine` (packs, seed, process): the mix to
    continue with (a copy of `mix`) and each device's state.

    Raises:
        TypeError, ValueError: not such a state, or one saved with other packs, seed, weights,
            process (rank, world size, DataLoader worker) or cache; named.
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    if state.get("format") != FORMAT or sorted(state) != sorted(KEYS):
        raise ValueError(f"state is not an Overlay.state_dict(): keys {sorted(map(str, state))}")
    for key, value in mine.items():
        if state[key] != value:
            raise ValueError(
                f"state_dict was saved with {key}={state[key]!r}, this Overlay has "
                f"{key}={value!r}: {_fix(key)}"
            )
    if (state["mix"] is None) != (mix is None):
        raise ValueError("state_dict was saved with" + (" no" if mix else "") + " weights=")
    loaded = None
    if mix is not None:
        loaded = copy.deepcopy(mix)
        loaded.load_state_dict(state["mix"])
    devices = state["devices"]
    if not isinstance(devices, dict):
        raise ValueError(f"state devices must be a dict, got {type(devices).__name__}")
    for where, saved in devices.items():
        if not isinstance(saved, dict) or saved.get("mode") not in ("device", "pool", "stream"):
            raise ValueError(f"state devices[{where!r}] is not a device's state")
        if cache not in ("auto", saved["mode"]):
            raise ValueError(
                f"state_dict was saved with cache={saved['mode']!r} on {where}, this Overlay "
                f"has cache={cache!r}: pass cache={saved['mode']!r} (or 'auto')"
            )
    return loaded, devices


def _fix(key: str) -> str:
    if key == "process":
        return (
            "a state is one process's draws (its rank and world size, its DataLoader worker): "
            "load it in the same one"
        )
    return "make it with the same packs and seed"


def pool_calls(saved: dict[str, Any], k: int = 0, last: bool = True) -> list[list[int]]:
    """Pool `k`'s calls in a device's state, checked: runs of `[n, times]`, ints >= 1; without
    the last call unless `last` (a mix's pool takes its last chunk again: `MixedCache.resume`).
    """
    caches = saved.get("caches")
    ok = isinstance(caches, list) and len(caches) > k and isinstance(caches[k], dict)
    calls: Any = caches[k].get("calls") if ok else None  # type: ignore[index]
    ok = isinstance(calls, list) and all(
        isinstance(c, list) and len(c) == 2 and all(type(v) is int and v >= 1 for v in c)
        for c in calls
    )
    if not ok:
        raise ValueError(f"state of a pool must hold its calls as [n, times] runs, got {calls!r}")
    calls = [list(c) for c in calls]
    if not last and calls:
        calls[-1][1] -= 1
        calls = calls if calls[-1][1] else calls[:-1]
    return calls

"""`CachePlan`: where `Overlay` and `Backgrounds` keep the backgrounds they draw, decided once,
so the two front objects share one rule rather than a copy each.

`plan_cache` picks the device (the whole pack), a pool refilled from the disk, or (`Overlay`
only) a loader's stream, and sizes the pool, from the pack's bytes, one pool item's and
`cache_fraction` of the free device memory; `explain()` says what it chose and why.
`warn_resized` is the other rule both share: a pack/observation size mismatch, warned once.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from ...core.device import free_memory
from ...core.errors import MixshardError
from ..inputs.checks import user_stacklevel


@dataclass(frozen=True)
class CachePlan:
    """What a cache will be, and the figures it was chosen from (bytes)."""

    asked: str  # the `cache=` asked: "auto", "device", "pool" or "stream"
    mode: str  # what it is: "device", "pool" or "stream"
    device: str
    need: int  # the whole pack (or packs) on the device
    budget: int  # `fraction` of the free memory
    fraction: float
    item: str  # what a pool holds: "images" or "clips"
    item_bytes: int  # one of them
    size: int  # items in the pool (0 unless `mode == "pool"`)
    size_asked: bool  # `pool=` given, not sized to the budget

    def explain(self) -> str:
        """One paragraph: what was chosen on which device, and why."""
        fits = "fits" if self.need <= self.budget else "does not fit"
        why = (
            f"cache={self.asked!r} was asked"
            if self.asked != "auto"
            else "cache='auto' takes the device when the whole pack fits, else a pool"
        )
        text = (
            f"{self.mode} cache on {self.device}: {why}; the pack needs {_mb(self.need)} and "
            f"{fits} in the budget, {self.fraction:g} of the free memory ({_mb(self.budget)})."
        )
        if self.mode == "pool":
            sized = "as pool= asked" if self.size_asked else "as many as the budget holds"
            text += (
                f" The pool holds {self.size} {self.item} of {_mb(self.item_bytes)} each ({sized})."
            )
        return text


def plan_cache(
    cache: str,
    device: torch.device,
    fraction: float,
    *,
    need: int,
    item_bytes: int,
    pool: int | None = None,
    item: str = "images",
    least: int = 1,
    most: int | None = None,
    free: int | None = None,
) -> CachePlan:
    """The plan for a pack of `need` bytes whose pool would hold items of `item_bytes` each.

    `cache` is checked by the caller; `free` stands for the device's free memory (else read
    once); `pool` is the pool's items (None: as many as the budget holds), at least `least`
    and at most `most` (the pack's clips); `item` names them ("images", "clips").

    Raises:
        MixshardError: a pool is chosen and fewer than `least` items fit (or were asked).
    """
    budget = int(fraction * (free_memory(device) if free is None else free))
    mode = cache if cache != "auto" else ("device" if need <= budget else "pool")
    size = 0
    if mode == "pool":
        size = pool if pool is not None else budget // item_bytes
        if size < least:
            raise MixshardError(_no_room(item, size, budget, item_bytes, least))
        size = size if most is None else min(size, most)
    return CachePlan(
        asked=cache,
        mode=mode,
        device=str(device),
        need=need,
        budget=budget,
        fraction=fraction,
        item=item,
        item_bytes=item_bytes,
        size=int(size),
        size_asked=pool is not None,
    )


def _no_room(item: str, size: int, budget: int, item_bytes: int, least: int) -> str:
    if item == "images":
        return (
            f"no room for a pool: {budget} bytes free for it, one image takes {item_bytes}; "
            f"free memory, raise cache_fraction or pass pool=N"
        )
    return (
        f"no room for a pool of clips: it holds {size} clips of {item_bytes} bytes, and {least} "
        f"may play at once (one an environment); free memory, raise cache_fraction or pass "
        f"pool=N (N >= {least})"
    )


def _mb(n: int) -> str:
    return f"{n:,} bytes" if n < 10**6 else f"{n / 1e6:,.1f} MB"


def warn_resized(
    pack_side: int, size: tuple[int, int], warned: set[tuple[int, int]], asked: str
) -> None:
    """Warn once per `size` (kept in `warned`) that the pack's `pack_side` images are resized
    on the device at every call to `size`, which `asked` names ("were asked for" by `Overlay`,
    "the obs" of `Backgrounds`)."""
    if size == (pack_side, pack_side) or size in warned:
        return
    warned.add(size)
    h, w = size
    got = f"{h}x{w} were asked for" if asked == "images" else f"the obs {h}x{w}"
    fix = (
        f"pack with --size {h} to avoid it"
        if h == w
        else "packs are square: the whole image is resized to the frame"
    )
    warnings.warn(
        f"mixshard: pack {asked} are {pack_side}x{pack_side} but {got}; resizing on the device "
        f"at each call ({fix})",
        stacklevel=user_stacklevel(),
    )

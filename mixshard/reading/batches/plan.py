"""The read plan: how a stream reads its pack, every `"auto"` of reading resolved here and
nowhere else, and `explain()` saying what was chosen and why (docs/design.md, "One read plan").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...core.env import available_memory
from ...core.errors import MixshardError
from ...core.manifest import Manifest
from ..pack.mapped import mapping_built
from ..pack.reader import PackReader

WINDOW = 64  # blocks whose images the block order shuffles together, unless told
READS = ("auto", "mapped", "feed", "pread")
ORDERS = ("auto", "global", "block")
WORKERS = ("auto", "thread", "process")
MAP_SHARE = 0.5  # a pack is mapped when its bytes are at most this share of the available memory
# ... and `"auto"` maps it when at most this share of a sample of its bytes is out of the page
# cache (reclaimed pages leave holes; a fault per hole reads it; the holes are asked for ahead)
MISSES_ALLOWED = 0.01


def can_map(pack_bytes: int) -> bool:
    """Whether mappings can be made here (the extension built) and a pack of `pack_bytes`
    fits in `MAP_SHARE` of the available memory (asked last: the one of these that costs)."""
    if not mapping_built():
        return False
    try:
        return pack_bytes <= MAP_SHARE * available_memory()
    except OSError:  # no descriptor left to ask with: read with `pread`, which names that
        return False


def maps_allowed(pack_bytes: int) -> bool:
    """Whether `"auto"` may map a pack of `pack_bytes`."""
    return os.environ.get("MIXSHARD_MMAP") != "0" and can_map(pack_bytes)


def maps_after_warm(read: str, pack_bytes: int) -> bool:
    """Whether the global order maps the pack once its warm pass has read it in."""
    return read == "auto" and maps_allowed(pack_bytes)


@dataclass(frozen=True)
class ReadPlan:
    """How a stream reads its pack: `order`, `read` (as asked; `"auto"` is resolved by each
    reader as it opens, `choose`), `drop_cache`, `store` (read through a block cache), and
    `why`: one line per decision."""

    order: str
    read: str
    drop_cache: bool
    store: bool
    why: tuple[str, ...]

    def choose(self, pack: PackReader) -> str:
        """The way a reader opening `pack` now reads: `"mapped"`, `"feed"` or `"pread"`. A named
        `"mapped"` maps the pack here, whatever its page-cache state (raises MixshardError when
        it cannot be)."""
        pack_bytes = pack.manifest.total_bytes
        if self.read == "mapped":
            if not can_map(pack_bytes) or not pack.map_all():
                raise MixshardError(
                    "read='mapped': the pack cannot be mapped here (the _mapped extension was "
                    "not built, or the pack takes more than half the available memory); use "
                    "read='auto'"
                )
            return self.read
        if self.read != "auto":
            return self.read
        if not self.drop_cache and maps_allowed(pack_bytes) and pack.map_all(MISSES_ALLOWED):
            return "mapped"
        return "feed" if self.order == "block" else "pread"

    def threads(self, workers: str) -> bool:
        """Whether a loader's `workers` (`"auto"`, `"thread"`, `"process"`) are threads: every
        pack is read by offset, so `"auto"` is threads (reads release the GIL, and threads share
        the mappings, the descriptors and a store's cache)."""
        if workers not in WORKERS:
            raise ValueError(f"workers must be 'auto', 'thread' or 'process', got {workers!r}")
        return workers != "process"

    def explain(self) -> str:
        """What was chosen and why, one line each."""
        return "\n".join(self.why)


def make_plan(
    order: str,
    read: str,
    *,
    blocks: int,
    window: int,
    pack_bytes: int,
    memory: int,
    fits: bool,
    need: int,
    store: bool,
) -> ReadPlan:
    """The `ReadPlan` of a pack of `blocks` blocks and `pack_bytes` bytes read with `order` and
    `read` (each maybe `"auto"`) in windows of `window` blocks, `memory` bytes available;
    `fits`: whether its whole pack can be held where it is read (a store's cache: `need`
    bytes).

    Raises:
        ValueError: an order or read the pack cannot use, naming the fix.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    drop = pack_bytes > memory // 2
    if order == "global" and not fits:
        raise ValueError(
            "order='global' reads from every block all epoch long, so it needs the whole "
            f"pack in the cache: give cache_limit >= {need} bytes, or use order='block'"
        )
    chosen, why_order = _order(order, blocks, window, drop, fits)
    if read not in READS:
        raise ValueError(f"read must be one of {', '.join(READS)}, got {read!r}")
    if read == "feed" and chosen == "global":
        raise ValueError("read='feed' reads whole blocks: it needs order='block'")
    if read == "mapped" and store:
        raise ValueError(
            "read='mapped' applies to pack folders; a store pack's cache holds only the "
            "blocks fetched so far"
        )
    half = f"{pack_bytes >> 20} MB of {memory >> 20} MB available"
    lines = (
        f"order: {chosen} ({why_order})",
        f"read: {read} ({_read_why(read, chosen, store)})",
        "page cache: blocks read are dropped again (the pack is larger than half the memory: "
        f"{half})"
        if drop
        else f"page cache: kept ({half})",
        "whole pack (a device cache): every block once, in stored order, through one host "
        "buffer (`buffers.read_pack_into`), the page cache as above",
        "workers: threads unless workers='process' (every pack is read by offset)",
    )
    return ReadPlan(chosen, read, drop, store, lines)


def default_plan(manifest: Manifest, store: bool) -> ReadPlan:
    """The plan a `ShardStream` of this pack with the default options starts from, here and
    now (a store's cache taken to hold the whole pack): what `mixshard inspect` shows."""
    return make_plan(
        "auto",
        "auto",
        blocks=sum(len(shard.blocks) for shard in manifest.shards),
        window=WINDOW,
        pack_bytes=manifest.total_bytes,
        memory=available_memory(),
        fits=True,
        need=0,
        store=store,
    )


def _order(wanted: str, blocks: int, window: int, drop: bool, fits: bool) -> tuple[str, str]:
    """The order `"auto"` resolves to, and why."""
    if wanted != "auto":
        return wanted, "asked"
    if blocks <= window:  # one window is the whole pack: a full permutation, read in blocks
        return "block", f"one window of {window} blocks holds the whole pack ({blocks})"
    if drop:
        return "block", "the pack is larger than half the memory: sequential reads"
    if not fits:
        return "block", "the store's cache cannot hold the whole pack"
    return "global", "the pack fits in half the memory: a per-image permutation"


def _read_why(read: str, order: str, store: bool) -> str:
    """What `read` means for this pack, and why."""
    if read != "auto":
        return "asked"
    if store:
        return "runs of blocks through the block cache (a store's pack is never mapped)"
    fallback = "runs of blocks read ahead" if order == "block" else "one pread per image"
    if os.environ.get("MIXSHARD_MMAP") == "0":
        return f"MIXSHARD_MMAP=0: no mappings; {fallback}"
    then = "" if order == "block" else ", mapped once the warm pass has read it in"
    return (
        f"mapped when the pack is in the page cache (at most {MISSES_ALLOWED:.0%} of a sample of "
        f"its bytes out, those asked for ahead) and fits in half the memory, else {fallback}{then}"
    )

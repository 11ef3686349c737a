"""The read plan, chosen here once per reader: `"mapped"` (every shard mapped, or none: a pack
in the page cache that fits in half the available memory, either order), `"feed"` (the block
order's runs read ahead) or `"pread"` (the global order; mapped once its warm pass has read in
a pack that fits). `read="auto"` chooses, a caller (a test) may name one; the batches are the
same. `MIXSHARD_MMAP=0`, the one environment switch, keeps `"auto"` off the mappings. The why:
docs/design.md, "One read plan".
"""

from __future__ import annotations

import os

from ...core.env import available_memory
from ...core.errors import MixshardError
from ..pack.local import LocalPack
from ..pack.mapped import mapping_built

READS = ("auto", "mapped", "feed", "pread")
MAP_SHARE = 0.5  # a pack is mapped when its bytes are at most this share of the available memory


def check_read(read: str, order: str, store: bool) -> None:
    """Raise ValueError unless `read` is a read plan that `order` and the pack can use."""
    if read not in READS:
        raise ValueError(f"read must be one of {', '.join(READS)}, got {read!r}")
    if read == "feed" and order == "global":
        raise ValueError("read='feed' reads whole blocks: it needs order='block'")
    if read == "mapped" and store:
        raise ValueError(
            "read='mapped' applies to pack folders; a store pack's cache holds only the "
            "blocks fetched so far"
        )


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


def choose(pack: LocalPack, order: str, read: str, drop_cache: bool, pack_bytes: int) -> str:
    """The plan of a reader opening now: `"mapped"`, `"feed"` or `"pread"`. `"mapped"` maps the
    pack here (named: whatever its page-cache state; raises MixshardError when it cannot be)."""
    if read == "mapped":
        if not can_map(pack_bytes) or not pack.map_all(resident_only=False):
            raise MixshardError(
                "read='mapped': the pack cannot be mapped here (the _mapped extension was not "
                "built, or the pack takes more than half the available memory); use "
                "read='auto'"
            )
        return read
    if read != "auto":
        return read
    if not drop_cache and maps_allowed(pack_bytes) and pack.map_all(resident_only=True):
        return "mapped"
    return "feed" if order == "block" else "pread"


def maps_after_warm(read: str, pack_bytes: int) -> bool:
    """Whether the global order maps the pack once its warm pass has read it in."""
    return read == "auto" and maps_allowed(pack_bytes)

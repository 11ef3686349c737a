"""What a resumed pack into an object store may reuse: the journal objects' records, and the
shards read back to check them (`storeout.py`)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from ...core.stores import Store

REHASH_THREADS = 4  # objects read back at once by a resumed run, to check their sha256


def journaled(data: bytes) -> tuple[str | None, str | None, str | None]:
    """`(shard name, object version, sha256)` a journal object recorded (Nones: none, or not
    a shard's journal)."""
    try:
        head, line = data.decode().splitlines()[:2]
        info = json.loads(line).get("info") or {}
        return info.get("name"), json.loads(head).get("object"), info.get("sha256")
    except (ValueError, AttributeError):
        return None, None, None  # a journal cut short: load_done redoes its shard


def altered(store: Store, reuse: list[tuple[str, str]]) -> list[str]:
    """The shards of `reuse` (`(name, sha256)`) whose object's sha256 is not the one given:
    each object read once, `REHASH_THREADS` at a time."""
    if not reuse:
        return []
    with ThreadPoolExecutor(REHASH_THREADS, thread_name_prefix="mixshard-rehash") as pool:
        found = list(pool.map(lambda r: store.sha256(r[0]) != r[1], reuse))
    return [name for (name, _), bad in zip(reuse, found) if bad]

"""What a pack was made from, recorded in `index.json` (`source`) and compared on every rerun.

So a rerun that names another SRC (the full archive after a trial pack of a small one) does
not find the old pack finished ("nothing to do"). The record is cheap to make again: SRC's path
(shown, not compared: a moved folder is the same source), the plan's fingerprint (the file
list, classes and options), the number of source files, and their total bytes and newest mtime
(for an archive: the archive file's size and mtime).
"""

from __future__ import annotations

import datetime
import itertools
import os
from collections.abc import Iterable
from typing import Any

from ...core.errors import OVERWRITE, OutputError
from ...core.manifest import Manifest
from ..plan.packplan import PackPlan
from .shardwrite import DoneShard, plan_stamps

COMPARED = ("plan", "files", "bytes", "newest")


def source_record(plan: PackPlan, done: dict[int, DoneShard] | None = None) -> dict[str, Any]:
    """The `source` entry of a pack of `plan`: from the stamps its shards recorded when they
    were packed (`done`), or, without them, from the files as they are now."""
    archive = plan.source is not None and plan.source.archive
    if archive:
        stamps: Iterable[Any] = plan_stamps(plan, 0)
        path = f"{os.path.abspath(plan.source.archive)}{_within(plan.src)}"  # type: ignore[union-attr]
    else:
        shards = range(plan.n_shards)
        if done is not None and all(done[i].sources is not None for i in shards if i in done):
            stamps = itertools.chain.from_iterable(done[i].sources or () for i in sorted(done))
        else:
            stamps = itertools.chain.from_iterable(plan_stamps(plan, i) for i in shards)
        path = os.path.abspath(plan.src)
    sizes, newest = 0, 0
    for stamp in stamps:
        if stamp is not None:
            sizes += stamp[0]
            newest = max(newest, stamp[1])
    files = len(plan.items) + len(plan.scan_skipped)
    return {"path": path, "plan": plan.fingerprint, "files": files, "bytes": sizes,
            "newest": newest}  # fmt: skip


def run_summary(plan: PackPlan) -> dict[str, Any]:
    """What a journal's header says of its run, for naming what changed when another run finds
    it (no stat of the files: a run starts without one): SRC, its file count, the options."""
    files = len(plan.items) + len(plan.scan_skipped)
    options = {**plan.options, "size": plan.size, "block_size": plan.block_size}
    return {"src": plan.src, "files": files, "options": options}


def _within(label: str) -> str:
    """`:places365_standard/train` of an archive's label `ARCHIVE:within` ("" for its root)."""
    head, sep, tail = label.rpartition(":")
    return f":{tail}" if sep and head else ""


def check_source(out: os.PathLike | str, manifest: Manifest, plan: PackPlan) -> None:
    """Refuse to keep a finished pack in `out` that another source made.

    Raises:
        OutputError: the recorded source differs from `plan`'s; the message names both.
    """
    old = manifest.source
    if old is None:  # packed before the source was recorded: nothing to compare
        return
    new = source_record(plan)
    if all(old.get(k) == new[k] for k in COMPARED):
        return
    raise OutputError(
        f"{out} holds a finished pack of another source: it was packed from {_shown(old)}; "
        f"SRC is now {_shown(new)}; pass ", OVERWRITE, " to replace it with a pack of SRC (the "
        "old pack is kept until the new one is complete), or write the new pack elsewhere",
    )  # fmt: skip


def _shown(record: dict[str, Any]) -> str:
    newest = record.get("newest")
    when = (
        datetime.datetime.fromtimestamp(newest / 1e9, datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S UTC"
        )
        if isinstance(newest, int) and newest > 0
        else "?"
    )
    return (
        f"{record.get('path', '?')} ({record.get('files', '?')} files, "
        f"{record.get('bytes', '?')} bytes, newest {when})"
    )

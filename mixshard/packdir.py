"""The output folder of `pack`: what may be replaced, and the journal that lets an interrupted
pack resume. A shard is in the journal only once its file is complete under its final name."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .constants import JOURNAL_NAME, MANIFEST_NAME, SHARD_PREFIX, SHARD_SUFFIX, TMP_SUFFIX
from .errors import OutputError
from .format import BlockInfo, ShardInfo, atomic_write


@dataclass
class DoneShard:
    """One planned shard as the journal records it, once its file is complete."""

    info: ShardInfo | None  # None: every image of the planned shard was skipped
    skipped: list[dict[str, str]]

    def to_json(self, plan_index: int) -> str:
        info = None
        if self.info is not None:
            info = {
                **{k: getattr(self.info, k) for k in ("name", "count", "bytes", "sha256")},
                "blocks": [list(b.__dict__.values()) for b in self.info.blocks],
            }
        return json.dumps({"plan": plan_index, "info": info, "skipped": self.skipped})

    @classmethod
    def from_json(cls, data: dict) -> DoneShard:
        info = data["info"]
        if info is not None:
            info = ShardInfo(
                info["name"],
                info["count"],
                info["bytes"],
                info["sha256"],
                tuple(BlockInfo(*b) for b in info["blocks"]),
            )
        return cls(info, data["skipped"])


def _is_ours(name: str) -> bool:
    return (
        name in (MANIFEST_NAME, JOURNAL_NAME, MANIFEST_NAME + ".tmp")
        or name.endswith(TMP_SUFFIX)
        or (name.startswith(SHARD_PREFIX) and name.endswith(SHARD_SUFFIX))
    )


def prepare_out(out: Path, resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise OutputError("--resume and --overwrite exclude each other; pick one")
    if out.exists() and not out.is_dir():
        raise OutputError(f"output path {out} exists and is not a folder; choose a folder")
    if out.is_dir():
        names = sorted(os.listdir(out))
        if names and overwrite:
            foreign = [n for n in names if not _is_ours(n)]
            if foreign:
                raise OutputError(
                    f"--overwrite: {out} holds files mixshard did not write "
                    f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); "
                    "nothing was deleted. Choose an empty or new output folder"
                )
            for n in names:
                (out / n).unlink()
        elif names and not resume:
            raise OutputError(
                f"output folder {out} is not empty; pass --resume to finish an interrupted "
                "pack there or --overwrite to replace it"
            )
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / (".mixshard-write-test" + TMP_SUFFIX)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write to output folder {out}: {exc.strerror}") from None


def load_journal(out: Path, fingerprint: str) -> dict[int, DoneShard]:
    """Shards recorded by an interrupted run of the same plan whose files are intact (a prefix
    of the plan), by plan index."""
    path = out / JOURNAL_NAME
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        header = json.loads(lines[0]) if lines else {}
    except ValueError:
        header = {}
    if header.get("fingerprint") != fingerprint:
        raise OutputError(
            f"{out} holds an interrupted pack of another source or other options; rerun with the "
            "same SRC and options to resume it, or pass --overwrite to start over"
        )
    done: dict[int, DoneShard] = {}
    for line in lines[1:]:
        try:
            data = json.loads(line)
            shard = DoneShard.from_json(data)
            index = int(data["plan"])
        except (ValueError, KeyError, TypeError):
            break  # a line cut short by a kill: that shard is redone
        if index != len(done):
            break
        if shard.info is not None:
            f = out / shard.info.name
            if not f.exists() or f.stat().st_size != shard.info.bytes:
                break
        done[index] = shard
    return done


def open_journal(out: Path, fingerprint: str, done: dict[int, DoneShard]) -> TextIO:
    """Rewrite the journal with its header and the reusable shards, open it for appending."""
    lines = [json.dumps({"fingerprint": fingerprint})]
    lines += [done[i].to_json(i) for i in sorted(done)]
    atomic_write(out / JOURNAL_NAME, ("\n".join(lines) + "\n").encode("utf-8"))
    return open(out / JOURNAL_NAME, "a", encoding="utf-8")

"""Writing one planned shard: decoded images in plan order -> a complete tar under its final
name, or nothing at all (never half a shard under a shard's name)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ...core.constants import TMP_SUFFIX
from ...core.errors import Arg, SkippedImagesError
from ...core.files import Flusher, create_file, fsync_dir
from ...core.manifest import ShardInfo, dump_json, shard_from_dict, shard_to_dict
from ..plan.packplan import PackPlan
from .tarwriter import ShardWriter

Decoded = np.ndarray | str  # pixels (variants, 3, size, size) or the reason a file was skipped


@dataclass
class DoneShard:
    """One planned shard once its file is complete (as the journal records it)."""

    index: int  # in the plan
    info: ShardInfo | None  # None: every image of the planned shard was skipped
    skipped: list[dict[str, str]] = field(default_factory=list)
    # `source_stamps` of its files when it was packed (None: not recorded, never reused)
    sources: list[list[int] | None] | None = None

    def to_json(self) -> str:
        info = None if self.info is None else shard_to_dict(self.info)
        doc = {"plan": self.index, "info": info, "skipped": self.skipped, "sources": self.sources}
        return dump_json(doc).decode()

    @classmethod
    def from_json(cls, line: str) -> DoneShard:
        """Parse a journal line.

        Raises:
            ValueError: the line is cut short or damaged.
        """
        try:
            data = json.loads(line)
            info = data["info"]
            index = data["plan"]
            skipped = data["skipped"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"a damaged journal line ({exc})") from None
        if type(index) is not int or index < 0 or not isinstance(skipped, list):
            raise ValueError("a damaged journal line")
        sources = data.get("sources")
        sources = sources if isinstance(sources, list) else None
        return cls(index, None if info is None else shard_from_dict(info), skipped, sources)


def source_stamps(src: str, items: tuple[tuple[str, int], ...]) -> list[list[int] | None]:
    """`[size, mtime in ns]` of each source file of a shard (None where it cannot be read):
    recorded when the shard is packed, a resumed run reuses the shard only while they hold."""
    stamps: list[list[int] | None] = []
    for rel, _ in items:
        try:
            st = os.stat(os.path.join(src, rel))
        except OSError:
            stamps.append(None)
            continue
        stamps.append([st.st_size, st.st_mtime_ns])
    return stamps


def plan_stamps(plan: PackPlan, i: int) -> list[list[int] | None]:
    """`source_stamps` of shard `i`'s files; from an archive, of the archive file itself (its
    members change only with it)."""
    if plan.source is not None and plan.source.archive:
        folder, name = os.path.split(plan.source.archive)
        return source_stamps(folder, ((name, 0),))
    return source_stamps(plan.src, plan.source_files(i))


def strict_error(skipped: list[dict[str, str]]) -> SkippedImagesError:
    """The error of a strict pack that met unreadable files."""
    shown = "; ".join(f"{s['path']} ({s['reason']})" for s in skipped[:10])
    more = f"; and {len(skipped) - 10} more" if len(skipped) > 10 else ""
    return SkippedImagesError(
        Arg("strict"), f": {len(skipped)} file(s) could not be read: {shown}{more}. Fix "
        "or remove them (then pack again), or pack without ", Arg("strict", True),
        " to skip them", skipped=skipped,
    )  # fmt: skip


class ShardBuilder:
    """Collects one planned shard's decoded images and writes them block by block.

    Blocks go to disk as soon as they are full, so writing overlaps decoding; only with
    several variants per image (whose crops are spread over the shard) is the shard held in
    memory until it is complete.
    """

    def __init__(self, out: Path, plan: PackPlan, index: int) -> None:
        self.index = index
        self.items = plan.shard_items(index)
        self.name, self.block_size = plan.shard_name(index), plan.block_size
        self.variants = plan.options["variants"]
        self.spread_seed = (
            [plan.options["seed"], 2, index]
            if self.variants > 1 and plan.options["shuffle"]
            else None
        )
        self.final = out / self.name
        self.tmp = out / (self.name + TMP_SUFFIX)
        self.next_block = plan.first_block(index)
        self.received = 0
        self.skipped: list[dict[str, str]] = []
        self._images: list[np.ndarray] = []  # decoded, not yet written
        self._labels: list[int] = []
        self._keys: list[str] = []
        self._file: BinaryIO | None = None
        self._writer: ShardWriter | None = None
        self._flusher: Flusher | None = None

    @property
    def complete(self) -> bool:
        return self.received == len(self.items)

    def pending_paths(self, n: int) -> list[str]:
        """The paths of the next `n` images this shard expects."""
        return [p for p, _ in self.items[self.received : self.received + n]]

    def add(self, results: list[Decoded]) -> None:
        """Take the next decoded results (pixels or skip reasons), in plan order."""
        for result in results:
            path, label = self.items[self.received]
            self.received += 1
            if isinstance(result, str):
                self.skipped.append({"path": path, "reason": result})
                continue
            self._images.append(result)
            self._labels += [label] * self.variants
            self._keys += [path] * self.variants
        if self.spread_seed is None:
            while len(self._keys) >= self.block_size:
                self._write_blocks(self.block_size)

    def _write_blocks(self, upto: int) -> None:
        """Write the first `upto` pending images (all, in blocks, when `upto` is larger)."""
        images = np.concatenate(self._images)
        labels = np.asarray(self._labels, dtype=np.int32)
        keys = self._keys
        if self.spread_seed is not None:  # spread an image's crops over the shard
            order = np.random.default_rng(self.spread_seed).permutation(len(images))
            images, labels, keys = images[order], labels[order], [keys[i] for i in order]
        if self._writer is None or self._file is None:
            # created afresh, never through a link planted under its name
            self._file = open(create_file(self.tmp), "wb")  # noqa: SIM115 - finish or abort
            self._writer = ShardWriter(self._file)
            self._flusher = Flusher(self._file.fileno())
        file = self._file
        upto = min(upto, len(keys))
        for start in range(0, upto, self.block_size):
            end = min(start + self.block_size, upto)
            self._writer.add_block(
                self.next_block, images[start:end], labels[start:end], keys[start:end]
            )
            self.next_block += 1
        file.flush()  # the blocks written go to disk while the next ones are decoded
        if self._flusher is not None:
            self._flusher.kick()
        rest = images[upto:]
        self._images = [rest] if len(rest) else []
        self._labels = self._labels[upto:]
        self._keys = keys[upto:]

    def finish(self) -> DoneShard:
        """Write what is left, flush, fsync and rename; the shard is then complete on disk.

        Raises:
            OSError: a write failed (the temporary file is removed).
        """
        try:
            if self._keys:
                self._write_blocks(len(self._keys))
            if self._writer is None or self._file is None:
                return DoneShard(self.index, None, self.skipped)  # every image was skipped
            nbytes, digest = self._writer.finish()
            self._file.flush()
            if self._flusher is not None:
                self._flusher.close()  # raises what a background flush met
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self.tmp, self.final)
        except BaseException:
            self.abort()
            raise
        fsync_dir(self.final.parent)
        blocks = tuple(self._writer.blocks)
        return DoneShard(
            self.index,
            ShardInfo(self.name, self._writer.count, nbytes, digest, blocks),
            self.skipped,
        )

    def abort(self) -> None:
        """Remove the temporary file: never leave half a shard behind. Never raises (closing a
        file on a full disk fails again when its buffer is flushed)."""
        if self._flusher is not None:
            with contextlib.suppress(OSError):
                self._flusher.close()  # before the file is closed under it
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink(missing_ok=True)


def write_shard(
    out: Path, plan: PackPlan, index: int, decode: Callable[[list[str]], list[Decoded]]
) -> DoneShard:
    """Decode and write planned shard `index` in this process (what a Ray task or a serial
    run does); `decode` turns paths relative to SRC into results."""
    builder = ShardBuilder(out, plan, index)
    try:
        for _, n in plan.chunks(index, 32):
            builder.add(decode(builder.pending_paths(n)))
    except BaseException:
        builder.abort()
        raise
    return builder.finish()

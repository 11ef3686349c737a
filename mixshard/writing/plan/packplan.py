"""The shard plan: what each shard of a pack holds, fixed before any pixel is decoded.

A plan is a pure function of the scan (SRC's file list) and the options: the seeded, shuffled
image order, which images go to which shard, and each shard's file name and first block key.
Shard `i` is always `shard-{i:06d}.tar` with block keys from `i * blocks_per_shard`, whatever
the other shards hold, so shards can be written in any order, by any process or machine (the
local packer, Ray tasks, job-array parts) and the pack is byte-identical. A shard whose images
are all unreadable is not written; its name is simply absent from the manifest.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ...core.constants import (
    MANIFEST_NAME,
    RESAMPLE,
    shard_name,
)
from ...core.errors import OVERWRITE, OutputError
from ...core.manifest import Manifest, dump_json
from ..sources.archive import MemberReader, PackInput
from ..sources.scanning import ScanResult


@dataclass(frozen=True)
class PlannedClip:
    """One clip of a clip plan: items `start .. start + count - 1` of the plan (its frames kept,
    in play order). `name` is the video file (its frames' keys are `name#t`, `t` the frame's
    number in the file) or the frame folder; `total` the frames the source holds; `fps` the
    rate of the frames kept (0: unknown)."""

    name: str
    video: bool
    fps: float
    start: int
    count: int
    total: int


@dataclass(frozen=True)
class DecodeTask:
    """What one decode task decodes and how: `keys` read from `source` (a folder, or an
    archive's reader with each key's member reference in `refs`), each decoded to `variants`
    crops (`crop`, seeded by `seed`) of `size` x `size` with the `resample` filter, grey in all
    three channels with `grey`. In a clip pack `frames` gives each key's video frame as `(video,
    frame number, frames in the video, number of the last frame kept)`, None for an image file.
    Plain data: it pickles to a spawned worker (a forked one is handed it through a pipe too)."""

    source: str | MemberReader
    keys: list[str]
    size: int
    crop: str
    variants: int
    seed: int
    refs: list[Any] | None = None
    frames: list[tuple[str, int, int, int] | None] | None = None
    resample: str = RESAMPLE
    grey: bool = False


# Frames of a video decoded by one task at most (by bytes of their pixels): the results slot
# of a task holds them all, and a run of a clip is decoded whole or skipped whole.
CLIP_TASK_BYTES = 32 << 20


@dataclass(frozen=True)
class PackPlan:
    """Everything that decides a pack's bytes. Plain data: it pickles (Ray) and its
    `fingerprint` tells whether two runs (a resume, the parts of a job array) make the same
    pack."""

    src: str
    size: int
    block_size: int
    options: dict[str, Any]  # as written to index.json
    classes: tuple[str, ...]
    scan_skipped: tuple[dict[str, str], ...]
    items: tuple[tuple[str, int], ...]  # (path relative to src, label), in pack order
    per_shard: int  # source images per shard
    fingerprint: str
    source: PackInput | None = None  # an archive's members (None: `src` is the folder)
    clips: tuple[PlannedClip, ...] | None = None  # a clip pack's clips (None: an image pack)

    @cached_property
    def _videos(self) -> dict[str, PlannedClip]:
        return {c.name: c for c in self.clips or () if c.video}

    def video_frame(self, key: str) -> tuple[str, int, int, int] | None:
        """`(video, frame number, frames in the video, number of the last frame kept)` of a
        video frame's key, else None."""
        name, sep, t = key.rpartition("#")
        clip = self._videos.get(name) if sep else None
        if clip is None:
            return None
        return (name, int(t), clip.total, (clip.count - 1) * self.options.get("every", 1))

    def source_files(self, i: int) -> tuple[tuple[str, int], ...]:
        """The files shard `i` is made from, as `shard_items` lists them (a video once)."""
        if not self._videos:
            return self.shard_items(i)
        files: dict[str, int] = {}
        for key, label in self.shard_items(i):
            frame = self.video_frame(key)
            files.setdefault(key if frame is None else frame[0], label)
        return tuple(files.items())

    def task(self, keys: list[str]) -> tuple[str | MemberReader, list[Any] | None]:
        """What a decode task of `keys` reads from: the folder, or an archive's reader and
        the keys' member references."""
        return (self.src, None) if self.source is None else self.source.task(keys)

    def decode_task(self, keys: list[str]) -> DecodeTask:
        """The task that decodes `keys` with this plan's options."""
        source, refs = self.task(keys)
        o = self.options
        frames = None
        if self._videos:
            frames = [self.video_frame(k) for k in keys]
            if refs is not None and self.source is not None:  # a frame is read from its video
                refs = [
                    r if f is None else self.source.refs.get(f[0]) for r, f in zip(refs, frames)
                ]
        return DecodeTask(
            source, keys, self.size, o["crop"], o["variants"], o["seed"], refs, frames,
            o.get("resample", RESAMPLE), o.get("grey", False),
        )  # fmt: skip

    def chunks(self, i: int, chunk: int) -> list[tuple[int, int]]:
        """`(start, count)` of the decode tasks of shard `i`: `chunk` images each; a video's
        frames as one task per run of a clip in the shard (up to `CLIP_TASK_BYTES` of pixels),
        so that a task decodes a video once, from its first frame."""
        n = len(self.shard_items(i))
        if not self._videos:
            return [(s, min(chunk, n - s)) for s in range(0, n, chunk)]
        lo, out = i * self.per_shard, []
        for c in self.clips or ():
            a, b = max(c.start, lo), min(c.start + c.count, lo + n)
            step = self.video_chunk if c.video else chunk
            out += [(s - lo, min(step, b - s)) for s in range(a, b, step)]
        return out

    @property
    def video_chunk(self) -> int:
        """Frames of a video decoded by one task at most."""
        return max(1, CLIP_TASK_BYTES // (3 * self.size * self.size))

    @property
    def n_shards(self) -> int:
        return math.ceil(len(self.items) / self.per_shard)

    @property
    def blocks_per_shard(self) -> int:
        return math.ceil(self.per_shard * self.options["variants"] / self.block_size)

    def shard_items(self, i: int) -> tuple[tuple[str, int], ...]:
        return self.items[i * self.per_shard : (i + 1) * self.per_shard]

    def chunk_items(self, i: int, start: int, n: int) -> tuple[tuple[str, int], ...]:
        """At most `n` items of shard `i` from its `start`-th (without copying the shard's)."""
        lo = i * self.per_shard + start
        return self.items[lo : min(lo + n, (i + 1) * self.per_shard)]

    def shard_name(self, i: int) -> str:
        return shard_name(i)

    def first_block(self, i: int) -> int:
        return i * self.blocks_per_shard


def make_plan(
    src: str,
    found: ScanResult,
    *,
    size: int,
    crop: str,
    variants: int,
    shard_size: int,
    block_size: int,
    seed: int,
    shuffle: bool,
    resample: str = RESAMPLE,
    grey: bool = False,
    source: PackInput | None = None,
) -> PackPlan:
    """The plan of packing what `scan` found with these options."""
    options = {
        "crop": crop,
        "variants": variants,
        "seed": seed,
        "resample": resample,
        "shuffle": shuffle,
        "labels": found.labels,
        "shard_size": shard_size,
    }
    if grey:  # (only then: the options of every other pack stay as they were)
        options["grey"] = True
    items = list(found.items)
    if shuffle:
        order = np.random.default_rng([seed, 1]).permutation(len(items))
        items = [items[i] for i in order]
    per_shard = max(1, shard_size // variants)
    payload = dump_json([size, block_size, options, items, found.skipped, found.classes])
    return PackPlan(
        src=src,
        size=size,
        block_size=block_size,
        options=options,
        classes=tuple(found.classes),
        scan_skipped=tuple(found.skipped),
        items=tuple((p, int(label)) for p, label in items),
        per_shard=per_shard,
        fingerprint=hashlib.sha256(payload).hexdigest(),
        source=source,
    )


def finished_pack(out: Path, plan: PackPlan) -> Manifest | None:
    """The finished pack in `out`, if there is one (made with the same options)."""
    if not (out / MANIFEST_NAME).exists():
        return None
    manifest = Manifest.load(out)
    old = {**manifest.options, "size": manifest.size, "block_size": manifest.block_size}
    new = {**plan.options, "size": plan.size, "block_size": plan.block_size}
    if old != new:
        changes = ", ".join(
            f"{k} {old.get(k)} -> {new.get(k)}" for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)
        )  # fmt: skip
        raise OutputError(
            f"{out} holds a finished pack made with other options ({changes}); pass ", OVERWRITE,
            " to replace it (the old pack is kept until the new one is complete)",
        )  # fmt: skip
    return manifest

"""The plan of a clip pack, and its clip table once the shards are written.

To the planner a clip pack is an image pack whose items have a fixed order: the frames kept of
each clip, clip after clip, labelled with their clip's number; a video's frame is the item
`name#t`. Everything else (shards, blocks, journal, resume, workers, stores) is the image
pack's machinery, so a clip pack is byte-identical whatever the workers. docs/design.md, "Clip
packs", says how frames are kept, decoded and left out of the clip table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...core.constants import CLIP_FORMAT_VERSION, RESAMPLE
from ...core.manifest import Clip, dump_json
from ..sources.archive import PackInput
from ..sources.scanning import path_key
from .clipsource import ClipScan, find_clips
from .options import PackOptions
from .packplan import PackPlan, PlannedClip


def plan_clips(
    src: Path,
    within: str | None,
    options: PackOptions,
    probing: Callable[[str, int], None] | None = None,
) -> PackPlan | None:
    """The plan of a clip pack: the clips of `src` (`find_clips`) packed with `options` (None
    for an image pack: `options.clips` is None). A long probe reports `probing(video, bytes
    read)`."""
    clips = options.clips
    if clips is None:
        return None
    source, found = find_clips(src, within, clips.clip_list, probing)
    folder = source.reader.kind == "folder"
    return make_clip_plan(
        str(src) if folder else source.label, found, size=options.size, crop=options.crop,
        shard_size=options.shard_size, block_size=options.block_size, seed=options.seed,
        every=clips.every, max_frames=clips.max_frames, shuffle_clips=clips.shuffle_clips,
        clip_list=clips.clip_list, resample=options.resample, grey=options.grey,
        source=None if folder else source,
    )  # fmt: skip


def make_clip_plan(
    src: str,
    found: ClipScan,
    *,
    size: int,
    crop: str,
    shard_size: int,
    block_size: int,
    seed: int,
    every: int,
    max_frames: int | None,
    shuffle_clips: bool,
    clip_list: str | None = None,
    resample: str = RESAMPLE,
    grey: bool = False,
    source: PackInput | None = None,
) -> PackPlan:
    """The plan of packing the clips `find_clips` found with these options."""
    options = {
        "crop": crop,
        "variants": 1,
        "seed": seed,
        "resample": resample,
        "shuffle": False,
        "labels": "clips",
        "shard_size": shard_size,
        "every": every,
        "max_frames": max_frames,
        "shuffle_clips": shuffle_clips,
        "clip_list": clip_list,
    }
    if grey:  # (only then: the options of every other pack stay as they were)
        options["grey"] = True
    clips = list(found.clips)
    if shuffle_clips:
        order = np.random.default_rng([seed, 3]).permutation(len(clips))
        clips = [clips[i] for i in order]
    items: list[tuple[str, int]] = []
    planned: list[PlannedClip] = []
    for label, clip in enumerate(clips):
        if clip.video:
            keys = [f"{clip.name}#{t}" for t in range(0, clip.total, every)][:max_frames]
        else:
            keys = list(clip.frames[::every][:max_frames])
        fps = round(clip.fps / every, 6)
        planned.append(PlannedClip(clip.name, clip.video, fps, len(items), len(keys), clip.total))
        items += [(key, label) for key in keys]
    classes = [c.name for c in clips]
    table = [[c.name, c.video, c.fps, c.count, c.total] for c in planned]
    payload = dump_json([size, block_size, options, items, found.skipped, classes, table])
    return PackPlan(
        src=src,
        size=size,
        block_size=block_size,
        options=options,
        classes=tuple(classes),
        scan_skipped=tuple(found.skipped),
        items=tuple(items),
        per_shard=shard_size,
        fingerprint=hashlib.sha256(payload).hexdigest(),
        source=source,
        clips=tuple(planned),
    )


def finish_clips(
    plan: PackPlan, skipped: list[dict[str, str]]
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The fields of a finished clip pack's manifest (`version` and `clips`; none for an image
    pack), and the decoders' skip entries as `index.json` lists them (`by_video`)."""
    if plan.clips is None:
        return {}, skipped
    fields = {"version": CLIP_FORMAT_VERSION, "clips": clip_table(plan, skipped)}
    return fields, by_video(plan, skipped)


def clip_table(plan: PackPlan, skipped: list[dict[str, str]]) -> tuple[Clip, ...]:
    """The clips of the written pack: each clip's frames less those `skipped` (the decoders'
    skip entries, one per frame), clips without frames left out."""
    gone = {s["path"] for s in skipped}
    table: list[Clip] = []
    at = 0
    for c in plan.clips or ():
        keys = plan.items[c.start : c.start + c.count]
        count = c.count - sum(1 for key, _ in keys if key in gone)
        if count:
            table.append(Clip(c.name, at, count, c.fps))
            at += count
    return tuple(table)


def by_video(plan: PackPlan, skipped: list[dict[str, str]]) -> list[dict[str, str]]:
    """The decoders' skip entries with a video's frames reported once per video and reason
    (`video.mp4: 200 frames not packed (frames 300-499): <reason>`), in natural path order."""
    runs: dict[tuple[str, str], list[int]] = {}
    out: list[dict[str, str]] = []
    for entry in skipped:
        frame = plan.video_frame(entry["path"])
        if frame is None:
            out.append(entry)
        else:
            runs.setdefault((frame[0], entry["reason"]), []).append(frame[1])
    for (name, reason), ts in runs.items():
        which = f"frame {ts[0]}" if len(ts) == 1 else f"frames {min(ts)}-{max(ts)}"
        n = len(ts)
        out.append(
            {"path": name, "reason": f"{n} frame{'s' if n > 1 else ''} not packed ({which}): "
             f"{reason}"}
        )  # fmt: skip
    out.sort(key=lambda s: path_key(s["path"]))
    return out

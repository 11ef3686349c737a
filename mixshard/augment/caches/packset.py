"""The packs of a mix (`Overlay` and `Backgrounds` with `weights=`): each resolved, checked to
hold images of one size, and, for `Backgrounds`, their clips as one table (an image pack's
images are clips of one frame: a background that holds still)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...reading.source import Source, resolve_source


def pack_list(source: Any) -> list[Any]:
    """The packs of a mix: `source` is a list (or tuple) of packs, each a folder, a store
    URL or a resolved `Source`.

    Raises:
        TypeError: `source` is not a list of packs.
    """
    if isinstance(source, (str, bytes, os.PathLike, Source)) or not isinstance(source, Sequence):
        raise TypeError(
            "with weights= the source must be a list of packs (folders or store URLs), "
            f"got {type(source).__name__}"
        )
    if len(source) == 0:
        raise ValueError("with weights= the source must hold at least one pack, got []")
    return list(source)


def resolve_packs(packs: list[Any], **kw: Any) -> list[Source]:
    """Each pack resolved (`index.json` read once), all of one image size.

    Raises:
        ValueError: packs of different image sizes, naming them and the size to repack at.
    """
    sources = [resolve_source(p, **kw) for p in packs]
    size = sources[0].manifest.size
    for i, s in enumerate(sources[1:], 1):
        if s.manifest.size != size:
            raise ValueError(
                f"packs hold images of different sizes: pack 0 ({sources[0].manifest.origin}) "
                f"is {size} px, pack {i} ({s.manifest.origin}) is {s.manifest.size} px: repack "
                f"it at {size} px (`mixshard pack SRC OUT --size {size}`)"
            )
    return sources


@dataclass
class ClipTable:
    """Every pack's clips, numbered one after the other (`Backgrounds`).

    `first` is each clip's first frame in the packs' frames laid end to end (the device
    cache); `local` its first frame in its own pack (what a pool reads); `base[k]` the number
    of pack `k`'s first clip and `clips[k]` its count.
    """

    first: np.ndarray
    length: np.ndarray
    local: np.ndarray
    pack_of: np.ndarray
    base: np.ndarray
    clips: np.ndarray
    frames: int  # frames in all


def clip_table(sources: list[Source]) -> ClipTable:
    """The clips of `sources`, an image pack's images each a clip of one frame."""
    local, length, pack_of, counts = [], [], [], []
    for k, source in enumerate(sources):
        m = source.manifest
        if m.clips is None:
            first, count = np.arange(m.count, dtype=np.int64), np.ones(m.count, np.int64)
        else:
            first = np.array([c.start for c in m.clips], np.int64)
            count = np.array([c.count for c in m.clips], np.int64)
        local.append(first)
        length.append(count)
        pack_of.append(np.full(len(first), k, np.int64))
        counts.append(m.count)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    clips = np.array([len(f) for f in local], np.int64)
    return ClipTable(
        first=np.concatenate([f + o for f, o in zip(local, offsets)]),
        length=np.concatenate(length),
        local=np.concatenate(local),
        pack_of=np.concatenate(pack_of),
        base=np.concatenate([[0], np.cumsum(clips)[:-1]]).astype(np.int64),
        clips=clips,
        frames=int(sum(counts)),
    )


def check_limit(limit: Any, clips: np.ndarray) -> np.ndarray:
    """`limit`: per pack, play its first `k` clips only (None: all), e.g. the Distracting
    Control Suite's difficulty (4, 8 or all videos); one int or None for a single pack.
    Returns the clips each pack plays (int64).

    Raises:
        TypeError, ValueError: not one int in [1, clips] or None per pack, naming it.
    """
    if limit is None or isinstance(limit, int):
        limit = [limit] * len(clips) if len(clips) == 1 or limit is None else limit
    if not isinstance(limit, (list, tuple)) or len(limit) != len(clips):
        raise ValueError(
            f"limit must be None, or one int or None per pack ({len(clips)}), got {limit!r}"
        )
    out = clips.copy()
    for k, value in enumerate(limit):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"limit[{k}] must be an int or None, got {value!r}")
        if not 1 <= value <= clips[k]:
            raise ValueError(
                f"limit[{k}] must be in [1, {clips[k]}] (the clips of pack {k}), got {value}"
            )
        out[k] = value
    return out

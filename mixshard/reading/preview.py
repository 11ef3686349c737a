"""The pack images `mixshard preview` shows: chosen by a seed, read read-only and torch-free.

Images are read from the shards with `pread`; from an object store each block shown is fetched
and checked as the block cache fetches it (`fetch_block`) and kept nowhere. The command draws
them (`cli/sheet.py`).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from ..core.layout import block_span
from ..core.manifest import Manifest
from ..core.packpath import pack_dir
from ..core.stores import Store, load_manifest
from .pack.reader import PackReader
from .source import store_of
from .store.blockcache import fetch_block

STRIP_FRAMES = 8  # frames a clip pack's preview shows per clip


class Shown(NamedTuple):
    """What a preview shows: the pack's manifest, the images (NCHW uint8) and their labels,
    and of a clip pack each row's clip name and frame count (`clip_frames`)."""

    manifest: Manifest
    images: np.ndarray
    labels: np.ndarray
    rows: list[tuple[str, int]] | None


def preview_images(folder: str | os.PathLike, n: int, seed: int) -> Shown:
    """`n` randomly chosen images of a pack (at most its count), in stored order; of a clip
    pack, up to `STRIP_FRAMES` evenly spaced frames of each clip shown (`clip_frames`).

    Args:
        folder: the pack folder (or its `index.json`), or an object store URL.

    Raises:
        MixshardError: the pack cannot be read.
    """
    store = store_of(folder)
    manifest = load_manifest(store) if store else Manifest.load(pack_dir(folder))
    rows = None
    if manifest.clips is not None:
        index, rows = clip_frames(manifest, n, seed)
    else:
        n = min(n, manifest.count)
        index = np.sort(np.random.default_rng(seed).choice(manifest.count, n, replace=False))
    if store:
        return Shown(manifest, *_store_rows(store, manifest, index), rows)
    pack = PackReader(pack_dir(folder), manifest)
    try:
        return Shown(manifest, pack.gather(index), pack.labels(index), rows)
    finally:
        pack.close()


def clip_frames(manifest: Manifest, n: int, seed: int) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """The frames a clip pack's preview shows: a row per clip (all of them, or `n //
    STRIP_FRAMES` chosen by `seed`, at least one), each of up to `STRIP_FRAMES` frames evenly
    spaced from the clip's first to its last. Returns their image numbers, in rows, and each
    row's clip name and frame count."""
    clips = manifest.clips or ()
    rows = max(1, n // STRIP_FRAMES)
    picked = np.arange(len(clips))
    if rows < len(clips):
        picked = np.sort(np.random.default_rng(seed).choice(len(clips), rows, replace=False))
    index: list[int] = []
    shown: list[tuple[str, int]] = []
    for k in picked:
        clip = clips[int(k)]
        cols = min(STRIP_FRAMES, clip.count)
        steps = np.linspace(0, clip.count - 1, cols).round().astype(int)
        index += [clip.start + int(t) for t in steps]
        shown.append((clip.name, cols))
    return np.asarray(index, dtype=np.int64), shown


def _store_rows(
    store: Store, manifest: Manifest, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Images (NCHW) and labels of the pack images `index` (sorted), one checked fetch per
    block that holds any of them."""
    blocks = [(s.name, b) for s in manifest.shards for b in s.blocks]
    starts = np.cumsum([0] + [b.count for _, b in blocks])[:-1]
    which = np.searchsorted(starts, index, side="right") - 1
    size = manifest.size
    images = np.empty((len(index), manifest.channels, size, size), np.uint8)
    labels = np.empty(len(index), np.int32)
    for k in np.unique(which):
        name, b = blocks[k]
        start, end = block_span(b.offset, b.labels_offset, b.count, size)
        data = fetch_block(store, name, (start, end), b.sha256 or None, int(k))
        pixels = manifest.channels * size * size * b.count
        block = np.frombuffer(data, np.uint8, pixels, b.offset - start)
        rows = np.nonzero(which == k)[0]
        picked = index[rows] - starts[k]
        images[rows] = block.reshape(b.count, manifest.channels, size, size)[picked]
        labels[rows] = np.frombuffer(data, "<i4", b.count, b.labels_offset - start)[picked]
    return images, labels

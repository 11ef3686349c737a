"""The layout of one read of consecutive blocks of a shard: which bytes of the span go where.

A run of the block order is read with one scattered `preadv` over its whole span (a cold disk
serves large requests fastest; docs/design.md): each image to its row in a batch, each block's
`.npy` headers and labels into scratch memory, where they are checked, and the tar headers,
padding and keys between them into one junk area. Pure arithmetic on the manifest's offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core import layout


@dataclass(frozen=True)
class RunLayout:
    """Where the bytes of a run's span go: the span is `length` bytes at file offset `start`
    (the first block's images header); per block, `heads` and `labels` hold the `(offset,
    length)` in the scratch of its images `.npy` header and of its labels `.npy` (header and
    data); the scratch takes `scratch_bytes` (headers, labels, then the junk area at
    `junk_at`); `segments`: `(kind, block, bytes)` in file order, `kind` one of `"head"`,
    `"images"` (`bytes` = count x image bytes), `"labels"`, `"junk"`."""

    start: int
    length: int
    heads: tuple[tuple[int, int], ...]
    labels: tuple[tuple[int, int], ...]
    scratch_bytes: int
    junk_at: int
    segments: tuple[tuple[str, int, int], ...]

    @classmethod
    def of(cls, offsets: list[int], counts: list[int], size: int) -> RunLayout:
        """The layout for blocks of `counts` images of side `size` at `offsets` (one shard)."""
        segments: list[tuple[str, int, int]] = []
        heads, labels = [], []
        at = 0  # scratch used so far
        pos = start = offsets[0] - layout.images_header_len(counts[0], size)
        for j, (offset, count) in enumerate(zip(offsets, counts)):
            hlen, llen = layout.images_header_len(count, size), layout.labels_header_len(count)
            images, loff = count * 3 * size * size, layout.labels_offset_for(offset, count, size)
            if offset - hlen < pos:
                raise ValueError(f"block offsets overlap or decrease at block {j}")
            if offset - hlen > pos:
                segments.append(("junk", j, offset - hlen - pos))
            segments.append(("head", j, hlen))
            segments.append(("images", j, images))
            segments.append(("junk", j, loff - llen - (offset + images)))
            segments.append(("labels", j, llen + 4 * count))
            heads.append((at, hlen))
            labels.append((at + hlen, llen + 4 * count))
            at += hlen + llen + 4 * count
            pos = loff + 4 * count
        junk = max(n for kind, _, n in segments if kind == "junk")
        return cls(start, pos - start, tuple(heads), tuple(labels), at + junk, at, tuple(segments))

    def iov(self, addresses: list[np.ndarray], scratch: int, image_bytes: int) -> np.ndarray:
        """The `(address, length)` rows of the read (uint64): images of block `j` to
        `addresses[j]` (one address each), the rest into the scratch memory at `scratch`."""
        rows: list[np.ndarray] = []
        for kind, j, n in self.segments:
            if kind == "images":
                part = np.empty((len(addresses[j]), 2), np.uint64)
                part[:, 0], part[:, 1] = addresses[j], image_bytes
                rows.append(part)
            elif n:
                where = {"head": self.heads, "labels": self.labels}.get(kind)
                at = self.junk_at if where is None else where[j][0]
                rows.append(np.array([[scratch + at, n]], np.uint64))
        return np.concatenate(rows)

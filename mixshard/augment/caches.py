"""Where `Overlay` takes its backgrounds from: the whole pack on the device, or a stream.

(The third source, a pool of the pack refilled from the block stream, is in `pool.py`.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core.manifest import Manifest
from ..reading.local import LocalPack
from ..reading.remote import read_blocks


def read_pack_to(
    source: Any, manifest: Manifest, images: torch.Tensor, urls: list | None = None
) -> None:
    """Copy every image of a pack folder, or of the shards `urls` (`(url, shard)` pairs), into
    `images` (a uint8 tensor of that many images on any device), block by block in stored
    order: sequential reads, bounded host memory."""
    pos = 0
    if urls is None:
        pack = LocalPack(source, manifest)
        host = np.empty((manifest.block_size, manifest.image_bytes), np.uint8)
        try:
            for b, count in enumerate(pack.block_count.tolist()):
                pack.read_block(b, host)
                block = torch.from_numpy(host[:count])
                images[pos : pos + count].copy_(block.view(count, 3, manifest.size, manifest.size))
                pos += count
        finally:
            pack.close()
        return
    for url, shard in urls:
        for pixels, _ in read_blocks(url, shard, manifest.size):
            images[pos : pos + len(pixels)].copy_(torch.from_numpy(pixels.copy()))
            pos += len(pixels)


class DeviceCache:
    """The whole pack as one uint8 tensor on the device; draws walk a seeded permutation, so
    every image is drawn once before any is drawn twice."""

    def __init__(
        self,
        source: Any,
        manifest: Manifest,
        device: torch.device,
        generator: torch.Generator,
        urls: list | None = None,
    ) -> None:
        size = manifest.size
        self.count = manifest.count if urls is None else sum(s.count for _, s in urls)
        self.images = torch.empty((self.count, 3, size, size), dtype=torch.uint8, device=device)
        read_pack_to(source, manifest, self.images, urls)
        self.generator = generator
        self._perm = torch.empty(0, dtype=torch.long, device=device)
        self._cursor = 0
        self.draws = 0

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images (a new tensor)."""
        parts = []
        self.draws += n
        while n > 0:
            if self._cursor >= len(self._perm):
                self._perm = torch.randperm(
                    self.count, device=self.images.device, generator=self.generator
                )
                self._cursor = 0
            m = min(n, len(self._perm) - self._cursor)
            parts.append(self._perm[self._cursor : self._cursor + m])
            self._cursor += m
            n -= m
        index = parts[0] if len(parts) == 1 else torch.cat(parts)
        return self.images.index_select(0, index)

    def stats(self) -> dict[str, Any]:
        return {"mode": "device", "images": self.count, "draws": self.draws}

    def close(self) -> None:
        pass


class StreamCache:
    """Backgrounds from `mixshard.loader` + `prefetch`; images left over from a batch are kept
    for the next call, so no prefetched image is lost or drawn twice."""

    def __init__(
        self,
        source: Any,
        manifest: Manifest,
        device: torch.device,
        num_workers: int,
        seed: int,
        batch_size: int,
    ) -> None:
        from ..reading.loading import loader
        from ..reading.prefetcher import prefetch

        self.loader = loader(
            source,
            batch_size,
            num_workers=num_workers,
            infinite=True,
            seed=seed,
            pin_memory=device.type == "cuda",
            manifest=manifest,  # read once, by Overlay: a pack served over HTTP is fetched once
        )
        self._batches = prefetch(self.loader, device, depth=3)
        self._left: torch.Tensor | None = None
        self.draws = 0

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images; with `own=False` they may be a prefetch buffer valid until the next
        call."""
        parts = []
        have = 0
        self.draws += n
        if self._left is not None:
            parts.append(self._left)
            have = len(self._left)
            self._left = None
        while have < n:
            batch = next(self._batches)
            parts.append(batch)
            have += len(batch)
        last = parts[-1]
        extra = have - n
        if extra:
            # A prefetch buffer is reused a few batches later: keep a copy of the rest.
            self._left = last[len(last) - extra :].clone()
            parts[-1] = last[: len(last) - extra]
        if len(parts) == 1:
            return parts[0].clone() if own else parts[0]
        return torch.cat(parts)

    def stats(self) -> dict[str, Any]:
        return {"mode": "stream", "draws": self.draws}

    def close(self) -> None:
        self.loader.close()

"""Where `Overlay` takes its backgrounds from: the interface every such cache has
(`BackgroundCache`), and two of them: the whole pack on the device, or a stream.

(The third, a pool of the pack refilled from the block stream, is `pool.PoolCache`.)
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from ..core.device import host_empty, wants_pinned
from ..reading.source import Source
from ..reading.urls.remote import read_blocks
from .draws import Carry, PermutationWalk


@runtime_checkable
class BackgroundCache(Protocol):
    """What `Overlay` asks of the cache of each device (`DeviceCache`, `StreamCache`,
    `pool.PoolCache`); mypy checks that each one has it where `Overlay` makes them."""

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` uint8 images `(n, 3, size, size)` on the cache's device. With `own=False` they
        may be a buffer of the cache's, valid until a later call (the caller only reads them
        before its next take); with `own=True` they are the caller's."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters, with `"mode"` (`"device"`, `"pool"` or `"stream"`) and `"draws"`."""
        ...

    def close(self) -> None:
        """Stop any reader thread or worker (the images go when the cache is dropped); a
        second call does nothing."""
        ...


def read_pack_to(source: Source, images: torch.Tensor) -> None:
    """Copy every image of `source` into `images` (a uint8 tensor of that many images on any
    device), block by block in stored order: sequential reads into one host buffer (pinned for
    CUDA), bounded host memory."""
    m = source.manifest
    pin = wants_pinned(images.device)
    host = host_empty((m.block_size, 3, m.size, m.size), torch.uint8, pin)
    pos = 0
    if source.is_folder:
        pack = source.open_pack()
        try:
            for b, count in enumerate(pack.block_count.tolist()):
                pack.read_block(b, host.numpy().reshape(m.block_size, -1))
                images[pos : pos + count].copy_(host[:count])
                pos += count
        finally:
            pack.close()
        return
    for url, shard in source.urls or ():
        for pixels, _ in read_blocks(url, shard, m.size):
            count = len(pixels)
            host[:count].numpy()[:] = pixels
            images[pos : pos + count].copy_(host[:count])
            pos += count


class DeviceCache:
    """The whole pack as one uint8 tensor on the device; draws walk seeded permutations made on
    the device, so every image is drawn once before any is drawn twice."""

    def __init__(self, source: Source, device: torch.device, generator: torch.Generator) -> None:
        m = source.manifest
        self.count = source.count
        self.images = torch.empty((self.count, 3, m.size, m.size), dtype=torch.uint8, device=device)
        read_pack_to(source, self.images)
        self._walk = PermutationWalk(
            self.count,
            lambda: torch.randperm(self.count, device=device, generator=generator),
            distinct=False,
        )
        self.draws = 0

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images (a new tensor)."""
        self.draws += n
        parts = self._walk.take(n)
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
        self, source: Source, device: torch.device, num_workers: int, seed: int, batch_size: int
    ) -> None:
        from ..reading.loading import loader
        from ..reading.prefetcher import prefetch

        self.loader = loader(
            source,
            batch_size,
            num_workers=num_workers,
            infinite=True,
            seed=seed,
            pin_memory=wants_pinned(device),
        )
        batches = prefetch(self.loader, device, depth=3)
        # a prefetch buffer is used again a few batches later: the rest of one is copied
        self._carry: Carry[torch.Tensor] = Carry(lambda: next(batches), torch.clone)
        self.draws = 0

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images; with `own=False` they may be a prefetch buffer valid until the next
        call."""
        self.draws += n
        parts = self._carry.take(n)
        if len(parts) == 1:
            return parts[0].clone() if own else parts[0]
        return torch.cat(parts)

    def stats(self) -> dict[str, Any]:
        return {"mode": "stream", "draws": self.draws}

    def close(self) -> None:
        self.loader.close()

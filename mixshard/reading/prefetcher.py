"""`prefetch(loader, device)`: overlap host-to-device copies with the consumer's work.

(Named `prefetcher` so that importing it never shadows the exported `mixshard.prefetch`.)

One ring of `depth` device buffers on every device. Each batch is copied into its slot, from
pinned memory without blocking, as a job of the device's lane (`core/device.py`) queued after
the consumer's work so far: a slot is overwritten only once the work on the batch it held is
done. On a CPU the batch is handed on as it is. Buffers are reused (device memory stays flat):
one is replaced only for a batch of another shape or dtype, allocated on the consumer's stream
so that the caching allocator never hands it out while queued work may still read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..core.checks import check_int
from ..core.device import Fence, Lane, move


def landing(src: torch.Tensor, old: torch.Tensor | None, device: torch.device) -> Any:
    """Where a copy of `src` onto `device` lands: `old` when it has the shape and dtype, a new
    buffer when not, None when `src` is on `device` already (nothing to copy)."""
    if src.device == device:
        return None
    if old is not None and old.shape == src.shape and old.dtype == src.dtype:
        return old
    return torch.empty(src.shape, dtype=src.dtype, device=device)


def land(src: torch.Tensor, dst: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """`src`'s data in `dst` (the copy queued, not waited for), or `src` when `dst` is None."""
    if dst is None:
        return move(src, device)
    return dst.copy_(src, non_blocking=True)


def prefetch(loader: Iterable[Any], device: str | torch.device, *, depth: int = 2) -> Iterator[Any]:
    """Yield the loader's batches on `device`, the next ones copying while you use this one.

    Args:
        loader: yields tensors or tuples/lists of tensors (pinned for the fastest copies).
        device: where the batches go (on a CPU they pass through as they are).
        depth: device buffers in the ring (>= 2).

    Yields:
        Batches on `device`. A yielded tensor may be a ring buffer: it stays valid until
        `depth - 1` more batches have been taken (the next one is copied while you use this
        one); `.clone()` it to keep it longer.
    """
    check_int("depth", depth, 1)
    return Ring(torch.device(device), max(2, depth)).run(loader)


class Ring:
    """The ring of device buffers and the fences of the copies into them."""

    def __init__(self, device: torch.device, depth: int) -> None:
        self.device, self.depth = device, depth
        # a copy is only queued: no thread needed, so nothing to stop when the ring is dropped
        self.lane = Lane(device, threaded=False)
        self.slots: list[list[torch.Tensor]] = [[] for _ in range(depth)]
        self.hosts: list[Any] = [None] * depth  # each host batch lives until its slot is reused
        self.fences: list[Fence | None] = [None] * depth
        self.copies = 0  # batches that were copied (not already on the device)

    def load(self, i: int, batch: Any) -> None:
        """Queue the copy of `batch` into slot `i % depth`."""
        s = i % self.depth
        host = list(batch) if isinstance(batch, (tuple, list)) else [batch]
        old = self.slots[s] + [None] * (len(host) - len(self.slots[s]))
        dsts = [landing(t, o, self.device) for t, o in zip(host, old)]  # on the consumer's stream
        self.copies += any(d is not None for d in dsts)

        def job() -> None:
            self.slots[s] = [land(t, d, self.device) for t, d in zip(host, dsts)]

        self.fences[s] = self.lane.submit(job)
        self.hosts[s] = batch

    def take(self, i: int) -> Any:
        """Slot `i % depth`, for the consumer once its copy is done."""
        s = i % self.depth
        self.lane.wait(self.fences[s])
        batch, tensors = self.hosts[s], self.slots[s]
        return type(batch)(tensors) if isinstance(batch, (tuple, list)) else tensors[0]

    def run(self, loader: Iterable[Any]) -> Iterator[Any]:
        """The batches of `loader`, each copied while the one before is used."""
        i = -1
        for i, batch in enumerate(loader):
            self.load(i, batch)
            if i > 0:
                yield self.take(i - 1)
        if i >= 0:
            yield self.take(i)

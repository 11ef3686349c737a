"""`prefetch(loader, device)`: overlap host-to-device copies with the consumer's work.

(Named `prefetcher` so that importing it never shadows the exported `mixshard.prefetch`.)

One side CUDA stream (made once) copies pinned host batches into a small ring of device
buffers with `non_blocking=True`. The consumer's stream waits on the copy (an event) before it
sees a buffer, and the side stream waits on an event recorded on the consumer's stream before
it overwrites that buffer again. Buffers are reused, so device memory stays flat (timm's
PrefetchLoader allocated per batch and grew: huggingface/pytorch-image-models#2781); only when
a batch of another shape or dtype arrives is a buffer replaced, and then the old one is handed
to the caching allocator with `record_stream`, so that queued work can still read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch


def _tensors(batch: Any) -> list[torch.Tensor]:
    return list(batch) if isinstance(batch, (tuple, list)) else [batch]


def _pack_like(batch: Any, tensors: list[torch.Tensor]) -> Any:
    return type(batch)(tensors) if isinstance(batch, (tuple, list)) else tensors[0]


def prefetch(loader: Iterable[Any], device: str | torch.device, *, depth: int = 2) -> Iterator[Any]:
    """Yield the loader's batches on `device`, the next ones copying while you use this one.

    Args:
        loader: yields tensors or tuples/lists of tensors (pinned for the fastest copies).
        device: where the batches go. On a CPU device batches pass through unchanged; other
            non-CUDA devices get a plain `.to(device)`.
        depth: device buffers in the ring (>= 2).

    Yields:
        Batches on `device`. On CUDA a yielded tensor is a ring buffer: it stays valid until
        `depth` more batches have been taken; `.clone()` it to keep it longer.
    """
    device = torch.device(device)
    if device.type == "cpu":
        yield from loader
        return
    if device.type != "cuda":
        for batch in loader:
            yield _pack_like(batch, [t.to(device) for t in _tensors(batch)])
        return
    yield from _CudaRing(device, max(2, depth)).run(loader)


class _CudaRing:
    """The ring of device buffers, its side stream and the events that order the two streams."""

    def __init__(self, device: torch.device, depth: int) -> None:
        self.depth = depth
        self.side = torch.cuda.Stream(device)
        self.consumer = torch.cuda.current_stream(device)
        self.device = device
        self.slots: list[list[torch.Tensor] | None] = [None] * depth
        self.hosts: list[Any] = [None] * depth  # each host batch lives until its slot is reused
        self.ready = [torch.cuda.Event() for _ in range(depth)]
        self.free: list[torch.cuda.Event | None] = [None] * depth

    def _buffers(self, s: int, host: list[torch.Tensor]) -> list[torch.Tensor]:
        old = self.slots[s]
        if old is not None and [(t.shape, t.dtype) for t in old] == [
            (t.shape, t.dtype) for t in host
        ]:
            return old
        if old is not None:
            for t in old:  # the consumer's queued work may still read it
                t.record_stream(self.consumer)
        fresh = [torch.empty(t.shape, dtype=t.dtype, device=self.device) for t in host]
        self.slots[s] = fresh
        return fresh

    def load(self, i: int, batch: Any) -> None:
        """Start copying `batch` into slot `i % depth` on the side stream."""
        s = i % self.depth
        host = _tensors(batch)
        with torch.cuda.stream(self.side):
            free = self.free[s]
            if free is not None:
                self.side.wait_event(free)  # the consumer is done with this buffer
            for dst, src in zip(self._buffers(s, host), host):
                dst.copy_(src, non_blocking=True)
            self.ready[s].record(self.side)
        self.hosts[s] = batch

    def take(self, i: int) -> Any:
        """Slot `i % depth`, for the consumer's stream once its copy is done."""
        s = i % self.depth
        self.consumer.wait_event(self.ready[s])
        return _pack_like(self.hosts[s], self.slots[s] or [])

    def release(self, i: int) -> None:
        """Everything the consumer queued on slot `i % depth` precedes this event."""
        s = i % self.depth
        event = torch.cuda.Event()
        event.record(self.consumer)
        self.free[s] = event

    def run(self, loader: Iterable[Any]) -> Iterator[Any]:
        it = iter(loader)
        upcoming = next(it, None)
        i = 0
        if upcoming is not None:
            self.load(0, upcoming)
        while upcoming is not None:
            upcoming = next(it, None)
            if upcoming is not None:
                self.load(i + 1, upcoming)
            yield self.take(i)
            self.release(i)
            i += 1

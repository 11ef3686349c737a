"""`prefetch(loader, device)`: overlap host-to-device copies with the consumer's work.

(Named `prefetcher` so that importing it never shadows the exported `mixshard.prefetch`.)

One side CUDA stream (made once) copies pinned host batches into a small ring of device
buffers with `non_blocking=True`. The consumer's stream waits on the copy (an event) before it
sees a buffer, and the side stream waits on an event recorded on the consumer's stream before
it overwrites that buffer again. No `record_stream`, no fresh device allocation per batch, so
device memory stays flat (timm's PrefetchLoader grew it: huggingface/pytorch-image-models#2781).
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
    yield from _cuda_prefetch(loader, device, max(2, depth))


def _cuda_prefetch(loader: Iterable[Any], device: torch.device, depth: int) -> Iterator[Any]:
    side = torch.cuda.Stream(device)
    slots: list[list[torch.Tensor] | None] = [None] * depth
    hosts: list[Any] = [None] * depth  # keep each host batch alive until its slot is reused
    ready = [torch.cuda.Event() for _ in range(depth)]
    free: list[torch.cuda.Event | None] = [None] * depth
    consumer = torch.cuda.current_stream(device)

    def load(i: int, batch: Any) -> None:
        s = i % depth
        host = _tensors(batch)
        with torch.cuda.stream(side):
            if free[s] is not None:
                side.wait_event(free[s])  # the consumer is done with this buffer
            old = slots[s]
            if (
                old is None
                or [t.shape for t in old] != [t.shape for t in host]
                or [t.dtype for t in old] != [t.dtype for t in host]
            ):
                if old is not None:
                    for t in old:  # the consumer's queued work may still read it
                        t.record_stream(consumer)
                old = [torch.empty(t.shape, dtype=t.dtype, device=device) for t in host]
                slots[s] = old
            for dst, src in zip(old, host):
                dst.copy_(src, non_blocking=True)
            ready[s].record(side)
        hosts[s] = batch

    it = iter(loader)
    i = 0
    try:
        first = next(it)
    except StopIteration:
        return
    load(0, first)
    while True:
        s = i % depth
        try:
            upcoming = next(it)
        except StopIteration:
            upcoming = None
        if upcoming is not None:
            load(i + 1, upcoming)
        consumer.wait_event(ready[s])
        yield _pack_like(hosts[s], slots[s])
        # Everything the consumer queued on this buffer precedes this event.
        free[s] = torch.cuda.Event()
        free[s].record(consumer)
        if upcoming is None:
            return
        i += 1

"""The compiled CPU module (`_lerp.c`: the one-pass composite, the keyed draws) where the
install built it, and how a tensor's memory is handed to it: no numpy view per tensor, which
cost more than the pass itself on a few small frames."""

from __future__ import annotations

from types import ModuleType

import torch

lerp: ModuleType | None
try:  # built where the install had a C compiler
    from . import _lerp as lerp
except ImportError:  # pragma: no cover - the torch path does it
    lerp = None

# a tensor's memory as the compiled code takes it: (address, bytes, the tensor kept alive)
Region = tuple[int, int, torch.Tensor]


def region(t: torch.Tensor) -> Region:
    """The memory a view reads, from its first element to its farthest: (address, bytes, the
    tensor, which the tuple keeps alive through the call). The compiled code reads it through
    the view's strides."""
    if t.is_contiguous():  # (the common case, without a sum over the strides)
        return t.data_ptr(), t.nbytes, t
    if t.numel() == 0:
        return t.data_ptr(), 0, t
    extent = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), extent * t.element_size(), t

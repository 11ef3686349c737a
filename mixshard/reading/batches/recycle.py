"""Batch buffers used again once nobody holds the batches made in them.

A fresh buffer per batch costs more than filling it: the kernel maps and zeroes its pages on
first touch, and frees them again when the batch is dropped. A batch handed out is a tensor
over a numpy buffer the recycler keeps; the tensor's storage holds a reference to that buffer,
as does every view of it, so once the buffer's reference count is back to the recycler's own,
no tensor or view can see it any more and it is filled again.
"""

from __future__ import annotations

import sys
from collections import deque

import numpy as np
import torch

from ...core import locks
from ...core.device import host_empty


class Recycler:
    """uint8 buffers of `rows` x `row_bytes`, lent out and used again once free. At most `keep`
    are remembered: beyond that the oldest is forgotten (freed by the garbage collector
    whenever its batch is), so a caller keeping every batch costs nothing here."""

    def __init__(self, rows: int, row_bytes: int, keep: int) -> None:
        self._shape = (rows, row_bytes)
        self._lent: deque[np.ndarray] = deque()
        self._keep = keep
        self._lock = locks.Lock()
        self.made = 0  # buffers made (the others were used again)

    def get(self) -> np.ndarray:
        """A buffer nobody else holds: a free one lent before, else a new one."""
        with self._lock:
            for _ in range(len(self._lent)):  # oldest first: batches are mostly dropped in order
                buffer = self._lent.popleft()
                if sys.getrefcount(buffer) == 2:  # `buffer` and getrefcount's argument
                    return buffer
                self._lent.append(buffer)
            self.made += 1
        return np.empty(self._shape, np.uint8)

    def images(self, shape: tuple[int, ...], pin: bool) -> tuple[torch.Tensor, np.ndarray | None]:
        """A batch's images of `shape`, and the buffer of this recycler under them: pinned ones
        have none (torch's pinned allocator keeps and reuses its buffers itself)."""
        if pin:
            return host_empty(shape, torch.uint8, pin=True), None
        buffer = self.get()
        return torch.from_numpy(buffer).view(shape), buffer

    @property
    def remembered(self) -> int:
        """Buffers lent out and remembered, to be used again once free."""
        return len(self._lent)

    def lend(self, buffer: np.ndarray) -> None:
        """`buffer` is handed out: it may be used again once nobody holds it."""
        with self._lock:
            self._lent.append(buffer)
            while len(self._lent) > self._keep:
                self._lent.popleft()

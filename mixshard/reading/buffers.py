"""Reads into a caller's buffer for the readers that are not batches (a device cache, a clip
pool, a video's frames), through the pack reader the batches use and, for a whole pack, the
page-cache decision of the source's `ReadPlan`."""

from __future__ import annotations

import numpy as np
import torch

from ..core.device import host_empty, wants_pinned
from ..core.errors import MixshardError
from .batches.plan import default_plan
from .pack.reader import PackReader
from .source import Source


def read_pack_into(source: Source, out: torch.Tensor) -> None:
    """Every image of `source` into `out` (uint8, that many images, on any device), block by
    block in stored order through one host buffer (pinned for CUDA): bounded host memory."""
    m = source.manifest
    drop = default_plan(m, source.kind == "store").drop_cache
    host = host_empty((m.block_size, 3, m.size, m.size), torch.uint8, wants_pinned(out.device))
    pos, rows = 0, host.numpy().reshape(m.block_size, -1)
    pack = source.open_pack()
    try:
        for b, count in enumerate(pack.block_count.tolist()):
            pack.read_block(b, rows, drop)
            out[pos : pos + count].copy_(host[:count])
            pos += count
    finally:
        pack.close()


def read_images_into(
    pack: PackReader, numbers: np.ndarray, out: np.ndarray | torch.Tensor, damaged: str | None
) -> None:
    """Images `numbers` of `pack` into `out[:len(numbers)]` (uint8, contiguous host memory).
    An image of a damaged block (a pack opened to skip them, which warns) raises `MixshardError`
    with the message `damaged`, or with `damaged` None is left as `out` held it."""
    n = len(numbers)
    rows = out.numpy() if isinstance(out, torch.Tensor) else out
    bad = pack.read_images(numbers, rows[:n].reshape(n, -1))
    if damaged is not None and bad is not None and bad.any():
        raise MixshardError(damaged)

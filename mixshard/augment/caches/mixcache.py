"""`Overlay`'s cache over several packs: sample `t` (counted per device from the first call)
takes pack `Mix.pick_np(keyed(key, t))`, by its number, not its batch; the images come from each
pack's own cache (device, pool or stream, sharing the one `cache_fraction`; a pool's share is
its pack's largest weight's, so it refills at its weight's rate: docs/design.md, "Mixing packs
and resuming").
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import torch

from ...core.device import move_index
from ..draws.keyed import keyed_np
from ..draws.mixing import Mix
from ..kernels.ops import place
from .cache import BackgroundCache, DeviceCache, StreamCache
from .pieces import Carry

_PACK = 7  # the stream of the samples' pack draws


class MixedCache:
    """`BackgroundCache` over one cache per pack (see the module docstring).

    Args:
        caches: each pack's cache, on `device`.
        mix: the weights (shared by the `Overlay`'s devices: a call is a step of its schedule).
        key: the key of the picks (`keyed.seed_key` of this process's seed).
        shape: one image's `(3, size, size)`.
        store: device caches only: the one tensor every pack's `DeviceCache` is a slice of,
            in pack order; a call is then one gather from it, as a single pack's is.
        chunked: pools: each pack's pool is asked for the first call's number of images each
            time (what it leaves over is kept for the next calls), so that the draws it makes
            ahead for its next call, on its own thread, are always the ones asked for. A chunk
            is the pool's buffer, which its next take overwrites on the pool's thread: each
            piece of it is put in place before that take (`_pieces`).

    A call puts each pack's pieces straight into their samples' places, flipped there when
    asked (one pass, as one pack's flip; a call from one pack and one piece, not flipped, is
    that piece, as one pack's take is).
    """

    def __init__(
        self,
        caches: list[BackgroundCache],
        mix: Mix,
        key: int,
        device: torch.device,
        shape: tuple[int, int, int],
        store: torch.Tensor | None = None,
        chunked: bool = False,
    ) -> None:
        self.caches, self.mix, self.key, self.store = caches, mix, key, store
        self.device, self.shape, self.chunked = device, shape, chunked
        self.samples = 0  # samples drawn: the next one's number
        self._carries: list[Carry[torch.Tensor]] = []
        self.chunk = 0  # (chunked: the first call's size)
        self._out: torch.Tensor | None = None  # the images lent by the last call

    def picks(self, n: int) -> np.ndarray:
        """The packs of the next `n` samples (by the weights in force), counted drawn."""
        numbers = np.arange(self.samples, self.samples + n, dtype=np.int64)
        self.samples += n
        return self.mix.pick_np(keyed_np(self.key, numbers, 0, _PACK))

    def take(self, n: int, own: bool = True, flipped: torch.Tensor | None = None) -> torch.Tensor:
        """`n` images: each sample's from its pack's cache, in sample order; each flipped
        horizontally where `flipped` (`(n,)` bool) is True, in the same pass."""
        packs = self.picks(n)
        self.mix.advance()
        counts = np.bincount(packs, minlength=len(self.caches))
        if self.store is not None:
            if counts.max() == n and flipped is None:  # one pack: its images as they come
                return self.caches[int(packs[0])].take(n, own)
            gathered = self._output(n, own)
            place(gathered, self.store, rows=self._index(packs, counts), flipped=flipped)
            return gathered
        if self.chunked and not self._carries:
            self.chunk = n
            self._carries = [Carry(partial(c.take, n, False)) for c in self.caches]
        out: torch.Tensor | None = None
        flips = None if flipped is None else _host(flipped)
        for k, count in enumerate(counts.tolist()):
            if not count:
                continue
            where, lo = np.flatnonzero(packs == k), 0
            for piece in self._pieces(k, count):
                if len(piece) == n and flipped is None:  # one pack, one piece: as it comes
                    return piece.clone() if own else piece
                out = self._output(n, own) if out is None else out
                at = where[lo : lo + len(piece)]
                place(out, piece, at, flipped=None if flips is None else _of(flips, at))
                lo += len(piece)
        assert out is not None
        return out

    def carried(self) -> dict[str, Any] | None:
        """Chunked: the chunk's size and the images each pack's last chunk has left (None
        before the first call)."""
        if not self._carries:
            return None
        return {"chunk": self.chunk, "left": [c.left for c in self._carries]}

    def resume(self, carried: dict[str, Any], taken: list[bool]) -> None:
        """Continue from `carried()`, each pool made with its calls but the last (a loaded
        state's): the packs that were `taken` from take their last chunk again, and carry its
        last `left` images, as the run that saved the state did."""
        chunk, left = _carried(carried, len(self.caches))
        self.chunk, self._carries = chunk, []
        for cache, keep, again in zip(self.caches, left, taken):
            carry: Carry[torch.Tensor] = Carry(partial(cache.take, chunk, False))
            if again:
                images = cache.take(chunk, own=True)
                carry.restart(images[len(images) - keep :] if keep else None)
            self._carries.append(carry)

    def _pieces(self, k: int, count: int) -> Iterator[torch.Tensor]:
        """Pack `k`'s next `count` images, in pieces, each valid until the next is asked for
        (the last until the cache's next take): `take` places each before it asks for the
        next, so no pack's images are copied out first (a pool's chunk, a stream's batch, may
        be a buffer its next take overwrites)."""
        if self._carries:
            return self._carries[k].pieces(count)
        cache = self.caches[k]
        if isinstance(cache, StreamCache):
            return cache.pieces(count)
        return iter([cache.take(count, own=False)])

    def _output(self, n: int, own: bool) -> torch.Tensor:
        """Where a call's images go: the last call's buffer again unless `own` (the caller
        reads a lent result before its next take; one pack's cache hands out its own too)."""
        if own:
            return torch.empty((n, *self.shape), dtype=torch.uint8, device=self.device)
        if self._out is None or len(self._out) != n:
            self._out = torch.empty((n, *self.shape), dtype=torch.uint8, device=self.device)
        return self._out

    def _index(self, packs: np.ndarray, counts: np.ndarray) -> torch.Tensor:
        """Where in `store` each sample's image is (the device caches' draws, in order)."""
        if self.device.type == "cpu":  # numpy's ops: a few µs fewer each than torch's
            host = np.empty(len(packs), np.int64)
            offset = 0
            for k, cache in enumerate(self.caches):
                assert isinstance(cache, DeviceCache)
                if counts[k]:
                    host[packs == k] = cache.take_index(int(counts[k])).numpy() + offset
                offset += cache.count
            return torch.from_numpy(host)
        index = torch.empty(len(packs), dtype=torch.int64, device=self.device)
        offset = 0
        for k, cache in enumerate(self.caches):
            assert isinstance(cache, DeviceCache)
            if counts[k]:
                where = move_index(np.flatnonzero(packs == k), self.device)
                index.index_copy_(0, where, cache.take_index(int(counts[k])) + offset)
            offset += cache.count
        return index

    def stats(self) -> dict[str, Any]:
        per_pack = [c.stats() for c in self.caches]
        return {"mode": per_pack[0]["mode"], "draws": self.samples, "packs": per_pack}

    def close(self) -> None:
        for cache in self.caches:
            cache.close()


def _host(flipped: torch.Tensor) -> torch.Tensor | np.ndarray:
    """The flips as the placing indexes them: a CPU's as numpy (whose index of a few values
    costs a fraction of torch's)."""
    return flipped.numpy() if flipped.device.type == "cpu" else flipped


def _of(flips: torch.Tensor | np.ndarray, at: np.ndarray) -> torch.Tensor | np.ndarray:
    """The flips of the samples at `at`."""
    if isinstance(flips, np.ndarray):
        return flips[at]
    return flips.index_select(0, move_index(at, flips.device))


def pool_shares(size: int, mix: Mix) -> list[int]:
    """A pool of `size` images split between the packs by each one's largest weight (the
    constructor's and its schedule's: not those in force, which a loaded state changes), at
    least one image each."""
    top = mix.initial.copy()
    for _, weights in mix.schedule:
        top = np.maximum(top, weights)
    return [max(1, int(size * w / top.sum())) for w in top]


def _carried(carried: Any, packs: int) -> tuple[int, list[int]]:
    """`MixedCache.carried()`'s chunk and images left per pack, checked."""
    chunk = carried.get("chunk") if isinstance(carried, dict) else None
    left = carried.get("left") if isinstance(carried, dict) else None
    if (
        type(chunk) is not int
        or chunk < 1
        or not isinstance(left, list)
        or len(left) != packs
        or not all(type(x) is int and 0 <= x <= chunk for x in left)
    ):
        raise ValueError(f"state carried must be a chunk and the images each pack left: {carried}")
    return chunk, left

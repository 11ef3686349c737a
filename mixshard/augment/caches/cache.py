"""Where `Overlay` takes its backgrounds from: the interface every such cache has
(`BackgroundCache`), and two of them: the whole pack on the device, or a stream.

(The third, a pool of the pack refilled from the block stream, is `imagepool.ImagePool`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

from ...core.device import wants_pinned
from ...reading.buffers import read_pack_into
from ...reading.source import Source
from ..draws.keyed import mix64_int
from .pieces import Carry, PermutationWalk


@runtime_checkable
class BackgroundCache(Protocol):
    """What `Overlay` asks of the cache of each device (`DeviceCache`, `StreamCache`,
    `imagepool.ImagePool`); mypy checks that each one has it where `Overlay` makes them."""

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


class Permutations:
    """The permutations of a `DeviceCache`, counted (`epoch`). With `epoch_seed` each is drawn
    from the generator seeded by `(epoch_seed, epoch)` (a pack of a mix, whose generator draws
    nothing else); else from the generator as it is (the `Overlay`'s own, which draws the
    flips and crops too), whose state before the last one is kept (`then`): either way a
    state can make the last permutation again."""

    def __init__(
        self, count: int, device: torch.device, generator: torch.Generator, epoch_seed: int | None
    ) -> None:
        self.count, self.device, self.generator = count, device, generator
        self.epoch_seed, self.epoch = epoch_seed, 0
        self.then: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor:
        if self.epoch_seed is not None:
            self.generator.manual_seed(mix64_int(self.epoch_seed + self.epoch))
        else:
            self.then = self.generator.get_state()
        self.epoch += 1
        return torch.randperm(self.count, device=self.device, generator=self.generator)


class DeviceCache:
    """The whole pack as one uint8 tensor on the device; draws walk seeded permutations made on
    the device, so every image is drawn once before any is drawn twice."""

    def __init__(
        self,
        source: Source,
        device: torch.device,
        generator: torch.Generator,
        epoch_seed: int | None = None,
        images: torch.Tensor | None = None,
    ) -> None:
        m = source.manifest
        self.count = source.count
        if images is None:  # (a mix's packs share one tensor: `mixcache.py` gathers once)
            shape = (self.count, 3, m.size, m.size)
            images = torch.empty(shape, dtype=torch.uint8, device=device)
        self.images = images
        read_pack_into(source, self.images)
        self.perms = Permutations(self.count, device, generator, epoch_seed)
        self._walk = PermutationWalk(self.count, self.perms, distinct=False)
        self.draws = 0

    def state_dict(self) -> dict[str, Any]:
        """The permutations made, where in the last one the draws are, and the draws (the
        generator's state before the last permutation is `perms.then`)."""
        return {"epoch": self.perms.epoch, "cursor": self._walk.cursor, "draws": self.draws}

    def load_state_dict(self, state: dict[str, Any], then: torch.Tensor | None) -> None:
        """Continue from `state_dict()`: the last permutation made again (from `then`, the
        generator's state before it, unless keyed by epoch); the generator is left after it."""
        epoch, cursor = _ints(state, ("epoch", "cursor", "draws"), self.count)[:2]
        if epoch > 0:
            self.perms.epoch = epoch - 1
            if self.perms.epoch_seed is None:
                if then is None:
                    raise ValueError("state of a device cache lacks its generator's state")
                self.perms.generator.set_state(then)
            self._walk.restart(self.perms(), cursor)
        self.draws = state["draws"]

    def take_index(self, n: int) -> torch.Tensor:
        """The numbers of the next `n` images (counted drawn)."""
        self.draws += n
        parts = self._walk.take(n)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images (a new tensor)."""
        return self.images.index_select(0, self.take_index(n))

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
        from ...reading.loading import loader
        from ...reading.prefetcher import prefetch

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
        self._batches = batches
        self._carry: Carry[torch.Tensor] = Carry(self._next_batch, torch.clone)
        self.draws = self.taken = 0

    def _next_batch(self) -> torch.Tensor:
        self.taken += 1
        return next(self._batches)

    def state_dict(self) -> dict[str, Any]:
        """The batches taken from the loader, the images left of the last, the draws."""
        return {"taken": self.taken, "left": self._carry.left, "draws": self.draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()` (before the first take): the loader starts at the
        batch the state was in, whose first images are skipped."""
        taken, left, draws = _ints(state, ("taken", "left", "draws"), None)
        if self.taken:
            raise ValueError("a stream cache's state is loaded before its first draw")
        loader = self.loader
        position = taken - (1 if left else 0)
        saved = loader.state_dict()
        saved["epoch"], saved["batch"] = divmod(position, loader.batches_per_epoch)
        loader.load_state_dict(saved)
        self.taken = position
        if left:
            batch = self._next_batch()
            if left > len(batch):
                raise ValueError(f"state left {left} images of a batch of {len(batch)}")
            self._carry.restart(batch[len(batch) - left :].clone())
        self.draws = draws

    def take(self, n: int, own: bool = True) -> torch.Tensor:
        """`n` images; with `own=False` they may be a prefetch buffer valid until the next
        call."""
        self.draws += n
        parts = self._carry.take(n)
        if len(parts) == 1:
            return parts[0].clone() if own else parts[0]
        return torch.cat(parts)

    def pieces(self, n: int) -> Iterator[torch.Tensor]:
        """`n` images as consecutive pieces of the prefetched batches, each valid only until
        the next piece is asked for (and the last until the next take): no copy of a batch's
        rest, which the next take reads before it takes another batch."""
        self.draws += n
        return self._carry.pieces(n, keep=False)

    def stats(self) -> dict[str, Any]:
        return {"mode": "stream", "draws": self.draws}

    def close(self) -> None:
        self.loader.close()


def _ints(state: Any, keys: tuple[str, ...], top: int | None) -> list[int]:
    """`state[key]` for `keys`: ints >= 0 (the second at most `top`), checked."""
    if not isinstance(state, dict) or any(k not in state for k in keys):
        raise ValueError(f"state of a cache must hold {', '.join(keys)}, got {state!r}")
    values = [state[k] for k in keys]
    for key, value in zip(keys, values):
        if type(value) is not int or value < 0:
            raise ValueError(f"state {key} must be an int >= 0, got {value!r}")
    if top is not None and values[1] > top:
        raise ValueError(f"state {keys[1]} must be at most {top}, got {values[1]}")
    return values

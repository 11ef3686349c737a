"""`Overlay`: the callable that replaces the reference `random_overlay`.

Backgrounds come from a pack either kept whole in device memory (a device-side permutation
and gather per call: no workers, no host-to-device copy per step) or streamed by
`mixshard.loader` + `mixshard.prefetch`. Flip, crop and resize run batched on the device.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import torch

from .format import Manifest
from .ops import blend, crop_resize, flip, random_crop_boxes, random_flip_mask, resize
from .sources import LocalPack, is_folder, read_blocks, resolve_urls
from .stream import dist_rank_world

_RATIO = (3.0 / 4.0, 4.0 / 3.0)


def free_memory(device: torch.device) -> int:
    """Bytes free for a cache on `device` (GPU memory, or available RAM for the CPU)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class _DeviceCache:
    """The whole pack as one uint8 tensor on the device; draws walk a seeded permutation, so
    every image is drawn once before any is drawn twice."""

    def __init__(
        self,
        source: Any,
        manifest: Manifest,
        device: torch.device,
        generator: torch.Generator,
        chunk: int = 65536,
    ) -> None:
        size = manifest.size
        if is_folder(source):
            pack = LocalPack.open(source, manifest=manifest)
            self.images = torch.empty((pack.count, 3, size, size), dtype=torch.uint8, device=device)
            for lo in range(0, pack.count, chunk):  # bounded host memory for big packs
                hi = min(lo + chunk, pack.count)
                self.images[lo:hi].copy_(torch.from_numpy(pack.gather(np.arange(lo, hi))))
        else:
            _, shards = resolve_urls(source)
            blocks = [
                images for url, shard in shards for images, _ in read_blocks(url, shard, size)
            ]
            self.images = torch.from_numpy(np.concatenate(blocks)).to(device)
        self.count = len(self.images)
        self.generator = generator
        self._perm = torch.empty(0, dtype=torch.long, device=device)
        self._cursor = 0

    def take(self, n: int) -> torch.Tensor:
        parts = []
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


class _StreamCache:
    """Backgrounds from `mixshard.loader` + `prefetch`; images left over from a batch are kept
    for the next call, so no prefetched image is lost or drawn twice."""

    def __init__(
        self, source: Any, device: torch.device, num_workers: int, seed: int, batch_size: int
    ) -> None:
        from .prefetcher import prefetch
        from .stream import loader

        self.loader = loader(
            source,
            batch_size,
            num_workers=num_workers,
            infinite=True,
            seed=seed,
            pin_memory=device.type == "cuda",
        )
        self._batches = prefetch(self.loader, device, depth=3)
        self._left: torch.Tensor | None = None

    def take(self, n: int, own: bool) -> torch.Tensor:
        parts = []
        have = 0
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

    def close(self) -> None:
        self.loader.close()


class Overlay:
    """Random overlay of pack images onto frame-stacked observations.

    Args:
        source: a pack folder (or shard URLs, see `ShardStream`).
        alpha: blend weight: a float, `(lo, hi)` for a uniform draw per sample, or a tensor.
        flip: flip each background horizontally with probability 1/2 (on the device).
        crop: `(lo, hi)`: a RandomResizedCrop per background with that area scale range
            (ratio 3/4-4/3), batched on the device; None keeps the packed image whole.
        device: where backgrounds are made; default each call's `obs.device`.
        cache: `"device"` (whole pack in device memory), `"stream"` (loader workers +
            prefetch) or `"auto"`: device when the pack fits in `cache_fraction` of the free
            device memory, else stream.
        num_workers: stream workers.
        seed: seed of every random draw (images, alpha, flips, crops).
        cache_fraction: share of free device memory `"auto"` may use for the cache.
        batch_size: batch size of the stream (any number of backgrounds can be asked for).

    Nothing is loaded until the first call. `overlay(obs)` returns the blended observations;
    `overlay.sample(n, device)` returns `n` backgrounds (uint8 NCHW).
    """

    def __init__(
        self,
        source: str | os.PathLike | list[str],
        *,
        alpha: float | tuple[float, float] | torch.Tensor = 0.5,
        flip: bool = True,
        crop: tuple[float, float] | None = None,
        device: str | torch.device | None = None,
        cache: str = "auto",
        num_workers: int = 4,
        seed: int = 0,
        cache_fraction: float = 0.25,
        batch_size: int = 256,
    ) -> None:
        if cache not in ("auto", "device", "stream"):
            raise ValueError(f"cache must be 'auto', 'device' or 'stream', got {cache!r}")
        if crop is not None and not (0 < crop[0] <= crop[1] <= 1):
            raise ValueError(f"crop must be (lo, hi) with 0 < lo <= hi <= 1, got {crop}")
        if isinstance(alpha, tuple) and not 0 <= alpha[0] <= alpha[1] <= 1:
            raise ValueError(f"alpha range must satisfy 0 <= lo <= hi <= 1, got {alpha}")
        self.source = os.fspath(source) if isinstance(source, os.PathLike) else source
        if is_folder(self.source):
            self.manifest = Manifest.load(self.source)
        else:
            self.manifest = resolve_urls(self.source)[0]
        self.alpha, self.flip, self.crop = alpha, flip, crop
        self.device = torch.device(device) if device is not None else None
        self.cache, self.num_workers, self.seed = cache, num_workers, seed
        self.cache_fraction, self.batch_size = cache_fraction, batch_size
        self._states: dict[torch.device, dict[str, Any]] = {}
        self._warned_resize = False

    def _state(self, device: torch.device) -> dict[str, Any]:
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        state = self._states.get(device)
        if state is None:
            # Each DDP rank draws its own backgrounds (the stream splits by rank by itself).
            rank = dist_rank_world()[0]
            seed = int(np.random.SeedSequence([self.seed, rank]).generate_state(1)[0])
            generator = torch.Generator(device=device).manual_seed(seed)
            mode = self.cache
            if mode == "auto":
                need = self.manifest.count * self.manifest.image_bytes
                mode = "device" if need <= self.cache_fraction * free_memory(device) else "stream"
            source = (
                _DeviceCache(self.source, self.manifest, device, generator)
                if mode == "device"
                else _StreamCache(
                    self.source,
                    device,
                    self.num_workers,
                    self.seed,
                    max(1, min(self.batch_size, self.manifest.count)),
                )
            )
            state = {"mode": mode, "source": source, "generator": generator}
            self._states[device] = state
        return state

    @property
    def modes(self) -> dict[str, str]:
        """Which cache each device uses (`"device"` or `"stream"`), once started."""
        return {str(d): s["mode"] for d, s in self._states.items()}

    def _backgrounds(
        self, n: int, device: torch.device, size: tuple[int, int], own: bool
    ) -> torch.Tensor:
        """n backgrounds at `size`: uint8 when nothing was resampled, else float 0..255."""
        state = self._state(device)
        gen = state["generator"]
        source = state["source"]
        imgs = source.take(n) if state["mode"] == "device" else source.take(n, own)
        pack_size = (self.manifest.size, self.manifest.size)
        if size != pack_size and not self._warned_resize:
            warnings.warn(
                f"mixshard: pack images are {pack_size[0]}x{pack_size[1]} but "
                f"{size[0]}x{size[1]} were asked for; resizing on the device each "
                f"call (pack with --size {size[0]} to avoid it)",
                stacklevel=3,
            )
            self._warned_resize = True
        mask = random_flip_mask(n, 0.5, device, gen) if self.flip else None
        if self.crop is not None:
            boxes = random_crop_boxes(n, pack_size[0], pack_size[1], self.crop, _RATIO, device, gen)
            return crop_resize(imgs, boxes, size, mask)
        if size != pack_size:
            imgs = resize(imgs, size)
        return flip(imgs, mask) if mask is not None else imgs

    def _alpha(self, n: int, device: torch.device) -> float | torch.Tensor:
        if isinstance(self.alpha, tuple):
            lo, hi = self.alpha
            gen = self._state(device)["generator"]
            return lo + (hi - lo) * torch.rand(n, device=device, generator=gen)
        if isinstance(self.alpha, torch.Tensor):
            return self.alpha.to(device)
        return self.alpha

    def sample(
        self,
        n: int,
        device: str | torch.device | None = None,
        *,
        size: int | tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """`n` backgrounds, uint8 `(n, 3, size, size)`, flipped/cropped as configured.

        Args:
            n: how many.
            device: where; default the Overlay's device, else the CPU.
            size: output side (default the pack's image size).
        """
        device = (
            torch.device(device) if device is not None else (self.device or torch.device("cpu"))
        )
        size = size or self.manifest.size
        size = (size, size) if isinstance(size, int) else tuple(size)
        imgs = self._backgrounds(n, device, size, own=True)
        if imgs.dtype != torch.uint8:
            imgs = imgs.add_(0.5).floor_().clamp_(0, 255).to(torch.uint8)
        return imgs

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Blend one background per sample into every frame of `obs` `(N, 3k, H, W)`.

        Float obs (0..255) give the obs dtype; uint8 obs give uint8.
        """
        if obs.dim() != 4 or obs.shape[1] % 3:
            raise ValueError(f"obs must be (N, 3k, H, W) with 3k channels, got {tuple(obs.shape)}")
        device = self.device or obs.device
        if device != obs.device:
            raise ValueError(f"Overlay device {device} but obs on {obs.device}")
        n, _, h, w = obs.shape
        imgs = self._backgrounds(n, device, (h, w), own=False)
        return blend(obs, imgs, self._alpha(n, device))

    def close(self) -> None:
        """Stop stream workers and free device caches."""
        for state in self._states.values():
            if state["mode"] == "stream":
                state["source"].close()
        self._states.clear()

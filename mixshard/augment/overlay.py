"""`Overlay`: the callable that replaces the reference `random_overlay`.

Backgrounds come from a pack kept whole in device memory (a device-side permutation and gather
per call), from a pool of it refilled from sequential block reads (packs larger than device
memory), or from `mixshard.loader` + `mixshard.prefetch`. Flip, crop and resize run batched on
the device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core.checks import check_int
from ..core.crops import RANDOM_CROP_SCALE
from ..core.device import canonical
from ..core.env import rank_world
from ..core.jobs import own, this_process
from ..core.libc import trim_heap
from ..reading.source import Source, resolve_source
from .caches.cache import BackgroundCache, DeviceCache, StreamCache
from .caches.imagepool import ImagePool
from .caches.mixcache import MixedCache, pool_shares
from .caches.packset import pack_list, resolve_packs
from .caches.plan import CachePlan, plan_cache, warn_resized
from .draws.keyed import mix64_int, seed_key
from .draws.mixing import Mix
from .inputs.checks import (
    check_alpha,
    check_alpha_shape,
    check_overlay_args,
    check_overlay_obs,
    warn_if_unit_range,
)
from .inputs.layouts import obs_geometry
from .kernels.ops import (
    blend_checked,
    crop_resample,
    crop_resize,
    flip,
    place,
    random_crop_boxes,
    random_flip_mask,
    resize,
)
from .kernels.pasting import composite_checked
from .state.overlaystate import (
    check_overlay_state,
    device_state,
    load_device_state,
    pool_calls,
    process_tag,
)

_RATIO = (3.0 / 4.0, 4.0 / 3.0)


@dataclass
class _DeviceState:
    """What an `Overlay` keeps per device: its cache and the generator of its draws."""

    plan: CachePlan  # "device", "pool" or "stream", and the pool's size
    cache: BackgroundCache
    generator: torch.Generator
    alpha: torch.Tensor | None = None  # the Overlay's alpha tensor, copied here once


class Overlay:
    """Random overlay of pack images onto frame-stacked observations.

    Args:
        source: a pack folder, its `index.json`, or a store URL (`s3://`, `gs://`, `http(s)://`).
        alpha: blend weight: a float, `(lo, hi)` for a uniform draw per sample, or a tensor.
        flip: flip each background horizontally with probability 1/2 (on the device).
        crop: `(lo, hi)`: a RandomResizedCrop per background with that area scale range
            (ratio 3/4-4/3), batched on the device; None keeps the packed image whole. On a
            pack stored larger than the observations (`--size 168` for 84 px obs) each crop
            is resampled straight to the obs size with an antialiased bicubic filter: a fresh
            crop at every draw, close to the reference's (docs/benchmarks.md, "How close
            to the reference"). On a pack at obs size a crop is upsampled (bilinear), so blurrier.
            `"auto"`: `(0.08, 1)` (the reference's) where the pack is larger than the asked
            size on both sides, else the packed image whole (what `mixshard.compat` uses).
        device: where backgrounds are made; default each call's `obs.device`.
        cache: `"device"` (whole pack in device memory), `"pool"` (a pool of `pool` images on
            the device, each drawn `uses` times, refilled from sequential block reads),
            `"stream"` (loader workers + prefetch) or `"auto"`: device when the pack fits in
            `cache_fraction` of the free device memory, else pool.
        num_workers: stream workers.
        seed: seed of every random draw (images, alpha, flips, crops). Each DDP rank and each
            DataLoader worker draws its own stream from it (in a worker, keyed by torch's seed
            of that worker as well: fresh draws each epoch, reproducible under
            `torch.manual_seed`).
        cache_fraction: share of free device memory `"auto"` and a default pool may use.
        batch_size: batch size of the stream (any number of backgrounds can be asked for).
        pool: images in the pool; default as many as fit in `cache_fraction`.
        uses: pool: draws of each image before its slot is refilled.
        cache_dir, cache_limit: a pack on an object store (`s3://...`): its block cache's
            folder and byte limit (see `ShardStream`).
        weights: mix several packs: `source` is then a list of packs (each a folder or a
            store URL) of one image size, and each sample takes its pack by
            these weights (keyed by its number in this process's samples: `mixcache.py`).
            The packs share `cache_fraction`. `set_weights` changes them at any call.
        schedule: `[(step, weights), ...]`: weights from that many calls on (`mixing.py`).

    `state_dict()` / `load_state_dict()` continue the draws exactly, in every cache mode
    (`overlaystate.py` says what a state can continue).

    Arguments are checked here (`inputs/checks.py`); obs are not checked for NaN or inf at each call
    (that would cost a host sync per call): they blend into NaN/inf.

    `index.json` is read here; images are loaded on the first call. `overlay(obs)` returns the
    blended observations; `overlay.sample(n, device)` returns `n` backgrounds (uint8 NCHW).
    """

    def __init__(
        self,
        source: str | os.PathLike | list[str] | Source,
        *,
        alpha: float | tuple[float, float] | torch.Tensor = 0.5,
        flip: bool = True,
        crop: tuple[float, float] | str | None = None,
        device: str | torch.device | None = None,
        cache: str = "auto",
        num_workers: int = 4,
        seed: int = 0,
        cache_fraction: float = 0.25,
        batch_size: int = 256,
        pool: int | None = None,
        uses: int = 4,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | None = None,
        weights: Any = None,
        schedule: Any = None,
    ) -> None:
        check_overlay_args(
            alpha=alpha,
            flip=flip,
            crop=crop,
            cache=cache,
            num_workers=num_workers,
            seed=seed,
            cache_fraction=cache_fraction,
            batch_size=batch_size,
            pool=pool,
            uses=uses,
        )
        where: dict[str, Any] = {"cache_dir": cache_dir, "cache_limit": cache_limit}
        self._resolve(source, where, weights, schedule)
        self._pending: dict[str, dict[str, Any]] = {}  # loaded states of devices not started
        self.alpha, self.flip, self.crop = alpha, flip, crop
        self.device = torch.device(device) if device is not None else None
        self.cache, self.num_workers, self.seed = cache, num_workers, seed
        self.cache_fraction, self.batch_size = cache_fraction, batch_size
        self.pool, self.uses = pool, uses
        self._states: dict[torch.device, _DeviceState] = {}
        self._warned_sizes: set[tuple[int, int]] = set()  # each mismatch is said once
        self._range_checked = False  # the 0..1 check runs on the first call only (a host sync)
        self._pid = this_process()  # the caches' threads run in this process only
        # the caches are closed by close(), when the Overlay is collected, or at exit
        self._closer = own(self, _close_caches, self._states)

    def _resolve(self, source: Any, where: dict[str, Any], weights: Any, schedule: Any) -> None:
        """The pack, or the packs of a mix and their `Mix` (index.json read once, here)."""
        mixed = weights is not None or schedule is not None
        self.sources = resolve_packs(pack_list(source), **where) if mixed else None
        self.source = self.sources[0] if self.sources else resolve_source(source, **where)
        self.manifest = self.source.manifest
        self.count = sum(s.count for s in self.sources or [self.source])
        self._mix = Mix(len(self.sources), weights, schedule) if self.sources else None

    def _seeds(self) -> tuple[int, int]:
        """This process's seed of the draws, and the seed of the streams it reads: keyed by
        the DDP rank (the streams split by rank by themselves, so they take the seed every rank
        shares) and in a DataLoader worker by torch's seed of it, new each epoch (docs/design.md,
        "Forked and DataLoader workers")."""
        from torch.utils.data import get_worker_info

        worker = get_worker_info()
        parts = [self.seed, rank_world()[0]] + ([worker.seed] if worker is not None else [])
        seed = int(np.random.SeedSequence(parts).generate_state(1)[0])
        return seed, (self.seed if worker is None else seed)

    def _plan(self, cache: str, device: torch.device) -> CachePlan:
        """Device, pool or stream on `device`, and the pool's size (`caches/plan.py`)."""
        image = self.manifest.image_bytes
        need = self.count * image
        return plan_cache(
            cache, device, self.cache_fraction, need=need, item_bytes=image, pool=self.pool
        )

    def _make_cache(
        self,
        plan: CachePlan,
        device: torch.device,
        gen: torch.Generator,
        seed: int,
        shared: int,
        saved: dict[str, Any] | None = None,
    ) -> BackgroundCache:
        if self.sources is not None and self._mix is not None:
            return self._make_mixed(plan, device, seed, shared, saved)
        if plan.mode == "device":
            return DeviceCache(self.source, device, gen)
        if plan.mode == "pool":
            calls = None if saved is None else pool_calls(saved)
            return ImagePool(self.source, device, plan.size, self.uses, seed, shared, calls)
        batch = max(1, min(self.batch_size, self.count // rank_world()[1]))
        return StreamCache(self.source, device, self.num_workers, shared, batch)

    def _make_mixed(
        self,
        plan: CachePlan,
        device: torch.device,
        seed: int,
        shared: int,
        saved: dict[str, Any] | None,
    ) -> MixedCache:
        """One cache per pack (`mixcache.py`), each drawing from seeds of its own."""
        assert self.sources is not None and self._mix is not None
        caches: list[BackgroundCache] = []
        mode, size = plan.mode, plan.size
        shape = (3, self.manifest.size, self.manifest.size)
        store = None
        if mode == "device":  # every pack in one tensor: a call is one gather
            store = torch.empty((self.count, *shape), dtype=torch.uint8, device=device)
        lo = 0
        for k, (source, share) in enumerate(zip(self.sources, pool_shares(size, self._mix))):
            own_seed = mix64_int(seed + k + 1)  # (pack k's words: apart from the seed's own)
            if store is not None:
                gen, images = torch.Generator(device=device), store[lo : lo + source.count]
                caches.append(DeviceCache(source, device, gen, own_seed, images))
                lo += source.count
            elif mode == "pool":  # (a loaded state's pool: its calls but the last: `resume`)
                calls = None if saved is None else pool_calls(saved, k, last=False)
                pool = ImagePool(source, device, share, self.uses, own_seed, shared + k, calls)
                caches.append(pool)
            else:
                batch = max(1, min(self.batch_size, source.count // rank_world()[1]))
                caches.append(StreamCache(source, device, self.num_workers, shared + k, batch))
        key = seed_key(seed)
        return MixedCache(caches, self._mix, key, device, shape, store, chunked=mode == "pool")

    def _state(self, device: torch.device) -> _DeviceState:
        device = canonical(device)
        if self._pid != this_process():  # forked: the parent's caches' threads are not here
            self._states.clear()
            self._pending.clear()  # (a loaded state is the parent's draws, not a worker's)
            self._pid = this_process()
            self._closer = own(self, _close_caches, self._states)
        state = self._states.get(device)
        if state is None:
            seed, shared = self._seeds()
            generator = torch.Generator(device=device).manual_seed(seed)
            saved = self._pending.pop(str(device), None)
            plan = self._plan(self.cache if saved is None else saved["mode"], device)
            cache = self._make_cache(plan, device, generator, seed, shared, saved)
            if saved is not None:
                try:
                    load_device_state(saved, cache, generator)
                except BaseException:
                    cache.close()
                    raise
            state = _DeviceState(plan, cache, generator)
            self._states[device] = state
        return state

    # -- the mix and the state -------------------------------------------------------------

    def set_weights(self, weights: Any) -> None:
        """Mix the packs by these weights from the next call on (until the schedule's next
        entry); they are part of the state.

        Raises:
            TypeError, ValueError: bad weights, or an Overlay made without `weights=`.
        """
        if self._mix is None:
            raise ValueError(
                "set_weights: this Overlay was made without weights= or schedule=; pass a "
                "list of packs and weights= to mix them"
            )
        self._mix.set_weights(weights)

    @property
    def weights(self) -> list[float] | None:
        """The weights in force (shares summing to 1), or None for a single pack."""
        return None if self._mix is None else self._mix.weights.tolist()

    def _mine(self) -> dict[str, Any]:
        packs = [[s.count, s.manifest.size] for s in self.sources or [self.source]]
        return {"packs": packs, "seed": self.seed, "process": process_tag()}

    def state_dict(self) -> dict[str, Any]:
        """Where the draws are, per device (loaded and not yet started ones too), and the
        weights in force: `load_state_dict` continues them exactly (`overlaystate.py`).

        Raises:
            ValueError: a device uses a pool (`cache="pool"`), which keeps no state.
        """
        devices = dict(self._pending)
        for device, state in self._states.items():
            devices[str(device)] = device_state(state.plan.mode, state.cache, state.generator)
        mix = None if self._mix is None else self._mix.state_dict()
        return {"format": "mixshard.Overlay", "version": 1, **self._mine(), "mix": mix,
                "devices": devices}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict()`: the next draws are those an uninterrupted run would
        have made. The caches started so far are closed; each device starts again at its next
        call, from the state (in the cache mode it was saved with).

        Raises:
            TypeError, ValueError: a state of other packs, seed, weights, cache or process
                (rank, world size, DataLoader worker), or a bad field; named.
        """
        mix, devices = check_overlay_state(state, self._mine(), self._mix, self.cache)
        self.close()
        self._mix, self._pending = mix, dict(devices)

    @property
    def modes(self) -> dict[str, str]:
        """Which cache each device uses (`"device"`, `"pool"` or `"stream"`), once started."""
        return {str(d): s.plan.mode for d, s in self._states.items()}

    @property
    def plans(self) -> dict[str, CachePlan]:
        """Each started device's `CachePlan` (`plan.explain()` says what it chose and why)."""
        return {str(d): s.plan for d, s in self._states.items()}

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per device: the cache's counters (draws; for a pool also images in and out, the
        realised uses per image and the waits for the disk)."""
        return {str(d): s.cache.stats() for d, s in self._states.items()}

    def _backgrounds(
        self, n: int, device: torch.device, size: tuple[int, int], own: bool
    ) -> torch.Tensor:
        """n backgrounds at `size`: uint8 when nothing was resampled, else float 0..255."""
        state = self._state(device)
        gen = state.generator
        pack_size = (self.manifest.size, self.manifest.size)
        larger = size != pack_size and all(s <= p for s, p in zip(size, pack_size))
        crop = self.crop if self.crop != "auto" else (RANDOM_CROP_SCALE if larger else None)
        if self.flip and crop is None and size == pack_size:
            return _flipped(state.cache, n, own, device, gen)
        imgs = state.cache.take(n, own)
        # A pack stored larger than the observations and cropped per draw is the intended
        # reference-like setup (e.g. --size 168 for 84 px obs); any other size mismatch
        # resamples every call for nothing, or upsamples, and is worth a warning.
        from_larger = crop is not None and larger
        if not from_larger:
            warn_resized(pack_size[0], size, self._warned_sizes, "images")
        mask = random_flip_mask(n, 0.5, device, gen) if self.flip else None
        if crop is not None and not isinstance(crop, str):
            boxes = random_crop_boxes(n, pack_size[0], pack_size[1], crop, _RATIO, device, gen)
            if from_larger:  # antialiased: most boxes shrink
                return crop_resample(imgs, boxes, size, mask)
            return crop_resize(imgs, boxes, size, mask)
        if size != pack_size:
            imgs = resize(imgs, size)
        return flip(imgs, mask) if mask is not None else imgs

    def _alpha(self, n: int, device: torch.device, alpha: Any = None) -> float | torch.Tensor:
        alpha = self.alpha if alpha is None else alpha
        if isinstance(alpha, tuple):
            lo, hi = alpha
            gen = self._state(device).generator
            return lo + (hi - lo) * torch.rand(n, device=device, generator=gen)
        if isinstance(alpha, torch.Tensor):
            if alpha is not self.alpha:  # a per-call tensor: where the caller keeps it
                return alpha.to(device)
            state = self._state(device)  # the Overlay's own: copied to the device once
            if state.alpha is None:
                state.alpha = alpha.to(device)
            return state.alpha
        return alpha

    def sample(
        self,
        n: int,
        device: str | torch.device | None = None,
        *,
        size: int | tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """`n` backgrounds, uint8 `(n, 3, size, size)`, flipped/cropped as configured.

        Args:
            n: how many (0 gives an empty tensor).
            device: where; default the Overlay's device, else the CPU.
            size: output side (default the pack's image size).
        """
        check_int("n", n, 0)
        device = (
            torch.device(device) if device is not None else (self.device or torch.device("cpu"))
        )
        side = size or self.manifest.size
        shape = (side, side) if isinstance(side, int) else (int(side[0]), int(side[1]))
        if n == 0:
            return torch.empty((0, 3, *shape), dtype=torch.uint8, device=device)
        imgs = self._backgrounds(n, device, shape, own=True)
        if imgs.dtype != torch.uint8:
            imgs = imgs.add_(0.5).floor_().clamp_(0, 255).to(torch.uint8)
        return imgs

    def __call__(
        self,
        obs: torch.Tensor,
        alpha: float | tuple[float, float] | torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Blend one background per sample into every frame of `obs` `(N, 3k, H, W)`.

        Float obs (0..255) give the obs dtype; uint8 obs give uint8. An empty batch gives an
        empty result. `alpha` (any form the constructor takes) replaces the Overlay's for this
        call; with `mask`, the backgrounds show only where it is below 1 (`mixshard.composite`).
        Every alpha and mask draws from the same cache. The values of an alpha or mask tensor
        are checked when it is on the CPU; on another device they are not (a host sync on
        every call): keep them in [0, 1] there.

        Raises:
            TypeError: obs not a torch.Tensor; an integer alpha tensor or mask (bool is fine).
            ValueError: obs not `(N, 3k, H, W)`, or channels-last; a CPU alpha or mask tensor
                with a value out of [0, 1] or NaN.
        """
        # each check once: obs here (with a mask, as `composite` checks them), the
        # per-call alpha's values here, its shape against N below; the kernels check nothing
        geom = None if mask is None else obs_geometry(obs, "NCHW", mask=mask)
        if geom is None:
            check_overlay_obs(obs)
        if alpha is not None:  # where the caller keeps it (a CPU one before it moves)
            check_alpha(alpha, everywhere=False)
        if not self._range_checked and obs.numel():
            self._range_checked = True
            warn_if_unit_range(obs)
        device = self.device or obs.device
        if device != obs.device:
            raise ValueError(f"Overlay device {device} but obs on {obs.device}")
        n, _, h, w = obs.shape
        if n == 0:
            return obs.clone()
        imgs = self._backgrounds(n, device, (h, w), own=False)
        weight = self._alpha(n, device, alpha)
        check_alpha_shape(weight, n)
        if geom is not None:
            return composite_checked(geom, obs, imgs, mask, weight, None)
        return blend_checked(obs, imgs, weight, None, obs.shape[1] // 3)

    def close(self) -> None:
        """Stop stream and pool readers and free device caches."""
        if self._pid == this_process():
            _close_caches(self._states)
        self._states.clear()


def _flipped(
    cache: BackgroundCache, n: int, own: bool, device: torch.device, gen: torch.Generator
) -> torch.Tensor:
    """`n` images, each flipped with probability 1/2, the flips made where the images are put
    (one pass) by a mix or a device cache, else after the take."""
    if isinstance(cache, MixedCache):
        # its packs draw from generators of their own: the flips' draws may come first
        return cache.take(n, own, random_flip_mask(n, 0.5, device, gen))
    if isinstance(cache, DeviceCache):
        rows = cache.take_index(n)  # (its permutations draw first, from `gen`)
        out = torch.empty((n, *cache.images.shape[1:]), dtype=torch.uint8, device=device)
        place(out, cache.images, rows=rows, flipped=random_flip_mask(n, 0.5, device, gen))
        return out
    imgs = cache.take(n, own)
    return flip(imgs, random_flip_mask(n, 0.5, device, gen))


def _close_caches(states: dict[torch.device, _DeviceState]) -> None:
    pooled = any(state.plan.mode == "pool" for state in states.values())
    _close_sources(states)
    if pooled:  # a pool's buffers, freed now, were allocated by its threads: give them back
        trim_heap()


def _close_sources(states: dict[torch.device, _DeviceState]) -> None:
    """(Apart, so that no name here keeps a cache alive past the trim.)"""
    for state in states.values():
        state.cache.close()
    states.clear()

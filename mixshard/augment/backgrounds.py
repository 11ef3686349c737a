"""`Backgrounds`: a background clip per environment, kept through its episode, on the device.

Each environment holds one clip (of a clip pack; one image of an image pack) and a frame
position from its reset until its next reset. The state is four int64 tensors of `num_envs`
(episode, frames played since the reset, clip, start frame) and a bool one (flipped), on the
device; the frames themselves are the whole pack on the device (`cache="device"`) or a pool of
whole clips (`cache="pool"`, `clippool.py`).

Every draw (clip, start frame, flip) is a pure function of `(seed, environment, episode)`
(`keyed.py`), so environment `i` plays the same backgrounds whatever `num_envs` is and whatever
the other environments do, and `state_dict` is the counters and the seed. A reset by a bool mask
is a handful of tensor ops over all environments (no Python loop, no host sync); `images()` is
one gather of `frames` frames per environment; `composite` is `mixshard.composite` over it.

Frame history: `images()` gives the `frames` most recent background frames, oldest first, so
each stacked observation frame gets its own background frame. Frames before the episode's
first one are the first frame, as a frame stack starts with copies of the first observation
(DMC-GB's `FrameStack`): right after a reset every frame shows the first background frame.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from ..core.device import canonical, move_index
from ..reading.buffers import read_pack_into
from ..reading.source import Source, resolve_source
from .caches.clippool import ClipPool
from .caches.packset import check_limit, clip_table, pack_list, resolve_packs
from .caches.plan import CachePlan, plan_cache, warn_resized
from .draws.keyed import seed_key
from .draws.mixing import Mix
from .draws.playback import draw, draw_clips, draw_mixed, mixed_clips, positions
from .inputs.arrays import same_kind
from .inputs.checks import (
    check_backgrounds_args,
    check_clip_order,
    check_composite_args,
    check_first_env,
    check_layout,
    check_state,
    env_mask,
    warn_if_unit_range,
)
from .inputs.layouts import obs_geometry
from .kernels import fused
from .kernels.ops import flip, resize
from .kernels.pasting import paste
from .masks.keys import Key
from .state.mixstate import check_mixed_state, mixed_state


class Backgrounds:
    """A background per environment for vectorised environments, on the device.

    Args:
        source: a clip pack (`mixshard pack SRC OUT --clips`) or an image pack (each image a
            still "clip" of one frame): its folder, a store URL or a resolved source.
        num_envs: environments.
        device: where the state, the frames and the results live (default the CPU).
        frames: stacked frames per observation: `images()` gives that many consecutive
            background frames per environment.
        playback: `"loop"` (from the first frame, wrapping to it), `"pingpong"` (from the
            first frame forwards, then backwards, as the Distracting Control Suite plays its
            clips; it shows the end frames once per turn, where the DCS repeats the last, and
            starts at the first frame, where the DCS starts anywhere, either way) or
            `"random"` (a random start frame at each reset, then loop). An image pack takes
            only `"loop"`.
        speed: frames a `step` advances (0: a still frame per episode).
        clip_order: which clip each reset plays (`playback.py`): `"random"` (independent
            draws), `"next"` (the pack's next clip, as DMC-GB plays its videos) or
            `"no-repeat"` (random, never the clip just played; at least 2 clips).
        seed: the seed of every draw.
        flip: flip each episode's background horizontally with probability 1/2.
        cache: `"device"` (every frame on the device), `"pool"` (a pool of whole clips, read
            ahead: `clippool.py`) or `"auto"`: device when the pack fits in `cache_fraction`
            of the free device memory (RAM on a CPU), else pool.
        cache_fraction: share of the free device memory `"auto"` and a default pool may use.
        pool: clips the pool holds (default as many as fit in `cache_fraction`).
        weights: mix several packs: `source` is then a list of packs (clip and image packs
            of one image size) and each episode draws its pack by these weights (keyed by
            `(seed, environment, episode)`, as every draw: `mixing.py`); `set_weights`
            changes them at any step.
        schedule: `[(step, weights), ...]`: weights from that many `step` calls on.
        limit: play only each pack's first `limit` clips (a difficulty as the Distracting
            Control Suite defines it: 4, 8 or None for all), one per pack or one int for a
            single pack; `set_limit` changes it. With `weights`, `schedule` or `limit` the
            clip order is `"random"` and the state holds each environment's clip.
        first_env: the number of the first environment in the draws: environments
            `first_env .. first_env + num_envs - 1` play what a `Backgrounds` of them all
            would give them (a simulator that runs one environment per process, as ManiSkill3
            on a CPU: `Backgrounds(pack, 1, first_env=rank)`).

    Raises:
        ValueError, TypeError: a bad argument.
        ManifestError: the source is not a finished pack.
        MixshardError: the pool cannot hold a clip per environment.
    """

    def __init__(
        self,
        source: str | os.PathLike | list[str] | Source,
        num_envs: int,
        *,
        device: str | torch.device | None = None,
        frames: int = 3,
        playback: str = "loop",
        speed: int = 1,
        seed: int = 0,
        flip: bool = False,
        cache: str = "auto",
        cache_fraction: float = 0.25,
        pool: int | None = None,
        clip_order: str = "random",
        weights: Any = None,
        schedule: Any = None,
        limit: Any = None,
        first_env: int = 0,
    ) -> None:
        num_envs, frames, speed, seed = check_backgrounds_args(
            num_envs, frames, speed, seed, pool, flip, playback, cache, cache_fraction, clip_order
        )
        self.first_env = check_first_env(first_env)  # (arguments before any file is read)
        mixed = weights is not None or schedule is not None
        self.sources = resolve_packs(pack_list(source)) if mixed else [resolve_source(source)]
        self.source = self.sources[0]
        m = self.manifest = self.source.manifest
        if m.clips is None and playback != "loop" and not mixed:
            raise ValueError(
                f"playback={playback!r} plays clips, but {m.origin} is an image pack (each image "
                f"a still background): use playback='loop', or a clip pack (`mixshard pack "
                f"VIDEOS OUT --clips`)"
            )
        self.num_envs, self.frames, self.playback = num_envs, frames, playback
        self.speed, self.seed, self.flip, self.clip_order = speed, seed, flip, clip_order
        self.device = canonical(device if device is not None else "cpu")
        self._table = table = clip_table(self.sources)
        first, length = table.first, table.length
        self.clips = len(first)
        check_clip_order(clip_order, self.clips, m.origin)
        self._first_np, self._length_np = first, length
        dev = self.device
        self._first = torch.from_numpy(first).to(dev)
        self._length = torch.from_numpy(length).to(dev)
        self._mix = self._make_mix(mixed, weights, schedule, limit)
        self._key = seed_key(seed)
        self._envs = torch.arange(num_envs, device=dev) + self.first_env
        self._lags = torch.arange(frames - 1, -1, -1, device=dev) * speed  # oldest first
        self.plan = self._plan(cache, cache_fraction, pool)
        self.mode = self.plan.mode
        self._make_cache(self.plan)
        self._warned_sizes: set[tuple[int, int]] = set()
        self._range_checked = False
        zeros = torch.zeros(num_envs, dtype=torch.int64, device=dev)
        self.episode, self.played = zeros.clone(), zeros.clone()
        self._episode_host = np.zeros(num_envs, np.int64)  # the pool's copy (no syncs)
        self._slot = np.full(num_envs, -1, np.int64)  # the pool slot each env plays
        self._closed = False
        self._set_all(self.episode)

    def _make_mix(self, mixed: bool, weights: Any, schedule: Any, limit: Any) -> Mix | None:
        """The mix of the packs (one pack with `limit` alone), or None: a single pack drawn as
        it always was."""
        if not mixed and limit is None:
            return None
        if self.clip_order != "random":
            raise ValueError(
                f"clip_order={self.clip_order!r} plays one pack's clips in turn; with weights=, "
                f"schedule= or limit= the order is 'random'"
            )
        mix = Mix(len(self.sources), weights if mixed else [1.0], schedule)
        table, dev = self._table, self.device
        self._limit: np.ndarray = check_limit(limit, table.clips)
        base = torch.from_numpy(table.base)
        self._tables = {  # (base, limit, length) on the device and on the host (the pool's)
            dev: (base.to(dev), torch.from_numpy(self._limit).to(dev), self._length),
            torch.device("cpu"): (base, torch.from_numpy(self._limit), self._length.cpu()),
        }
        return mix

    def _use_mix(self, mix: Mix | None, limit: np.ndarray | None) -> None:
        """These weights and schedule (`mix`) and clips per pack (`limit`) from now on."""
        self._mix = mix
        if limit is None:
            return
        self._limit = limit
        for where, (base, _, length) in list(self._tables.items()):
            self._tables[where] = (base, torch.from_numpy(limit).to(where), length)

    def set_weights(self, weights: Any) -> None:
        """Mix the packs by these weights from the next reset on (until the schedule's next
        entry); they are part of the state.

        Raises:
            TypeError, ValueError: bad weights (`mixing.check_mix_weights`), or a Backgrounds
                made without `weights=` (nothing to mix).
        """
        self._mixed("set_weights").set_weights(weights)

    def set_limit(self, limit: Any) -> None:
        """Play only the first `limit` clips of each pack from the next reset on (one int or
        None per pack: a difficulty); part of the state."""
        self._mixed("set_limit")
        self._use_mix(self._mix, check_limit(limit, self._table.clips))

    @property
    def weights(self) -> list[float] | None:
        """The weights in force (shares summing to 1), or None without a mix."""
        return None if self._mix is None else self._mix.weights.tolist()

    def _mixed(self, what: str) -> Mix:
        if self._mix is None:
            raise ValueError(
                f"{what}: this Backgrounds was made without weights=, schedule= or limit=; "
                f"pass one of them to the constructor to change the mix later"
            )
        return self._mix

    def _plan(self, cache: str, fraction: float, pool: int | None) -> CachePlan:
        """Device or pool, and the pool's size in clips (`caches/plan.py`)."""
        image = self.manifest.image_bytes
        return plan_cache(
            cache,
            self.device,
            fraction,
            need=self._table.frames * image,
            item_bytes=int(self._length_np.max()) * image,
            pool=pool,
            item="clips",
            least=min(self.num_envs, self.clips),
            most=self.clips,
        )

    def _make_cache(self, plan: CachePlan) -> None:
        """The frames on the device: the whole pack, or a pool of `plan.size` clips."""
        m, table = self.manifest, self._table
        if plan.mode == "device":
            shape = (table.frames, 3, m.size, m.size)
            self._frames = torch.empty(shape, dtype=torch.uint8, device=self.device)
            for source, lo in zip(self.sources, table.first[table.base]):
                read_pack_into(source, self._frames[lo : lo + source.manifest.count])
            self._clip_pool: ClipPool | None = None
            return
        where = (table.local, table.pack_of)
        self._clip_pool = ClipPool(self.sources, self.device, plan.size, where, self._length_np)
        self._frames = self._clip_pool.frames

    # -- the draws -------------------------------------------------------------------------

    def _draw(self, envs: torch.Tensor, episode: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(clip, start, flipped) of these environments' episodes (`playback.draw`)."""
        if self._mix is not None:
            table = self._tables[envs.device]
            return draw_mixed(self._key, envs, episode, self._mix, table, self.playback, self.flip)
        order = self.clip_order
        return draw(self._key, envs, episode, self._length, self.playback, self.flip, order)

    def _draw_host(self, envs: np.ndarray, episode: np.ndarray) -> np.ndarray:
        """The clips of these episodes, computed on the CPU (the same function as `_draw`)."""
        e, ep = torch.from_numpy(envs + self.first_env), torch.from_numpy(episode)
        if self._mix is not None:
            return self._draw(e, ep)[0].numpy()
        return draw_clips(self._key, e, ep, self.clips, self.clip_order).numpy()

    def _set_all(self, episode: torch.Tensor, clips: torch.Tensor | None = None) -> None:
        """Every environment's draws from these episode counters (construction, a loaded
        state; a mix's state gives the clips, drawn with the weights of their time). With a
        pool, the clips are brought in first: when a read fails, nothing changes."""
        if clips is None:
            clip, start, flipped = self._draw(self._envs, episode)
        else:
            assert self._mix is not None
            table = self._tables[self.device]
            clip, start, flipped = draw_mixed(
                self._key, self._envs, episode, self._mix, table, self.playback, self.flip, clips
            )
        pool = self._clip_pool
        if pool is not None:
            envs, host = np.arange(self.num_envs), episode.cpu().numpy().copy()
            old = self._slot[self._slot >= 0]
            slots = pool.acquire(clip.cpu().numpy(), release=old)
            pool.forget_wanted()
            self._next = self._draw_host(envs, host + 1)  # (a mix's may be drawn otherwise)
            pool.want(self._next, +1)
            self._episode_host, self._slot = host, slots
            self.base = move_index(pool.base(slots), self.device)
        else:
            self.base = self._first.index_select(0, clip)
        self.episode, self.clip, self.start, self.flipped = episode, clip, start, flipped

    # -- the public calls ------------------------------------------------------------------

    def reset(self, envs: Any = None, *, index: Any = None) -> None:
        """Start a new episode in these environments: a new clip, start frame and flip.

        Args:
            envs: None (all), or a mask of one entry per environment: a `done` as the
                simulator hands it out, a torch tensor, numpy array or list of bool, or of
                integers or floats that are 0 or 1. A bool tensor on the device makes no host
                sync; the values of an integer or float one are checked (one sync on an
                accelerator).
            index: environment numbers instead of a mask (integers; one listed twice resets
                once), checked to be in range (one sync on an accelerator).

        Raises:
            ValueError, TypeError: a mask of another length or with values other than 0/1,
                indices that are not integers or out of range; nothing is reset.
            MixshardError: a pool's read failed (a damaged block); nothing is reset.
        """
        self._check_open("reset")
        mask = env_mask(envs, index, self.num_envs, self.device, "reset")
        if self._clip_pool is not None:
            self._reset_clip_pool(self._clip_pool, mask)
            return
        if mask is None:
            self.episode += 1
            self.played.zero_()
        else:
            self.episode += mask
            self.played.masked_fill_(mask, 0)
        if self._mix is not None:  # the weights may have changed: the others keep theirs
            self._reset_mixed(mask)
            return
        # every environment's draws again: those of the others come out as they were (a pure
        # function of their unchanged episodes), so no select is needed
        self.clip, self.start, self.flipped = self._draw(self._envs, self.episode)
        # (index_select, not `[]`: advanced indexing ran on torch's thread pool, and waited
        # up to a scheduler tick, 4-8 ms, for a worker on a busy machine)
        self.base = self._first.index_select(0, self.clip)

    def _reset_mixed(self, mask: torch.Tensor | None) -> None:
        """The device cache's reset of a mix: the environments that reset draw with the
        weights in force, the others keep what they drew with the weights of their time."""
        assert self._mix is not None
        base, limit, _ = table = self._tables[self.device]
        envs, episode = self._envs, self.episode
        clip = mixed_clips(self._key, envs, episode, self._mix, base, limit)
        if mask is not None:  # (start and flip are functions of the clip and the episode)
            clip = torch.where(mask, clip, self.clip)
        self.clip, self.start, self.flipped = draw_mixed(
            self._key, envs, episode, self._mix, table, self.playback, self.flip, clip
        )
        self.base = self._first.index_select(0, clip)

    def _reset_clip_pool(self, pool: ClipPool, mask: torch.Tensor | None) -> None:
        """The pool's reset: which environments reset is read to the host (a sync on CUDA),
        where the pool's bookkeeping is; the draws are the device cache's. The new clips are
        brought in before anything changes, so a failed read changes nothing."""
        envs = np.arange(self.num_envs) if mask is None else np.flatnonzero(mask.cpu().numpy())
        if len(envs) == 0:
            return
        host = self._episode_host[envs] + 1
        clips = self._draw_host(envs, host)
        slots = pool.acquire(clips, release=self._slot[envs])
        pool.want(self._next[envs], -1)  # they were these environments' next clips
        self._next[envs] = self._draw_host(envs, host + 1)
        pool.want(self._next[envs], +1)
        self._episode_host[envs], self._slot[envs] = host, slots
        index = move_index(envs, self.device)
        episode = torch.from_numpy(host).to(self.device)
        self.episode.index_copy_(0, index, episode)
        clip, start, flipped = self._draw(index + self.first_env, episode)
        self.clip.index_copy_(0, index, clip)
        self.start.index_copy_(0, index, start)
        self.flipped.index_copy_(0, index, flipped)
        self.played.index_fill_(0, index, 0)
        self.base.index_copy_(0, index, move_index(pool.base(slots), self.device))

    def step(self, envs: Any = None, *, index: Any = None) -> None:
        """Advance these environments' clips by `speed` frames (`envs` a mask, or `index`
        numbers, as for `reset`)."""
        self._check_open("step")
        mask = env_mask(envs, index, self.num_envs, self.device, "step")
        if mask is None:
            self.played += self.speed
        else:
            self.played += mask * self.speed
        if self._mix is not None:  # a step of the schedule
            self._mix.advance()

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ValueError(
                f"{what}: this Backgrounds was closed (close() stopped its pool's reader); "
                f"make a new one (its state_dict() continues where this one stopped)"
            )

    def positions(self) -> torch.Tensor:
        """`(num_envs, frames)` int64: each environment's frame numbers within its clip, of
        the frames `images()` gives (oldest first)."""
        self._check_open("positions")
        length = self._length.index_select(0, self.clip)
        return positions(self.start, self.played, self._lags, length, self.playback)

    def images(self, layout: str = "NCHW") -> torch.Tensor:
        """Each environment's last `frames` background frames, oldest first (one gather):
        `(num_envs, 3 * frames, H, W)` uint8, or with `layout="NHWC"` `(num_envs, H, W, 3 *
        frames)`, a view of the same gather (channels-first in memory: `.contiguous()` makes
        it channels-last)."""
        self._check_open("images")
        layout = check_layout(layout)
        imgs = self._gather(self._index())
        return imgs if layout == "NCHW" else imgs.permute(0, 2, 3, 1)

    def _index(self) -> torch.Tensor:
        """`(num_envs, frames)`: where in the frame store `images()` gathers from."""
        return self.base.unsqueeze(1) + self.positions()

    def _gather(self, index: torch.Tensor) -> torch.Tensor:
        """The backgrounds at `index` `(num_envs, frames)` of the frame store, flipped where
        drawn: `(num_envs, 3 * frames, H, W)`."""
        s = self.manifest.size
        out = self._frames.index_select(0, index.reshape(-1))
        out = out.view(self.num_envs, 3 * self.frames, s, s)
        return flip(out, self.flipped) if self.flip else out

    @same_kind("obs", "mask", "out")
    def composite(
        self,
        obs: torch.Tensor,
        mask: torch.Tensor | Key | None = None,
        alpha: float | torch.Tensor = 1.0,
        *,
        layout: str = "NCHW",
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Each environment's backgrounds behind its observations, in one fused pass
        (`mixshard.composite` over `images()`, which takes the same masks with the same errors).

        Args:
            obs: `(num_envs, 3 * frames, H, W)` (`layout="NCHW"`) or `(num_envs, H, W, C *
                frames)` (`"NHWC"`, C = 3 RGB or 4 RGBA, whose alpha comes back unchanged);
                float (0..255) or uint8: the dtype and layout come back. Another size than the
                pack's is resized on the device (warned once).
            mask: None (blend everywhere: random overlay with a background per environment);
                a keep mask, bool or float: `(num_envs, H, W)`, channels-first `(num_envs,
                frames or 1, H, W)` (and `composite`'s other shapes), channels-last
                `(num_envs, H, W, frames or 1)`; true (1) keeps the observation, false (0)
                shows the background, fractions blend. Or a key (`mixshard.keys`): the mask
                made in the same pass, from the obs, its segmentation ids or its depth.
            alpha: the backgrounds' weight where they show: a float in [0, 1] or a
                `(num_envs,)` tensor.
            layout: `"NCHW"` or `"NHWC"`, of obs, out and the mask.
            out: where to write (shape, dtype and device of obs); `out=obs` works in place,
                which on a CPU saves reading the output's memory before writing it.

        Returns:
            `lerp(obs, background, alpha * (1 - mask))`, like obs (no permuted copy made).
        """
        self._check_open("composite")
        geom = obs_geometry(obs, layout, frames=self.frames)
        check_composite_args(geom, obs, self.num_envs, self.frames, self.device, alpha, out)
        if not self._range_checked and obs.numel():
            self._range_checked = True  # (one reduction and host sync, on a first batch)
            warn_if_unit_range(obs)
        s, size = self.manifest.size, (geom.h, geom.w)
        warn_resized(s, size, self._warned_sizes, "frames")
        index = self._index()
        flipped = self.flipped if self.flip else None
        backdrop = fused.store(self._frames, index, flipped) if size == (s, s) else None

        def backgrounds() -> torch.Tensor:  # the torch path's (N, k, 3, H, W)
            imgs = self._gather(index)
            if size != (s, s):
                imgs = resize(imgs.view(-1, 3, s, s), size)
            return imgs.view(geom.n, geom.frames, 3, *size)

        return paste(geom, obs, mask, alpha, out, backdrop, backgrounds)

    # -- state -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The counters (episode, frames played) per environment and the seed: with the same
        pack and arguments, `load_state_dict` continues exactly."""
        state = {"seed": self.seed, **self._settings()}
        state.update(episode=self.episode.clone(), played=self.played.clone())
        if self._mix is not None:  # the weights in force, and each environment's clip
            state.update(mixed_state(self.played, self.clip, self._mix, self._limit, self._table))
        return state

    def _settings(self) -> dict[str, Any]:
        """What a state must have been saved with (its seed aside)."""
        return {
            "num_envs": self.num_envs, "first_env": self.first_env, "clips": self.clips,
            "count": self._table.frames, "playback": self.playback, "speed": self.speed,
            "clip_order": self.clip_order,
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict` (the seed comes from it). Every field is checked
        before anything changes; with a pool, the state's clips are read in first.

        Raises:
            TypeError, ValueError: a state of another number of environments, pack, playback
                or clip order, or a field missing, of another type, shape or range (named).
            MixshardError: a pool's read failed; nothing changed.
        """
        self._check_open("load_state_dict")
        mine = self._settings()
        clips, mix, limit = None, self._mix, getattr(self, "_limit", None)
        if mix is not None:
            state, new_mix, new_limit, clips = check_mixed_state(
                state, self._table, mix, self.num_envs, self.device
            )
        seed, episode, played = check_state(state, mine, self.device)
        key = self._key
        self._key = seed_key(seed)  # the draws of _set_all are the state's
        if clips is not None:  # (the pool reads ahead by the weights in force)
            self._use_mix(new_mix, new_limit)
        try:
            self._set_all(episode, clips)
        except BaseException:
            self._key = key
            if clips is not None:
                self._use_mix(mix, limit)
            raise
        self.seed, self.played = seed, played

    def stats(self) -> dict[str, Any]:
        """Which cache (`"device"` or `"pool"`) and, for a pool, its counters."""
        if self._clip_pool is None:
            return {"mode": "device", "frames": self.manifest.count}
        return self._clip_pool.stats()

    def close(self) -> None:
        """Stop the pool's reader (a device cache holds no thread). After it, every call but
        `state_dict`, `stats` and `close` raises a `ValueError` that says so."""
        self._closed = True
        if self._clip_pool is not None:
            self._clip_pool.close()

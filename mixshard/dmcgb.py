"""A drop-in for DMControl-GB's video evaluation (`src/env/wrappers.py`, `VideoWrapper`).

DMC-GB decodes a whole mp4 with OpenCV at every reset and replaces the green pixels of each
frame in a per-pixel Python loop. This wrapper plays the same clips in the same order from a
clip pack (`make dmcgb-videos`, read from `$MIXSHARD_DATA/dmcgb-video_easy` or
`dmcgb-video_hard`): a reset reads the clip's frames, already decoded and resized, from the
pack; a step keys out the green screen (`masks.green_screen`, DMC-GB's exact rule) and pastes
the frame behind it (a select: `composite` at full weight). Its interface is DMC-GB's:
`VideoWrapper(env, mode, seed)` around a dmc2gym environment whose observations are `(3, H, W)`
uint8 frames.

    # src/env/wrappers.py, in make_env:   env = VideoWrapper(env, mode, seed)
    from mixshard.compat import VideoWrapper

As DMC-GB's: the first reset plays clip 1, each reset the next (`(index + 1) % n`); step `t` of
an episode shows frame `t % len(clip)`; other modes pass observations through.

The frames are DMC-GB's own within a level: `make dmcgb-videos` packs each whole frame
(`--crop full`) at the observations' size with `--resample bilinear-no-antialias`, which is
DMC-GB's `_interpolate_bg` (`F.interpolate`, bilinear, `align_corners=False`) rounded where
DMC-GB truncates its floats; PyAV's decode is OpenCV's (both FFmpeg). The pack is the one for
the observations' size (`dmcgb-video_hard-100` for 100 px observations, `make dmcgb-videos
SIZE=100`, else `dmcgb-video_hard`). A pack of another size is an error (resizing it again would
not give DMC-GB's frames), one resized with another filter a warning (docs/troubleshooting.md).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from .augment.masks.greenscreen import keep_table
from .core.constants import DEFAULT_SIZE, RESAMPLE_MODES
from .core.errors import MixshardError
from .core.presets import check_clip_pack
from .datasets import pack_folder
from .reading.buffers import read_images_into
from .reading.source import resolve_source

MODES = ("video_easy", "video_hard")
DMCGB_RESAMPLE = RESAMPLE_MODES[1]  # F.interpolate's bilinear: how DMC-GB resizes its frames


class VideoWrapper:
    """DMC-GB's `VideoWrapper(env, mode, seed)`, playing its videos from a clip pack.

    Attributes other than its own are the wrapped environment's (as a `gym.Wrapper`'s are).

    Raises:
        MixshardError: the pack for `mode` is missing (the message names `make dmcgb-videos`),
            is an image pack, lacks some of the benchmark's clips, or holds frames of another
            size than the observations (the message names both).
    """

    def __init__(self, env: Any, mode: str, seed: int) -> None:
        self.env = env
        self._mode, self._seed = mode, seed
        self._random_state = np.random.RandomState(seed)  # as DMC-GB's (unused there too)
        self._index = 0
        self._current_frame = 0
        self._frames: torch.Tensor | None = None
        self._table: np.ndarray | None = None  # the green-screen table, on the first step
        self._max_episode_steps = getattr(env, "_max_episode_steps", None)
        self._clips: list[tuple[int, int]] = []  # (first frame, frames) in DMC-GB's order
        if "video" in mode:
            self._open(mode, _obs_size(env))

    def _open(self, mode: str, size: tuple[int, int] | None) -> None:
        if mode not in MODES:
            raise ValueError(f'received unknown mode "{mode}" (video modes: {", ".join(MODES)})')
        name = f"dmcgb-{mode}"
        self._source = resolve_source(pack_folder(name, size or (DEFAULT_SIZE, DEFAULT_SIZE)))
        manifest = self._source.manifest
        clips = manifest.clips or ()
        order = check_clip_pack(manifest, str(self._source.folder), name)
        if size is not None:
            self._check_size(size)
        resample = manifest.options.get("resample")
        if resample != DMCGB_RESAMPLE:
            warnings.warn(
                f"{self._source.folder} was resized with {resample!r}, not DMC-GB's "
                f"F.interpolate ({DMCGB_RESAMPLE!r}): its frames differ from DMC-GB's by ~3 "
                "levels on average; pack it again with `make dmcgb-videos ... REPACK=1`",
                RuntimeWarning,
                stacklevel=3,
            )
        self._clips = [(clips[i].start, clips[i].count) for i in order]
        self._pack = self._source.open_pack()

    def _check_size(self, size: tuple[int, int]) -> None:
        """`MixshardError` when the pack's frames are not `size` (the observations')."""
        packed = self._source.manifest.size
        if (packed, packed) != tuple(size):
            raise MixshardError(
                f"{self._source.folder} holds {packed}x{packed} frames, the observations are "
                f"{size[0]}x{size[1]}: pack DMC-GB's videos at the observations' size "
                f"(`make dmcgb-videos ... SIZE={size[0]}`, into <dataset>-{size[0]}); DMC-GB "
                "resizes each decoded frame once, to the observation"
            )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def _num_videos(self) -> int:
        return len(self._clips)

    def _reset_video(self) -> None:
        self._index = (self._index + 1) % self._num_videos
        start, count = self._clips[self._index]
        m = self._pack.manifest
        out = np.empty((count, 3, m.size, m.size), np.uint8)
        # a damaged block raises (`ShardError`); a pack opened to skip plays its frames unread
        read_images_into(self._pack, np.arange(start, start + count), out, None)
        self._frames = torch.from_numpy(out)

    def reset(self) -> Any:
        if "video" in self._mode:
            self._reset_video()
        self._current_frame = 0
        return self._greenscreen(self.env.reset())

    def step(self, action: Any) -> tuple[Any, Any, Any, Any]:
        self._current_frame += 1
        obs, reward, done, info = self.env.step(action)
        return self._greenscreen(obs), reward, done, info

    def _background(self, size: tuple[int, int]) -> torch.Tensor:
        """This step's frame, `(1, 3, H, W)` uint8: the observations' size `size`, already
        resized as DMC-GB's `_interpolate_bg` resizes (the pack's `resample`)."""
        if self._frames is None:
            raise RuntimeError("VideoWrapper: call reset() before step()")
        if tuple(self._frames.shape[-2:]) != size:
            self._check_size(size)
        return self._frames[self._current_frame % len(self._frames)].unsqueeze(0)

    def _greenscreen(self, obs: np.ndarray) -> np.ndarray:
        """DMC-GB's green screen of one `(3, H, W)` uint8 frame, when a video mode is set."""
        if "video" not in self._mode:
            return obs
        _check_frame(obs)
        if self._table is None:
            self._table = keep_table("dmcgb", torch.device("cpu")).numpy()
        # `masks.green_screen`'s lookup (the same table of DMC-GB's rule over all colours) on
        # one numpy frame, and `composite`'s paste at full weight: no tensor op per step
        rgb = obs.astype(np.int32)
        keep = self._table[(rgb[0] << 16) | (rgb[1] << 8) | rgb[2]]  # (H, W): the agent
        bg = self._background((obs.shape[-2], obs.shape[-1]))[0].numpy()
        return np.where(keep, obs, bg)

    def apply_to(self, obs: np.ndarray) -> np.ndarray:
        """The green screen of this step on `obs`, channels first or last (as DMC-GB's)."""
        obs = obs.copy()
        last = obs.shape[-1] == 3
        if last:
            obs = np.ascontiguousarray(obs.transpose(2, 0, 1))
        obs = self._greenscreen(obs)
        return np.ascontiguousarray(obs.transpose(1, 2, 0)) if last else obs


def _obs_size(env: Any) -> tuple[int, int] | None:
    """`(H, W)` of a dmc2gym environment's `(3, H, W)` observations, None where it does not say."""
    shape = getattr(getattr(env, "observation_space", None), "shape", None)
    if isinstance(shape, tuple) and len(shape) == 3 and shape[0] == 3:
        return int(shape[1]), int(shape[2])
    return None


def _check_frame(obs: Any) -> None:
    """`obs` is a `(3, H, W)` uint8 numpy frame, as DMC-GB's `do_green_screen` asserts (it
    refuses every other dtype): an int32 frame above 255 would index past the colour table, a
    float one below 0 wrap to its end."""
    if not isinstance(obs, np.ndarray) or obs.dtype != np.uint8:
        kind = f"{obs.dtype}" if isinstance(obs, np.ndarray) else type(obs).__name__
        raise TypeError(
            f"obs must be a (3, H, W) uint8 numpy array, as DMC-GB's do_green_screen takes, got "
            f"{kind}: convert it with np.clip(obs, 0, 255).astype(np.uint8)"
        )
    if obs.ndim != 3 or obs.shape[0] != 3:
        raise ValueError(f"obs must be a (3, H, W) uint8 frame, got shape {obs.shape}")

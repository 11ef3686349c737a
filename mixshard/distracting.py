"""Drop-ins for the 3D video distractors: the Distracting Control Suite's
`distracting_control.background.DistractingBackgroundEnv` and DMC-VB's
`dmc_vision_benchmark.environments.distracting_suite.KubricBackgroundEnv`, from clip packs.

Each takes its benchmark's arguments and makes its benchmark's draws, in the same order, from
the same `np.random.RandomState(seed)`, so that the same clips play from the same frames in the
same direction and turn at the same ends; what changes is where the frames come from. The
benchmark reads every JPEG (DCS) or decodes the whole video (DMC-VB) of the drawn clip and
resizes each frame to the sky texture at every reset; here a clip pack holds the frames at the
texture's size, a reset draws and a step copies the one frame it shows out of the pack's
mappings into the texture and uploads it (`textures.clipreads`). A smaller pack
(`resize=True`) has each clip resized as it is read, ahead (the next episode's draws are the
random state's next ones). The behaviours kept because a paper's numbers come from them (the
sky texture, `video_alpha` over the sky as it was at the reset, the turn at the ends, DMC-VB's
slowdown, the frame order) are listed in docs/migrating.md, "The 3D video distractors".
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .core.errors import MixshardError
from .core.presets import DAVIS17_TRAIN, DAVIS17_VAL
from .textures.clipreads import ClipFrames
from .textures.target import (
    FrameWriter,
    TextureTarget,
    Upload,
    find_material,
    physics_upload,
    raw_model,
)

DMCVB_SLOWDOWN = 10  # DMC-VB's `_slowdown_video_factor`


class Draw(NamedTuple):
    """One episode's draws: the pack images it plays (its `images`, in the benchmark's order),
    the first one shown and the direction of play."""

    frames: np.ndarray
    start: int
    direction: int


def dcs_draw(
    rs: np.random.RandomState,
    clips: Sequence[np.ndarray],
    dynamic: bool,
    shuffle_buffer_size: int | None,
) -> Draw:
    """DCS's draws at a reset, in its order: with a shuffle buffer, a shuffle of every frame of
    every clip (clip after clip) kept to its first `shuffle_buffer_size`; else a clip, and when
    not `dynamic` one frame of it; then the first frame and the direction. `clips` holds each
    selected clip's pack images in frame order."""
    if shuffle_buffer_size:
        frames = np.concatenate(list(clips))
        rs.shuffle(frames)  # the same swaps as on DCS's list of file names
        frames = frames[:shuffle_buffer_size]
    else:
        frames = clips[rs.choice(len(clips))]  # `choice(paths)` draws the same index
        if not dynamic:
            frames = frames[[rs.choice(len(frames))]]
    return Draw(frames, int(rs.choice(len(frames))), int(rs.choice([-1, 1])))


def dmcvb_draw(rs: np.random.RandomState, clips: Sequence[np.ndarray], dynamic: bool) -> Draw:
    """DMC-VB's draws at a reset: a clip, one frame of it (`randint`) when not `dynamic`,
    then the first frame and the direction."""
    frames = clips[rs.choice(len(clips))]
    if not dynamic:
        frames = frames[[rs.randint(len(frames))]]
    return Draw(frames, int(rs.choice(len(frames))), int(rs.choice([-1, 1])))


def dcs_turn(index: int, direction: int, count: int) -> tuple[int, int]:
    """The next frame and direction, as DCS steps: one frame on, turning forwards on reaching
    the first frame and backwards on passing the last (so the last shows twice)."""
    index += direction
    if index <= 0:
        index, direction = 0, abs(direction)
    if index >= count:
        index, direction = count - 1, -abs(direction)
    return index, direction


def _pick(clips: ClipFrames, names: Sequence[str], num_videos: int | None) -> list[int]:
    """The pack's clips named `names`, the first `num_videos` of them (DCS's selection).

    Raises:
        MixshardError: fewer clips than `num_videos`, or a selected clip the pack lacks.
    """
    if num_videos is not None:
        if num_videos < 0:
            raise ValueError(f"num_videos must be at least 0, got {num_videos}")
        if num_videos > len(names):
            raise MixshardError(
                f"num_videos={num_videos} asks for more clips than the {len(names)} of "
                f"{clips.origin} selected"
            )
        names = names[:num_videos]
    index = {name: i for i, name in enumerate(clips.names)}
    missing = [n for n in names if n not in index]
    if missing:
        shown = ", ".join(repr(n) for n in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise MixshardError(
            f"{clips.origin} lacks {len(missing)} of the {len(names)} clips asked for: {shown}"
        )
    return [index[n] for n in names]


def _dcs_names(clips: ClipFrames, dataset_videos: Any) -> list[str]:
    if not dataset_videos:
        return sorted(clips.names)
    if dataset_videos in ("train", "training"):
        return list(DAVIS17_TRAIN)
    if dataset_videos in ("val", "validation"):
        return list(DAVIS17_VAL)
    return [str(v) for v in dataset_videos]


def _grid(model: Any, alpha: float | None) -> int | None:
    """The id of material `grid`, whose alpha `ground_plane_alpha` sets (None: untouched)."""
    if alpha is None:
        return None
    why = f"whose alpha ground_plane_alpha={alpha} sets"
    return find_material(model, "grid", why, "; pass ground_plane_alpha=None")


class _SkyVideoEnv:
    """What both drop-ins share: the sky, the reads ahead, reset and step (module docstring).
    A subclass selects the clips (`_clips`, `_selected`) and says how it draws (`_draw`) and
    steps (`_advance`)."""

    _floor = False  # how `resize=True` rounds: DCS's cv2 rounds, DMC-VB's tf.cast truncates

    def __init__(
        self,
        env: Any,
        clips: ClipFrames | None,
        selected: list[int],
        video_alpha: float,
        ground_plane_alpha: float | None,
        dynamic: bool,
        seed: int | None,
        resize: bool,
        upload: Upload | None,
    ) -> None:
        self._env, self._dynamic = env, bool(dynamic)
        self._ground_plane_alpha = ground_plane_alpha
        self._random_state = np.random.RandomState(seed=seed)
        physics = env.physics
        self._target = TextureTarget(physics.model)
        self._grid = _grid(physics.model, ground_plane_alpha)
        self._source, self._selected = clips, selected
        self._clip_frames: list[np.ndarray] = []
        self._resize = False
        if clips is not None:
            self._target.check_size(clips.size, clips.origin, resize)
            self._clip_frames = [clips.clip_frames(c) for c in selected]
            self._resize = clips.size != self._target.size
        self._writer = FrameWriter(
            self._target, physics_upload(physics) if upload is None else upload, video_alpha
        )
        self._images: np.ndarray | None = None  # the episode's pack images
        self._frames: np.ndarray | None = None  # and their frames, when read resized
        self._current_img_index, self._step_direction = 0, 1
        self._next = self._ask() if selected else None

    def _draw(self) -> Draw:
        raise NotImplementedError

    def _ask(self) -> tuple[int, Draw]:
        """The next episode's draws; its frames read ahead when they are to be resized."""
        draw = self._draw()
        source: Any = self._source  # (there are clips to draw from)
        if not self._resize:
            return 0, draw
        return source.ask(draw.frames, self._target.size, self._floor), draw

    def reset(self) -> Any:
        """Reset the environment, then the background."""
        time_step = self._env.reset()
        self._reset_background()
        return time_step

    def _reset_background(self) -> None:
        if self._grid is not None:
            raw_model(self._env.physics.model).mat_rgba[self._grid, 3] = self._ground_plane_alpha
        self._writer.set_background(self._target.pixels)  # the sky as it is now
        if self._next is not None and self._source is not None:
            ticket, draw = self._next
            self._images = draw.frames
            self._frames = self._source.take(ticket) if self._resize else None
            self._current_img_index, self._step_direction = draw.start, draw.direction
            self._next = self._ask()
        self._apply()

    def step(self, action: Any) -> Any:
        time_step = self._env.step(action)
        if time_step.first():
            self._reset_background()
            return time_step
        if self._dynamic and self._images is not None and self._advance():
            self._apply()
        return time_step

    def _advance(self) -> bool:
        """Move to the next frame; False when the texture stays as it is."""
        count = len(self._images) if self._images is not None else 1
        self._current_img_index, self._step_direction = dcs_turn(
            self._current_img_index, self._step_direction, count
        )
        return True

    def _apply(self) -> None:
        at, source = self._current_img_index, self._source
        if self._images is None or source is None:
            self._writer.show(None)
        elif self._frames is not None:
            self._writer.show(self._frames[at])
        else:
            self._writer.show(source.frame(int(self._images[at]), self._writer.buffer))

    def close(self) -> None:
        """Stop reading clips, then close the environment."""
        if self._source is not None:
            self._source.close()
        close = getattr(self._env, "close", None)
        if close is not None:
            close()

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._env, attr)


def _check_alpha(video_alpha: float) -> None:
    if not 0 <= video_alpha <= 1:
        raise ValueError(f"video_alpha must be in the range [0, 1], got {video_alpha}")


class DistractingBackgroundEnv(_SkyVideoEnv):
    """`distracting_control.background.DistractingBackgroundEnv` from a clip pack (see the
    module docstring): the same arguments, draws, turns and textures.

    Args:
        env: a dm_control environment (its `physics` renders the sky).
        dataset_path: a clip pack of DAVIS clips (`make davis`), at the sky's size.
        dataset_videos: None (every clip of the pack, sorted by name), "train"/"training" or
            "val"/"validation" (DCS's DAVIS 2017 lists), or a list of clip names.
        video_alpha, ground_plane_alpha, num_videos, dynamic, seed, shuffle_buffer_size: as DCS.
        resize: accept a pack whose frames are not the sky's size, resizing each clip as it is
            read (bilinear, half-pixel centres, no antialias: DCS's resize).
        upload: renews texture `i` in the renderer (default: the physics' own context).

    Raises:
        MixshardError: an image pack, a pack of another size (without `resize`), fewer clips
            than asked for, a model without a skybox or a material `grid`.
    """

    def __init__(
        self,
        env: Any,
        dataset_path: str | os.PathLike | None = None,
        dataset_videos: Any = None,
        video_alpha: float = 1.0,
        ground_plane_alpha: float | None = 1.0,
        num_videos: int | None = None,
        dynamic: bool = False,
        seed: int | None = None,
        shuffle_buffer_size: int | None = None,
        *,
        resize: bool = False,
        upload: Upload | None = None,
    ) -> None:
        _check_alpha(video_alpha)
        self._shuffle_buffer_size = shuffle_buffer_size
        clips, selected = None, []
        if dataset_path and num_videos != 0:
            clips = ClipFrames(dataset_path)
            selected = _pick(clips, _dcs_names(clips, dataset_videos), num_videos)
        super().__init__(
            env, clips, selected, video_alpha, ground_plane_alpha, dynamic, seed, resize, upload
        )

    def _draw(self) -> Draw:
        return dcs_draw(
            self._random_state, self._clip_frames, self._dynamic, self._shuffle_buffer_size
        )


class KubricBackgroundEnv(_SkyVideoEnv):
    """DMC-VB's `KubricBackgroundEnv` from a clip pack: DCS's sky, its own draws (`dmcvb_draw`)
    and one frame every `DMCVB_SLOWDOWN` steps, the steps counted across episodes as DMC-VB
    counts them.

    Args:
        env: a dm_control environment.
        dataset_path: a clip pack of the videos; or a folder holding one as `train/` and
            `validation/`, which `dataset_videos` "train"/"val" picks as DMC-VB does.
        dataset_videos, video_alpha, ground_plane_alpha, num_videos, dynamic, seed: as DMC-VB;
            `shuffle_buffer_size` is taken and unused, as there.
        resize, upload: as `DistractingBackgroundEnv`; `resize` truncates as DMC-VB's
            `tf.cast` does.
    """

    _floor = True

    def __init__(
        self,
        env: Any,
        dataset_path: str | os.PathLike | None = None,
        dataset_videos: str | None = None,
        video_alpha: float = 1.0,
        ground_plane_alpha: float | None = 1.0,
        num_videos: int | None = None,
        dynamic: bool = False,
        seed: int | None = None,
        shuffle_buffer_size: int | None = None,
        *,
        resize: bool = False,
        upload: Upload | None = None,
    ) -> None:
        _check_alpha(video_alpha)
        self._step_counter = 0
        clips, selected = None, []
        if dataset_path and num_videos != 0:
            clips = ClipFrames(_split(Path(dataset_path), dataset_videos))
            selected = _pick(clips, sorted(clips.names), num_videos)
        super().__init__(
            env, clips, selected, video_alpha, ground_plane_alpha, dynamic, seed, resize, upload
        )

    def _draw(self) -> Draw:
        return dmcvb_draw(self._random_state, self._clip_frames, self._dynamic)

    def _advance(self) -> bool:
        self._step_counter += 1
        return self._step_counter % DMCVB_SLOWDOWN == 0 and super()._advance()


def _split(path: Path, dataset_videos: str | None) -> Path:
    """DMC-VB's split folder (`train`, `validation`) when `path` holds it, else `path`."""
    sub = {"train": "train", "training": "train", "val": "validation", "validation": "validation"}
    split = sub.get(dataset_videos or "")
    if split is not None and (path / split).is_dir():
        return path / split
    return path

"""`TexturePlayer`: clips from a clip pack played in a MuJoCo texture of one environment, each
episode's clip and first frame drawn as `Backgrounds` draws them, keyed by `(seed, environment,
episode)` (`augment/playback.py`), for scenes whose benchmark does not dictate its own draws.
A step copies its frame out of the pack's mappings; a pack of another size has its next
episode's clip read ahead, resized (docs/design.md, "Backgrounds in MuJoCo textures").
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from ..augment.draws.keyed import seed_key
from ..augment.draws.playback import draw, positions
from ..augment.inputs.checks import PLAYBACKS
from ..reading.source import Source
from .clipreads import ClipFrames
from .target import FrameWriter, TextureTarget, Upload, physics_upload


class TexturePlayer:
    """Plays clips of `source` in texture `texture` of one environment's model.

    Args:
        source: a clip pack at the texture's size (`mixshard pack SRC OUT --clips --size N`).
        physics: a dm_control `Physics` (its model, uploaded in its own context), or a
            `mujoco.MjModel` with `upload`.
        upload: renews texture `i` in the renderer (needed with a bare `MjModel`).
        texture: the texture's name (None: the model's skybox).
        env: this environment's number, a key of its draws with `seed` and the episode.
        playback: `"loop"`, `"pingpong"` (reflecting at both ends) or `"random"` (a drawn
            first frame, then looping), as `Backgrounds` plays.
        video_alpha: the frame's weight over the texture as the model first had it.
        resize: accept a pack of another size, each clip resized as it is read.

    Raises:
        MixshardError: an image pack, no such texture, no skybox, a pack of another size.
    """

    def __init__(
        self,
        source: str | os.PathLike | Source | ClipFrames,
        physics: Any,
        *,
        upload: Upload | None = None,
        texture: str | None = None,
        env: int = 0,
        seed: int = 0,
        playback: str = "pingpong",
        video_alpha: float = 1.0,
        resize: bool = False,
    ) -> None:
        if playback not in PLAYBACKS:
            raise ValueError(f"playback must be one of {', '.join(PLAYBACKS)}; got {playback!r}")
        if not 0 <= video_alpha <= 1:
            raise ValueError(f"video_alpha must be in the range [0, 1], got {video_alpha}")
        self.clips = source if isinstance(source, ClipFrames) else ClipFrames(source)
        self._own_clips = not isinstance(source, ClipFrames)
        model = getattr(physics, "model", physics)
        self.target = TextureTarget(model, texture)
        self.target.check_size(self.clips.size, self.clips.origin, resize)
        if upload is None:
            if not hasattr(physics, "contexts"):
                raise ValueError(
                    "pass upload= with a bare mujoco.MjModel (or a dm_control Physics)"
                )
            upload = physics_upload(physics)
        self.writer = FrameWriter(self.target, upload, video_alpha)
        self.env, self.playback, self._key = int(env), playback, seed_key(seed)
        self._length = torch.from_numpy(self.clips.length)
        self.episode, self.played = -1, 0
        self.clip, self.start = -1, 0
        self._resize = self.clips.size != self.target.size
        self._frames: np.ndarray | None = None  # the clip's frames, when read resized
        self._next = self._ask(0)

    def _ask(self, episode: int) -> tuple[int, int, int]:
        """Episode `episode`'s clip and first frame; its frames read ahead when they are to be
        resized."""
        envs, ep = torch.tensor([self.env]), torch.tensor([episode])
        clip, start, _ = draw(self._key, envs, ep, self._length, self.playback, False)
        c = int(clip[0])
        if not self._resize:
            return 0, c, int(start[0])
        return self.clips.ask(self.clips.clip_frames(c), self.target.size), c, int(start[0])

    def reset(self) -> None:
        """Start the next episode: its clip's first frame into the texture."""
        ticket, self.clip, self.start = self._next
        self._frames = self.clips.take(ticket) if self._resize else None
        self.episode, self.played = self.episode + 1, 0
        self._next = self._ask(self.episode + 1)
        self._show()

    def step(self) -> None:
        """The next frame into the texture."""
        if self.episode < 0:
            raise ValueError("call reset() before step()")
        self.played += 1
        self._show()

    def frame(self) -> int:
        """The frame of the clip now shown."""
        at = positions(
            torch.tensor([self.start]),
            torch.tensor([self.played]),
            torch.zeros(1, dtype=torch.int64),
            self._length[self.clip : self.clip + 1],
            self.playback,
        )
        return int(at[0, 0])

    def _show(self) -> None:
        at = self.frame()
        if self._frames is not None:
            self.writer.show(self._frames[at])
        else:
            image = int(self.clips.first[self.clip]) + at
            self.writer.show(self.clips.frame(image, self.writer.buffer))

    def close(self) -> None:
        """Stop reading clips (the pack stays open when it was handed in as `ClipFrames`)."""
        if self._own_clips:
            self.clips.close()

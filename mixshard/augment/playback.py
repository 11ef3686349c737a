"""How `Backgrounds` plays clips: each episode's draws and each frame's position, as pure
tensor functions of the environments' counters (no state of their own, any device)."""

from __future__ import annotations

import torch

from .keyed import below, keyed

PLAYBACKS = ("loop", "pingpong", "random")
_CLIP, _START, _FLIP = 0, 1, 2  # the streams of the draws


def draw_clips(key: int, envs: torch.Tensor, episode: torch.Tensor, clips: int) -> torch.Tensor:
    """The clip of each `(env, episode)`: a pure function of the key (the seed), the
    environment and the episode."""
    return below(keyed(key, envs, episode, _CLIP), clips)


def draw(
    key: int,
    envs: torch.Tensor,
    episode: torch.Tensor,
    length: torch.Tensor,
    playback: str,
    flip: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(clip, start frame, flipped)` of each `(env, episode)`; `length` is every clip's frame
    count. The start is drawn for `"random"` playback (else 0), the flip when `flip`."""
    clip = draw_clips(key, envs, episode, len(length))
    if playback == "random":
        start = below(keyed(key, envs, episode, _START), length[clip])
    else:
        start = torch.zeros_like(clip)
    if flip:
        flipped = (keyed(key, envs, episode, _FLIP) & 1).bool()
    else:
        flipped = torch.zeros_like(clip, dtype=torch.bool)
    return clip, start, flipped


def positions(
    start: torch.Tensor,
    played: torch.Tensor,
    lags: torch.Tensor,
    length: torch.Tensor,
    playback: str,
) -> torch.Tensor:
    """`(envs, frames)`: the frame numbers within each clip of the frames `lags` (frames
    before the current one, oldest first) back. Frames before the episode's first are the
    first; `"loop"` and `"random"` wrap, `"pingpong"` reflects at both ends (period
    `2 (n - 1)`: the end frames show once per turn)."""
    at = start.unsqueeze(1) + (played.unsqueeze(1) - lags).clamp_(min=0)
    length = length.unsqueeze(1)
    if playback != "pingpong":
        return at % length
    period = (2 * (length - 1)).clamp_(min=1)
    phase = at % period
    # the reflection is the nearer of phase and period - phase (the same as a select on phase <
    # length, and a fraction of torch.where's time on the few values of one environment)
    return torch.minimum(phase, period - phase)

"""How `Backgrounds` plays clips: each episode's draws and each frame's position, as pure
tensor functions of the environments' counters (no state of their own, any device).

Which clip an episode plays is a pure function of `(seed, environment, episode)` in every
`clip_order` ("random", "next", "no-repeat"), so environment `i`'s clips do not depend on
`num_envs` or on the others, a pool can read an environment's next clip ahead, and a state is
its counters. docs/design.md, "Backgrounds per environment" (*Clip order*, *Positions are
computed, not stored*), states each order's rule and each playback's.
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels.compiled import lerp as _lerp
from ..kernels.compiled import region
from .keyed import below, keyed
from .mixing import Mix

_CLIP, _START, _FLIP, _FIRST, _OTHER, _PACK = 0, 1, 2, 3, 4, 5  # the streams of the draws
_ORDER_CODES = {"random": 0, "next": 1, "no-repeat": 2}  # `_lerp.draws`' codes of the orders


def draw_clips(
    key: int, envs: torch.Tensor, episode: torch.Tensor, clips: int, order: str = "random"
) -> torch.Tensor:
    """The clip of each `(env, episode)` in the order `order` (`CLIP_ORDERS`): a pure function
    of the key (the seed), the environment and the episode."""
    if _compiled(envs, episode):
        return _draws(key, envs, episode, clips, order)[0]
    if order == "random":
        return _free(key, envs, episode, clips)
    if order == "next" or clips <= 2:  # with 2 clips, no repeat is taking turns
        zero = torch.zeros_like(episode)
        first = below(keyed(key, zero, zero, _FIRST), clips)  # s: the seed's alone
        return (first + envs + episode) % clips
    # an odd episode: a draw among the clips but its two (even) neighbours', `lo` and `hi`,
    # the draw's `r` skipping them in turn (uniform over the `clips - 1` or `- 2` left); the
    # free draws of the episode and both neighbours in one call (a reset's cost is its ops)
    around = torch.stack((episode - 1, episode, episode + 1))
    before, own, after = _free(key, envs.expand_as(around), around, clips)
    lo, hi = torch.minimum(before, after), torch.maximum(before, after)
    two = lo != hi
    r = below(keyed(key, envs, episode, _OTHER), clips - 1 - two.long())
    r += r >= lo
    r += (r >= hi) & two
    return torch.where(episode % 2 == 0, own, r)


def _free(key: int, envs: torch.Tensor, episode: torch.Tensor, clips: int) -> torch.Tensor:
    """Independent draws: the clip of `"random"`, and of `"no-repeat"`'s even episodes."""
    return below(keyed(key, envs, episode, _CLIP), clips)


def draw(
    key: int,
    envs: torch.Tensor,
    episode: torch.Tensor,
    length: torch.Tensor,
    playback: str,
    flip: bool,
    order: str = "random",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(clip, start frame, flipped)` of each `(env, episode)`; `length` is every clip's frame
    count. The clip is drawn in `order`, the start for `"random"` playback (else 0), the flip
    when `flip`."""
    if _compiled(envs, episode, length):
        return _draws(key, envs, episode, len(length), order, (length, playback == "random", flip))
    clip = draw_clips(key, envs, episode, len(length), order)
    return clip, *_start_and_flip(key, envs, episode, clip, length, playback, flip)


def _compiled(*tensors: torch.Tensor) -> bool:
    """Whether the draws run in the compiled loop: on a CPU, where it is built."""
    return _lerp is not None and all(t.device.type == "cpu" for t in tensors)


def _draws(
    key: int,
    envs: torch.Tensor,
    episode: torch.Tensor,
    clips: int,
    order: str,
    then: tuple[torch.Tensor, bool, bool] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`draw_clips`, and with `then` (`length`, random start, flip) `draw`, in one compiled
    loop (`_lerp.draws`: the tensor ops' bits; a reset was some twenty ops of a few values)."""
    assert _lerp is not None
    if envs.shape != episode.shape:
        envs, episode = torch.broadcast_tensors(envs, episode)
    e, p = envs.long().contiguous(), episode.long().contiguous()
    clip = torch.empty(e.shape, dtype=torch.int64)
    start, flipped = torch.zeros_like(clip), torch.zeros(e.shape, dtype=torch.bool)
    length, random_start, flip = then if then is not None else (None, False, False)
    length = None if length is None else length.long().contiguous()
    out = (region(start), region(flipped), region(length)) if length is not None else (None,) * 3
    code = _ORDER_CODES[order]
    _lerp.draws(region(clip), region(e), region(p), *out, key, clips, code, random_start, flip)
    return clip, start, flipped


def _start_and_flip(
    key: int,
    envs: torch.Tensor,
    episode: torch.Tensor,
    clip: torch.Tensor,
    length: torch.Tensor,
    playback: str,
    flip: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The start frame of each episode's `clip` (`length`: every clip's frames) for
    `"random"` playback (else 0), and its flip when `flip` (else none)."""
    if playback == "random":
        start = below(keyed(key, envs, episode, _START), length.index_select(0, clip))
    else:
        start = torch.zeros_like(clip)
    if flip:
        flipped = (keyed(key, envs, episode, _FLIP) & 1).bool()
    else:
        flipped = torch.zeros_like(clip, dtype=torch.bool)
    return start, flipped


def mixed_clips(
    key: int,
    envs: torch.Tensor,
    episode: torch.Tensor,
    mix: Mix,
    base: torch.Tensor,
    limit: torch.Tensor,
) -> torch.Tensor:
    """The clip of each `(env, episode)` over several packs, from one random word: its top 32
    bits pick the pack by the weights in force (`Mix.pick`), its low 32 bits a clip among that
    pack's first `limit` (uniform, as `below`), numbered in the packs' one table (`base`:
    each pack's first clip)."""
    if _compiled(envs, episode, base, limit):  # one loop
        assert _lerp is not None
        e, p = (t.long().contiguous() for t in torch.broadcast_tensors(envs, episode))
        out = torch.empty(e.shape, dtype=torch.int64)
        words = np.ascontiguousarray(mix.words)
        b, lim = base.long().contiguous(), limit.long().contiguous()
        _lerp.mixed(region(out), region(e), region(p), words, region(b), region(lim), key, _PACK)
        return out
    bits = keyed(key, envs, episode, _PACK)
    pack = mix.pick(bits)
    low = bits & 0xFFFFFFFF
    return base.index_select(0, pack) + ((low * limit.index_select(0, pack)) >> 32)


def draw_mixed(
    key: int,
    envs: torch.Tensor,
    episode: torch.Tensor,
    mix: Mix,
    table: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    playback: str,
    flip: bool,
    clip: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`draw` over several packs: the clip of `mixed_clips` (or `clip`: a loaded state's, or
    one kept through a reset), and its start and flip as `draw` makes them; `table` is
    `(base, limit, length)`: each pack's first clip and clips played, each clip's length."""
    base, limit, length = table
    if clip is None:
        clip = mixed_clips(key, envs, episode, mix, base, limit)
    return clip, *_start_and_flip(key, envs, episode, clip, length, playback, flip)


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

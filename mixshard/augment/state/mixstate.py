"""The state of a mix in `Backgrounds` (weights=, schedule= or limit=): what it adds to the
single pack's counters, and its check.

A mix's draws depend on the weights in force at each reset, so an environment's clip is no
longer a function of its episode alone: the state holds it (int32), and `played` goes as int32
too, so that a state stays at 16 bytes an environment (episode int64, played and clip int32).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from ..caches.packset import ClipTable, check_limit
from ..draws.mixing import Mix
from ..inputs.checks import state_tensor

MIXED_KEYS = ("packs", "mix", "limit", "clip")
_INT32 = 2**31 - 1


def packs_of(table: ClipTable) -> list[list[int]]:
    """`[frames, clips]` of each pack: what a state must have been saved with."""
    frames = np.diff(np.append(table.first[table.base], table.frames))
    return [[int(f), int(c)] for f, c in zip(frames, table.clips)]


def mixed_state(
    played: torch.Tensor, clip: torch.Tensor, mix: Mix, limit: np.ndarray, table: ClipTable
) -> dict[str, Any]:
    """The fields a mix adds to (or changes in) `Backgrounds.state_dict()`.

    Raises:
        ValueError: an environment has played 2**31 frames or more since its reset (the
            state keeps them as int32).
    """
    top = int(played.max()) if len(played) else 0
    if top > _INT32:
        raise ValueError(
            f"an environment played {top} frames since its reset, the state of a mix keeps "
            f"up to 2**31 - 1: reset it before saving"
        )
    return {
        "played": played.to(torch.int32),
        "clip": clip.to(torch.int32),
        "packs": packs_of(table),
        "mix": mix.state_dict(),
        "limit": limit.tolist(),
    }


def check_mixed_state(
    state: Any, table: ClipTable, mix: Mix, num_envs: int, device: torch.device
) -> tuple[dict[str, Any], Mix, np.ndarray, torch.Tensor]:
    """A mix's state checked: the single pack's fields (for `checks.check_state`, played as
    int64), the mix and limit it continues with (a copy of `mix`) and its clips on `device`.

    Raises:
        TypeError, ValueError: a state without a mix or of other packs, weights or schedule,
            or a bad field; named.
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    missing = [key for key in MIXED_KEYS if key not in state]
    if missing:
        raise ValueError(
            f"state was saved by a Backgrounds without weights=, schedule= or limit= (it "
            f"lacks {', '.join(missing)}): make it with the same arguments"
        )
    if state.get("num_envs") != num_envs:
        raise ValueError(
            f"state_dict was saved with num_envs={state.get('num_envs')!r}, this Backgrounds "
            f"has num_envs={num_envs}: make it with the same pack and arguments"
        )
    mine = packs_of(table)
    if state["packs"] != mine:
        raise ValueError(
            f"state was saved with packs {state['packs']!r} ([frames, clips] each), this "
            f"Backgrounds has {mine!r}: make it with the same packs"
        )
    loaded = copy.deepcopy(mix)
    loaded.load_state_dict(state["mix"])
    limit = check_limit(list(state["limit"]), table.clips)
    clip = state_tensor(state, "clip", num_envs, torch.int32).cpu()
    if len(clip) and (int(clip.min()) < 0 or int(clip.max()) >= len(table.first)):
        raise ValueError(f"state['clip'] must be clip numbers in [0, {len(table.first)})")
    rest = {k: v for k, v in state.items() if k not in MIXED_KEYS}
    rest["played"] = state_tensor(state, "played", num_envs, torch.int32).to("cpu", torch.int64)
    return rest, loaded, limit, clip.to(device, torch.int64)

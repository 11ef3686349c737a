"""The arguments `Backgrounds` checks: its constructor's, a state to load, and at each call
which environments (`None`, a mask of 0/1 or bool, or `index=` numbers, as a bool mask on the
device) and the composite's observations (its mask: `layouts.keep_view`, as `composite`'s)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core.checks import check_int, is_number
from .args import check_cache, check_cache_fraction, check_flag
from .inputs import check_weights
from .layouts import Geometry, obs_geometry
from .playback import CLIP_ORDERS, PLAYBACKS

CACHES = ("auto", "device", "pool")  # `Backgrounds(cache=)`
MAX_SEED = 2**64 - 1  # a seed is one 64-bit word of the draws' key: larger ones would wrap
MAX_SPEED = 2**31 - 1  # frames a step: `played` (int64) then lasts 2**32 steps at the most
MAX_FIRST_ENV = 2**62  # environment numbers are int64 words of the draws' key
STATE_KEYS = (
    "seed", "num_envs", "first_env", "clips", "count", "playback", "speed", "clip_order",
    "episode", "played",
)  # fmt: skip


def check_backgrounds_args(
    num_envs: Any,
    frames: Any,
    speed: Any,
    seed: Any,
    pool: Any,
    flip: Any,
    playback: Any,
    cache: Any,
    cache_fraction: Any,
    clip_order: Any,
) -> tuple[int, int, int, int]:
    """The `Backgrounds` constructor's arguments checked; `num_envs`, `frames`, `speed` and
    `seed` as Python ints (numpy integers too: the draws' arithmetic is exact on ints only)."""
    check_int("num_envs", num_envs, 1)
    check_int("frames", frames, 1)
    check_int("speed", speed, 0)
    if speed > MAX_SPEED:
        raise ValueError(f"speed must be below 2**31 frames a step, got {speed}")
    check_seed("seed", seed)
    if pool is not None:
        check_int("pool", pool, 1)
    check_flag("flip", flip)
    if playback not in PLAYBACKS:
        raise ValueError(f"playback must be one of {', '.join(PLAYBACKS)}, got {playback!r}")
    check_cache(cache, CACHES)
    check_cache_fraction(cache_fraction)
    if clip_order not in CLIP_ORDERS:
        raise ValueError(f"clip_order must be one of {', '.join(CLIP_ORDERS)}, got {clip_order!r}")
    return int(num_envs), int(frames), int(speed), int(seed)


def check_clip_order(order: str, clips: int, origin: str) -> None:
    """`clip_order` against the pack's number of clips: one clip cannot avoid repeating."""
    if order == "no-repeat" and clips < 2:
        raise ValueError(
            f"clip_order='no-repeat' needs at least 2 clips (or images) to take turns, but "
            f"{origin} holds {clips}: use clip_order='random'"
        )


def check_seed(name: str, seed: Any) -> None:
    """A seed of the draws: an integer in [0, 2**64)."""
    check_int(name, seed, 0)
    if seed > MAX_SEED:
        raise ValueError(
            f"{name} must be below 2**64 (the draws' key is one 64-bit word, a larger seed "
            f"would repeat a smaller one's draws), got {seed}"
        )


def check_first_env(first_env: Any) -> int:
    """`Backgrounds(first_env=)`: the number of its first environment in the draws (a process
    of a simulator that runs one environment each: its rank), an int from 0."""
    check_int("first_env", first_env, 0)
    if first_env >= MAX_FIRST_ENV:
        raise ValueError(f"first_env must be below 2**62, got {first_env}")
    return int(first_env)


def check_state(
    state: Any, mine: dict[str, Any], device: torch.device
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """A `Backgrounds.state_dict()` checked field by field against `mine` (the settings it
    must have been saved with): its seed, and its episode and played counters on `device`.

    Raises:
        TypeError, ValueError: the first field missing, unknown, or of another type, dtype,
            shape or range, named.
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    if "clip_order" not in state:  # saved before the orders were: its clips were "random"
        state = {**state, "clip_order": "random"}
    if "first_env" not in state:  # saved before environment offsets: numbered from 0
        state = {**state, "first_env": 0}
    missing = [key for key in STATE_KEYS if key not in state]
    unknown = sorted(str(key) for key in state if key not in STATE_KEYS)
    if missing or unknown:
        raise ValueError(
            "state is not a Backgrounds.state_dict(): "
            + (f"it lacks {', '.join(missing)}" if missing else f"unknown keys {unknown}")
        )
    for name, value in mine.items():
        if type(state[name]) is not type(value) or state[name] != value:
            raise ValueError(
                f"state_dict was saved with {name}={state[name]!r}, this Backgrounds has "
                f"{name}={value!r}: make it with the same pack and arguments"
            )
    check_seed("state['seed']", state["seed"])
    n = mine["num_envs"]
    counters = [_counter(state, key, n, device) for key in ("episode", "played")]
    return int(state["seed"]), counters[0], counters[1]


def _counter(state: dict[str, Any], key: str, n: int, device: torch.device) -> torch.Tensor:
    """`state[key]`: an int64 tensor `(n,)` of counts >= 0, checked, on `device`."""
    value = state[key]
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"state[{key!r}] must be a torch tensor, got {type(value).__name__}")
    if value.dtype != torch.int64 or value.shape != (n,):
        raise ValueError(
            f"state[{key!r}] must be int64 of shape ({n},) (num_envs), got "
            f"{value.dtype} of shape {tuple(value.shape)}"
        )
    value = value.to(device).clone()
    if len(value) and int(value.min()) < 0:  # a sync on an accelerator, once per load
        raise ValueError(f"state[{key!r}] must be counts >= 0, got {int(value.min())}")
    return value


def env_mask(envs: Any, index: Any, n: int, device: torch.device, what: str) -> torch.Tensor | None:
    """Which of `n` environments a call (`what`: `"reset"`, `"step"`) is for, as a bool mask
    on `device`, or None for all, checked.

    `envs` is a mask: one entry per environment, true (or 1) for those the call is for: a
    torch tensor or numpy array of bool, integer or float dtype, or a list (a `done` as
    simulators hand it out). `index` lists environment numbers instead. Nothing is guessed: a
    mask of another length, or one with values other than 0 and 1, is an error, as are
    indices that are not integers. A bool tensor makes no host sync; the values of an integer
    or float tensor on an accelerator are checked with one.

    Raises:
        TypeError, ValueError: what `envs` or `index` is not, named for the call `what`.
    """
    if index is not None:
        if envs is not None:
            raise ValueError(f"{what}: pass envs (a mask) or index=, not both")
        return _index_mask(_as_tensor(index, "index", what), n, device, what)
    if envs is None:
        return None
    mask = _as_tensor(envs, "envs", what)
    if mask.dim() != 1 or len(mask) != n:
        raise ValueError(
            f"{what}: envs is a mask of one entry per environment ({n},), got shape "
            f"{tuple(mask.shape)}; to name environments by number pass index=[...]"
        )
    if mask.dtype != torch.bool:
        if mask.is_complex():
            raise TypeError(f"{what}: envs must be a bool, integer or float mask, got {mask.dtype}")
        # a sync on an accelerator: integer and float masks are checked, not guessed at
        odd = (mask != 0) & (mask != 1)
        if bool(odd.any()):
            value = mask[odd][0].item()
            raise ValueError(
                f"{what}: envs is a mask of 0 and 1 (or bool), got the value {value!r}; to "
                f"name environments by number pass index=[...]"
            )
        mask = mask != 0
    return mask.to(device, non_blocking=True)


def _as_tensor(value: Any, name: str, what: str) -> torch.Tensor:
    """A torch tensor, numpy array, list, tuple or range as a tensor (numbers only)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple, range, np.ndarray)):
        try:
            array = np.asarray(value)
        except ValueError:  # a ragged list
            array = np.asarray(value, dtype=object)
        if array.size == 0:
            array = array.astype(np.int64)
        if array.dtype.kind in "biuf":
            return torch.from_numpy(np.ascontiguousarray(array))
    raise TypeError(
        f"{what}: {name} must be a torch tensor, a numpy array or a list of numbers, got "
        f"{_describe(value)}"
    )


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        kinds = sorted({type(v).__name__ for v in value})
        return f"a {type(value).__name__} of {', '.join(kinds)}"
    return type(value).__name__


def _index_mask(index: torch.Tensor, n: int, device: torch.device, what: str) -> torch.Tensor:
    """Environment numbers as a mask (one listed twice counts once), range-checked (one sync
    on an accelerator)."""
    if index.dtype == torch.bool or index.is_floating_point() or index.is_complex():
        raise TypeError(f"{what}: index must hold integer environment numbers, got {index.dtype}")
    if index.dim() != 1:
        raise ValueError(f"{what}: index must be 1-D, got shape {tuple(index.shape)}")
    if index.numel():
        lo, hi = (int(v) for v in torch.aminmax(index))
        if lo < 0 or hi >= n:
            raise ValueError(f"{what}: environment indices must be in [0, {n}), got {lo} .. {hi}")
    mask = torch.zeros(n, dtype=torch.bool, device=device)
    return mask.index_fill_(0, index.to(device, torch.int64), True)


def check_composite_args(
    obs: Any, n: int, frames: int, device: torch.device, alpha: Any, out: Any, layout: Any
) -> Geometry:
    """`obs`'s geometry when `obs`, `alpha` and `out` suit `Backgrounds.composite` (`n`
    environments, `frames` frames, on `device`, in `layout`).

    Raises:
        TypeError, ValueError: the first that does not, with the fix.
    """
    geom = obs_geometry(obs, layout, frames=frames)
    if geom.n != n:
        raise ValueError(f"obs hold {geom.n} environments, Backgrounds has num_envs={n}")
    if geom.frames != frames:  # (channels-first: 3 channels a frame)
        c = 3 * geom.frames
        raise ValueError(
            f"obs have {c} channels ({c // 3} stacked frames) but Backgrounds has "
            f"frames={frames} ({3 * frames} channels): pass frames={c // 3}"
        )
    if obs.device != device:
        raise ValueError(
            f"obs are on {obs.device} but Backgrounds on {device}: pass device={str(obs.device)!r}"
        )
    if isinstance(alpha, torch.Tensor):
        if alpha.shape != (n,) or not alpha.is_floating_point():
            raise ValueError(
                f"alpha must be a float or a float tensor of shape ({n},), got "
                f"{alpha.dtype} {tuple(alpha.shape)}"
            )
        check_weights("alpha", alpha, bool_ok=False)  # its values (on a CPU)
    elif not is_number(alpha):
        raise TypeError(
            f"alpha must be a float in [0, 1] or a ({n},) float tensor, got "
            f"{type(alpha).__name__} {alpha!r}"
        )
    elif not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if out is not None and (
        not isinstance(out, torch.Tensor)
        or out.shape != obs.shape
        or out.dtype != obs.dtype
        or out.device != obs.device
    ):
        raise ValueError("out must have the shape, dtype and device of obs")
    return geom

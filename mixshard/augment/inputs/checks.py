"""Every check of what augment's API is given, in one place: observations (either layout),
alpha, out and the per-call weights; the constructors' arguments of `Overlay` and
`Backgrounds`; which environments a call is for and a state to load; the mask builders'
layout and maps. Each check runs once on a call: the front objects check what they are given
and call the kernels' unchecked halves (`ops.blend_checked`, `pasting.paste`).

A wrong layout or range is an error or a warning here, not a wrong result later; messages
name the argument, what it was and the fix.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np
import torch

from ...core.checks import check_int, is_number

_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_ARRAYS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "arrays.py")
_CHECKED_SITES: set[tuple[str, str, int]] = set()  # (function, file, line) of checked calls

# The most channels a frame stack is taken to have (10 RGB frames): a last dimension this
# small next to a second dimension that is not looks like channels-last.
SMALL_CHANNELS = 30
LAYOUTS = ("NCHW", "NHWC")
OVERLAY_CACHES = ("auto", "device", "pool", "stream")  # `Overlay(cache=)`
BACKGROUNDS_CACHES = ("auto", "device", "pool")  # `Backgrounds(cache=)`
PLAYBACKS = ("loop", "pingpong", "random")
CLIP_ORDERS = ("random", "next", "no-repeat")
MAX_SEED = 2**64 - 1  # a seed is one 64-bit word of the draws' key: larger ones would wrap
MAX_SPEED = 2**31 - 1  # frames a step: `played` (int64) then lasts 2**32 steps at the most
MAX_FIRST_ENV = 2**62  # environment numbers are int64 words of the draws' key
STATE_KEYS = (
    "seed", "num_envs", "first_env", "clips", "count", "playback", "speed", "clip_order",
    "episode", "played",
)  # fmt: skip


def check_layout(layout: object) -> str:
    """`layout` if it is one of `LAYOUTS`; else `ValueError` naming it."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(
            f"layout must be 'NCHW' (channels-first, the default) or 'NHWC' (channels-last), "
            f"got {layout!r}"
        )
    return layout


def _small_stack(c: int) -> bool:
    return 0 < c <= SMALL_CHANNELS and c % 3 == 0


def check_obs(obs: object) -> torch.Tensor:
    """`obs` if it is an `(N, 3k, H, W)` tensor; else `TypeError` / `ValueError` saying why.

    Channels-last input `(N, H, W, 3k)` is refused by shape (its H can be a multiple of 3 and
    would silently be read as H/3 frames).
    """
    obs = check_tensor(obs, " of shape (N, 3k, H, W)")
    shape = tuple(obs.shape)
    # (H larger than the last dimension, too: a 4-channel (N, 4, 12, 12) is just a bad stack)
    if (
        obs.dim() == 4
        and _small_stack(shape[3])
        and not _small_stack(shape[1])
        and shape[1] > shape[3]
    ):
        raise ValueError(
            f"obs {shape} look channels-last (N, H, W, 3k); mixshard takes (N, 3k, H, W): "
            f"pass obs.permute(0, 3, 1, 2)"
        )
    if obs.dim() != 4 or shape[1] % 3 or shape[1] == 0:
        raise ValueError(f"obs must be (N, 3k, H, W) with 3k channels, got {shape}")
    return obs


def check_tensor(obs: object, of: str = "") -> torch.Tensor:
    """`obs` if it is a torch tensor, else a `TypeError` (`of` follows "torch.Tensor")."""
    if not isinstance(obs, torch.Tensor):
        kind = f"{type(obs).__module__}.{type(obs).__qualname__}"
        fix = " (torch.from_numpy(obs) converts a numpy array)" if kind.startswith("numpy") else ""
        raise TypeError(f"obs must be a torch.Tensor{of}, got {kind}{fix}")
    return obs


def _check_obs_last(obs: object) -> torch.Tensor:
    """`check_obs` for NHWC `(N, H, W, 3k)` or RGBA `(N, H, W, 4)` (NCHW data refused)."""
    obs = check_tensor(obs, " of shape (N, H, W, 3k)")
    shape = tuple(obs.shape)
    if obs.dim() == 4 and _looks_first(shape):
        raise ValueError(
            f"obs {shape} look channels-first (N, 3k, H, W) but layout='NHWC' was given: pass "
            f"layout='NCHW' (or obs.permute(0, 2, 3, 1))"
        )
    if obs.dim() != 4 or (shape[3] != 4 and (shape[3] % 3 or shape[3] == 0)):
        raise ValueError(
            f"obs must be (N, H, W, 3k) or RGBA (N, H, W, 4) with layout='NHWC', got {shape}"
        )
    return obs


def _looks_first(shape: tuple[int, ...]) -> bool:
    """A 4-D shape whose second dimension looks like channels (at most 30) and whose last like
    an image's side (more): `(N, 3, 84, 84)`. (Images of 30 pixels or fewer are not told
    apart: `obs=` catches those maps.)"""
    return shape[1] <= SMALL_CHANNELS < shape[3]


def _looks_last(shape: tuple[int, ...]) -> bool:
    """The mirror of `_looks_first`: `(N, 64, 64, 1)`, `(N, 84, 84, 3)`."""
    return shape[3] <= SMALL_CHANNELS < shape[1]


def rgb_frames(obs: object, layout: str) -> tuple[torch.Tensor, int]:
    """`obs` as a view with each frame's R, G, B in one dimension, and that dimension:
    NCHW `(N, 3k, H, W)` as `(N, k, 3, H, W)` (dimension 2), NHWC `(N, H, W, 3k)` as
    `(N, H, W, k, 3)` (dimension 4; RGBA `(N, H, W, 4)`: its RGB as `(N, H, W, 1, 3)`).
    Reducing over that dimension gives the layout's mask shape. uint8 or float, checked."""
    if check_layout(layout) == "NCHW":
        obs = check_obs(obs)
        n, c, h, w = obs.shape
        rgb, dim = obs.reshape(n, c // 3, 3, h, w), 2
    else:
        obs = _check_obs_last(obs)
        n, h, w, c = obs.shape
        rgb = obs[..., :3].unsqueeze(3) if c == 4 else obs.reshape(n, h, w, c // 3, 3)
        dim = 4
    if not (obs.dtype == torch.uint8 or obs.is_floating_point()):
        raise ValueError(f"obs must be uint8 or float 0..255, got {obs.dtype}")
    return rgb, dim


def check_map(name: str, x: torch.Tensor, layout: str, obs: object = None) -> None:
    """A segmentation or depth map: `(N, H, W)`, or `(N, k, H, W)` (NCHW) or `(N, H, W, k)`
    (NHWC); a 4-D map that looks like the other layout is refused, naming the fix. Given
    `obs`, the map must fit them too (`_check_fits`)."""
    check_layout(layout)
    shape = tuple(x.shape)
    if x.dim() not in (3, 4):
        raise ValueError(
            f"{name} must be (N, H, W), (N, k, H, W) with layout='NCHW' or (N, H, W, k) with "
            f"layout='NHWC', got {shape}"
        )
    nchw = layout == "NCHW"
    if x.dim() == 4 and (_looks_last(shape) if nchw else _looks_first(shape)):
        looks = "channels-last (N, H, W, k)" if nchw else "channels-first (N, k, H, W)"
        raise ValueError(
            f"{name} {shape} looks {looks} but layout={layout!r} was given: "
            f"pass layout={'NHWC' if nchw else 'NCHW'!r}"
        )
    if obs is not None:
        _check_fits(name, x, obs, layout)


def _check_fits(name: str, x: torch.Tensor, obs: object, layout: str) -> None:
    """`x` (a checked map) covers the images of `obs` (same layout): the same N, H and W, and
    one frame or the obs's k."""
    rgb, dim = rgb_frames(obs, layout)
    given = tuple(obs.shape)  # type: ignore[attr-defined]
    if dim == 2:
        n, k, _, h, w = rgb.shape
    else:
        n, h, w, k, _ = rgb.shape
    shape = tuple(x.shape)
    if x.dim() == 3:
        fits = shape == (n, h, w)
    elif layout == "NCHW":
        fits = shape[0] == n and shape[1] in (1, k) and shape[2:] == (h, w)
    else:
        fits = shape[:3] == (n, h, w) and shape[3] in (1, k)
    if not fits:
        frames = f"1 or {k}" if k > 1 else "1"
        expected = (
            f"({n}, {h}, {w}) or ({n}, {frames}, {h}, {w})"
            if layout == "NCHW"
            else f"({n}, {h}, {w}) or ({n}, {h}, {w}, {frames})"
        )
        raise ValueError(
            f"{name} {shape} does not fit obs {given} (layout={layout!r}): expected {expected}, "
            f"the images' size"
        )


def user_stacklevel() -> int:
    """The `stacklevel` that makes a warning name the first caller outside mixshard (the line
    of the user's code, however many of mixshard's functions lie between)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def warn_if_unit_range_at_site(obs: torch.Tensor) -> None:
    """`warn_if_unit_range` for a free function (`composite`, `blend`): once per line of the
    user's code that calls it, so its reduction and host sync are paid on a first batch, not
    on every call, and each place that passes 0..1 obs is named. Called by mixshard itself
    (`Overlay`, `Backgrounds`, which check once per object) it checks nothing."""
    if not obs.is_floating_point() or obs.numel() == 0:
        return
    function, frame = sys._getframe(1).f_code.co_name, sys._getframe(2)  # and its caller
    while frame.f_back is not None and frame.f_code.co_filename == _ARRAYS:
        frame = frame.f_back  # (`arrays.same_kind`'s wrapper is the function itself)
    if frame.f_code.co_filename.startswith(_PACKAGE):
        return
    site = (function, frame.f_code.co_filename, frame.f_lineno)
    if site not in _CHECKED_SITES:
        _CHECKED_SITES.add(site)
        warn_if_unit_range(obs)


def warn_if_unit_range(obs: torch.Tensor) -> None:
    """Warn when float `obs` lie within 0..1 (and are not all 0): the overlay takes 0..255, as
    the reference does.

    One reduction and one host sync: call it on a first batch, not on every call.
    """
    if not obs.is_floating_point() or obs.numel() == 0:
        return
    lo, hi = torch.aminmax(obs.detach())
    if bool((lo >= 0) & (hi > 0) & (hi <= 1)):  # all black says nothing of the range
        warnings.warn(
            f"mixshard: the observations lie within 0..1 (min {float(lo):.3g}, max "
            f"{float(hi):.3g}) but mixshard takes float 0..255, as the reference "
            f"random_overlay does: multiply them by 255, or the backgrounds dominate",
            stacklevel=user_stacklevel(),
        )


def check_weights(
    name: str, weights: torch.Tensor, bool_ok: bool, *, everywhere: bool = False
) -> None:
    """A per-call weight tensor (`alpha`, or a `mask` when `bool_ok`): float (or bool for a
    mask), and on the CPU every value in [0, 1], none NaN. On another device the values are
    not checked unless `everywhere` (a constructor's, once): that would wait for the device on
    every call (a host sync).

    Raises:
        TypeError: an integer dtype (a 0/255 uint8 mask among them).
        ValueError: a CPU tensor (any, when `everywhere`) with a value outside [0, 1], or NaN.
    """
    if weights.dtype == torch.bool and bool_ok:
        return
    if not weights.is_floating_point():
        if bool_ok:
            raise TypeError(
                f"{name} must be a bool or float tensor (true or 1 keeps the observation), got "
                f"{weights.dtype}; for a 0/255 mask pass {name}.bool(), or {name} / 255 for "
                "partial weights"
            )
        raise TypeError(f"{name} must be a float tensor of weights in [0, 1], got {weights.dtype}")
    if (weights.device.type != "cpu" and not everywhere) or weights.numel() == 0:
        return
    values = weights.detach()
    if bool(((values >= 0) & (values <= 1)).all()):
        return
    nan = values.isnan()
    if bool(nan.any()):
        raise ValueError(
            f"{name} must be in [0, 1], got NaN ({int(nan.sum())} of {values.numel()} values)"
        )
    raise ValueError(
        f"{name} must be in [0, 1], got a tensor from {values.min().item():g} to "
        f"{values.max().item():g}"
    )


def check_blend_args(obs: torch.Tensor, imgs: torch.Tensor, alpha, out: torch.Tensor | None) -> int:
    if obs.dim() != 4 or imgs.dim() != 4:
        raise ValueError(
            f"obs must be (N, 3k, H, W) and imgs (N, 3, H, W) or (N, 3k, H, W); got "
            f"{tuple(obs.shape)} and {tuple(imgs.shape)}"
        )
    n, c, h, w = obs.shape
    if c % 3 or c == 0:
        raise ValueError(f"obs has {c} channels, not a multiple of 3 (frame-stacked RGB)")
    if imgs.shape[1] not in (3, c):
        raise ValueError(
            f"imgs must have 3 channels (one background for every frame) or {c}, as obs (one "
            f"per frame), got {imgs.shape[1]}"
        )
    if imgs.shape[0] != n or imgs.shape[2:] != (h, w):
        raise ValueError(
            f"imgs {tuple(imgs.shape)} do not match obs {tuple(obs.shape)} in N, H "
            "or W (resize the backgrounds, or use mixshard.Overlay, which does)"
        )
    if imgs.device != obs.device:
        raise ValueError(f"obs is on {obs.device} but imgs on {imgs.device}")
    if not (obs.is_floating_point() or obs.dtype == torch.uint8):
        raise ValueError(f"obs must be float (0..255) or uint8, got {obs.dtype}")
    if not (imgs.dtype == torch.uint8 or imgs.is_floating_point()):
        raise ValueError(f"imgs must be uint8 (or float 0..255), got {imgs.dtype}")
    check_alpha_out(alpha, out, obs)
    return c // 3


def check_alpha_shape(alpha: float | torch.Tensor, n: int) -> None:
    """An alpha tensor's shape: one weight, or one per sample of `n` (no values read)."""
    if isinstance(alpha, torch.Tensor) and (
        alpha.dim() > 1 or (alpha.dim() == 1 and alpha.shape[0] != n)
    ):
        raise ValueError(f"alpha must be a float or an (N,) tensor, got {tuple(alpha.shape)}")


def check_overlay_obs(obs: object) -> torch.Tensor:
    """`Overlay`'s obs without a mask: `(N, 3k, H, W)` (`check_obs`), float or uint8."""
    obs = check_obs(obs)
    if not (obs.is_floating_point() or obs.dtype == torch.uint8):
        raise ValueError(f"obs must be float (0..255) or uint8, got {obs.dtype}")
    return obs


def check_alpha_out(alpha, out: torch.Tensor | None, obs: torch.Tensor) -> None:
    """A blend's alpha (a float in [0, 1] or an `(N,)` float tensor) and `out` (obs's shape,
    dtype and device), checked against obs."""
    if isinstance(alpha, torch.Tensor):
        check_alpha_shape(alpha, obs.shape[0])
        if alpha.device != obs.device:
            raise ValueError(f"obs is on {obs.device} but alpha on {alpha.device}")
        check_weights("alpha", alpha, bool_ok=False)
    elif not is_number(alpha):  # (float() would take "0.5" and True)
        raise TypeError(
            f"alpha must be a float in [0, 1] or an (N,) float tensor, got "
            f"{type(alpha).__name__} {alpha!r}"
        )
    elif not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    check_out(out, obs)


def check_alpha(alpha: Any, *, everywhere: bool) -> None:
    """A blend weight: a number in [0, 1], `(lo, hi)` with 0 <= lo <= hi <= 1, or a float
    tensor of 0 or 1 dimensions with weights in [0, 1] (none NaN).

    `everywhere`: check a tensor's values on any device (a host sync: the constructor's,
    once); else only on the CPU (a per-call alpha: no sync on every call).
    """
    if isinstance(alpha, torch.Tensor):
        if alpha.dim() > 1:
            raise ValueError(
                f"alpha must be a float tensor of 0 or 1 dimensions, got {alpha.dtype} "
                f"of shape {tuple(alpha.shape)}"
            )
        check_weights("alpha", alpha, bool_ok=False, everywhere=everywhere)
        return
    if isinstance(alpha, tuple):
        if len(alpha) != 2 or not all(is_number(a) for a in alpha):
            raise ValueError(f"alpha must be a number or a (lo, hi) pair of two, got {alpha!r}")
        if not 0 <= alpha[0] <= alpha[1] <= 1:
            raise ValueError(f"alpha range must satisfy 0 <= lo <= hi <= 1, got {tuple(alpha)}")
        return
    if not is_number(alpha):
        raise TypeError(f"alpha must be a number, a (lo, hi) pair or a tensor, got {alpha!r}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")


def check_crop(crop: Any) -> None:
    """None, `"auto"`, or an area scale range `(lo, hi)` with 0 < lo <= hi <= 1."""
    if crop is None or crop == "auto":
        return
    if isinstance(crop, str):
        raise ValueError(f"crop must be (lo, hi), 'auto' or None, got {crop!r}")
    if (
        not isinstance(crop, (tuple, list))
        or len(crop) != 2
        or not all(is_number(c) for c in crop)
        or not 0 < crop[0] <= crop[1] <= 1
    ):
        raise ValueError(f"crop must be (lo, hi) with 0 < lo <= hi <= 1, got {crop!r}")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """`value` is one of `choices`, else a `ValueError` listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def check_cache_fraction(fraction: Any) -> None:
    """A share of the free device memory: a number in (0, 1]."""
    if not is_number(fraction) or not 0 < fraction <= 1:
        raise ValueError(f"cache_fraction must be in (0, 1], got {fraction!r}")


def check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def check_pool(pool: Any) -> None:
    """Images in a pool: None (as many as fit) or an integer >= 1."""
    if pool is None:
        return
    check_int("pool", pool)
    if pool < 1:
        raise ValueError(f"pool must be >= 1 images, got {pool}")


def check_overlay_args(
    *,
    alpha: Any,
    flip: Any,
    crop: Any,
    cache: Any,
    num_workers: Any,
    seed: Any,
    cache_fraction: Any,
    batch_size: Any,
    pool: Any,
    uses: Any,
) -> None:
    """Every `Overlay` argument checked at the constructor (`source`, `device`, `cache_dir`
    and `cache_limit` are checked where they are resolved)."""
    check_alpha(alpha, everywhere=True)
    check_flag("flip", flip)
    check_crop(crop)
    check_choice("cache", cache, OVERLAY_CACHES)
    check_int("num_workers", num_workers, 0)
    check_int("seed", seed, 0)
    check_cache_fraction(cache_fraction)
    check_int("batch_size", batch_size, 1)
    check_pool(pool)
    check_int("uses", uses, 1)


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
    check_choice("playback", playback, PLAYBACKS)
    check_choice("cache", cache, BACKGROUNDS_CACHES)
    check_cache_fraction(cache_fraction)
    check_choice("clip_order", clip_order, CLIP_ORDERS)
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


def state_tensor(state: dict[str, Any], key: str, n: int, dtype: torch.dtype) -> torch.Tensor:
    """`state[key]` if it is a tensor of `dtype` and shape `(n,)` (one per environment)."""
    value = state[key]
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"state[{key!r}] must be a torch tensor, got {type(value).__name__}")
    if value.dtype != dtype or value.shape != (n,):
        raise ValueError(
            f"state[{key!r}] must be {str(dtype).removeprefix('torch.')} of shape ({n},) "
            f"(num_envs), got {value.dtype} of shape {tuple(value.shape)}"
        )
    return value


def _counter(state: dict[str, Any], key: str, n: int, device: torch.device) -> torch.Tensor:
    """`state[key]`: an int64 tensor `(n,)` of counts >= 0, checked, on `device`."""
    value = state_tensor(state, key, n, torch.int64).to(device).clone()
    if len(value) and int(value.min()) < 0:  # a sync on an accelerator, once per load
        raise ValueError(f"state[{key!r}] must be counts >= 0, got {int(value.min())}")
    return value


def env_mask(envs: Any, index: Any, n: int, device: torch.device, what: str) -> torch.Tensor | None:
    """Which of `n` environments a call (`what`: `"reset"`, `"step"`) is for, as a bool mask
    on `device`, or None for all, checked: `envs` a mask of one entry per environment (bool,
    or 0/1 integers or floats: torch, numpy or a list), or `index` environment numbers. Nothing
    is guessed (docs/design.md, "Backgrounds per environment", says why); a bool tensor makes
    no host sync, an integer or float one on an accelerator one.
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
    geom: Any, obs: Any, n: int, frames: int, device: torch.device, alpha: Any, out: Any
) -> None:
    """`obs` (of geometry `geom`, from `layouts.obs_geometry`), `alpha` and `out` checked
    against `Backgrounds.composite`'s `n` environments of `frames` frames on `device`.

    Raises:
        TypeError, ValueError: the first that does not, with the fix.
    """
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
    check_out(out, obs)


def check_out(out: Any, obs: torch.Tensor) -> None:
    """`out`: None, or a tensor of obs's shape, dtype and device."""
    if out is not None and (
        not isinstance(out, torch.Tensor)
        or out.shape != obs.shape
        or out.dtype != obs.dtype
        or out.device != obs.device
    ):
        raise ValueError("out must have the shape, dtype and device of obs")

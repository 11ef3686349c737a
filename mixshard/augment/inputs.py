"""What the front of the API accepts: observations are checked before they are blended, so a
wrong layout or range is an error or a warning, not a wrong result."""

from __future__ import annotations

import os
import sys
import warnings

import torch

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

# The most channels a frame stack is taken to have (10 RGB frames): a last dimension this
# small next to a second dimension that is not looks like channels-last.
SMALL_CHANNELS = 30


def _small_stack(c: int) -> bool:
    return 0 < c <= SMALL_CHANNELS and c % 3 == 0


def check_obs(obs: object) -> torch.Tensor:
    """`obs` if it is an `(N, 3k, H, W)` tensor; else `TypeError` / `ValueError` saying why.

    Channels-last input `(N, H, W, 3k)` is refused by shape (its H can be a multiple of 3 and
    would silently be read as H/3 frames).
    """
    if not isinstance(obs, torch.Tensor):
        kind = f"{type(obs).__module__}.{type(obs).__qualname__}"
        fix = " (torch.from_numpy(obs) converts a numpy array)" if kind.startswith("numpy") else ""
        raise TypeError(f"obs must be a torch.Tensor of shape (N, 3k, H, W), got {kind}{fix}")
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


def user_stacklevel() -> int:
    """The `stacklevel` that makes a warning name the first caller outside mixshard (the line
    of the user's code, however many of mixshard's functions lie between)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


_CHECKED_SITES: set[tuple[str, str, int]] = set()  # (function, file, line) of checked calls
_ARRAYS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "arrays.py")


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

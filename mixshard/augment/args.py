"""Checks of the `Overlay` arguments: one function per argument, each called from one place
(`check_overlay_args` for the constructor; `check_alpha` again for a per-call alpha).
`core/checks.py` has the general ones; `Backgrounds` shares `check_cache_fraction` and
`check_flag`."""

from __future__ import annotations

from typing import Any

import torch

from ..core.checks import check_int, is_number
from .inputs import check_weights

CACHES = ("auto", "device", "pool", "stream")  # `Overlay(cache=)`


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


def check_cache(cache: Any, caches: tuple[str, ...] = CACHES) -> None:
    if cache not in caches:
        raise ValueError(f"cache must be one of {', '.join(caches)}, got {cache!r}")


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
    check_cache(cache)
    check_int("num_workers", num_workers, 0)
    check_int("seed", seed, 0)
    check_cache_fraction(cache_fraction)
    check_int("batch_size", batch_size, 1)
    check_pool(pool)
    check_int("uses", uses, 1)

"""Checks of the `Overlay` arguments at the call (`core/checks.py` has the general ones)."""

from __future__ import annotations

from typing import Any

import torch

from ..core.checks import check_int, check_optional_int, is_number


def check_alpha(alpha: Any) -> None:
    """A blend weight: a number in [0, 1], `(lo, hi)` with 0 <= lo <= hi <= 1, or a tensor of
    weights in [0, 1] (checked once, here: a host sync; NaN fails)."""
    if isinstance(alpha, torch.Tensor):
        if alpha.dim() > 1:
            raise ValueError(
                f"alpha must be a float tensor of 0 or 1 dimensions, got {alpha.dtype} "
                f"of shape {tuple(alpha.shape)}"
            )
        if not (alpha.is_floating_point() or alpha.numel() == 0):  # as at the call
            raise TypeError(f"alpha must be a float tensor of weights in [0, 1], got {alpha.dtype}")
        if alpha.numel() and not bool(((alpha >= 0) & (alpha <= 1)).all()):
            raise ValueError(
                f"alpha must be in [0, 1], got a tensor from {alpha.min().item()} to "
                f"{alpha.max().item()}"
            )
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


def check_overlay_args(
    alpha: Any, num_workers: Any, seed: Any, batch_size: Any, pool: Any, uses: Any
) -> None:
    """The `Overlay` arguments beyond those `overlay.py` checks itself."""
    check_alpha(alpha)
    check_int("num_workers", num_workers, 0)
    check_int("seed", seed, 0)
    check_int("batch_size", batch_size, 1)
    check_optional_int("pool", pool)  # their ranges: `pool.check_pool_args`
    check_int("uses", uses)

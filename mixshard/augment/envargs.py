"""The arguments `Backgrounds` checks at each call: which environments (`None`, a bool mask,
indices or a list, as a bool mask on the device), the composite's mask and observations."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core.checks import is_number
from .inputs import check_obs, check_weights


def env_mask(envs: Any, n: int, device: torch.device, what: str) -> torch.Tensor | None:
    """`envs` (of `n` environments) as a bool mask on `device`, or None for all, checked. A
    bool mask makes no host sync; an index tensor is range-checked (one sync on an
    accelerator); an index listed twice counts once.

    Raises:
        TypeError, ValueError: what `envs` is not, named for the call `what`.
    """
    if envs is None:
        return None
    if isinstance(envs, (list, tuple, range)):
        return _listed(envs, n, what).to(device)
    if not isinstance(envs, torch.Tensor):
        raise TypeError(
            f"{what}: envs must be None, a bool mask, an index tensor or a list, got "
            f"{type(envs).__name__}"
        )
    if envs.dtype == torch.bool:
        if envs.shape != (n,):
            raise ValueError(
                f"{what}: a bool mask must have shape ({n},) (num_envs), got {tuple(envs.shape)}"
            )
        return envs.to(device, non_blocking=True)
    if envs.is_floating_point() or envs.is_complex():
        raise ValueError(
            f"{what}: envs must be a bool mask or integer indices, got {envs.dtype} "
            f"(a float `done` converts with done.bool())"
        )
    if envs.dim() != 1:
        raise ValueError(f"{what}: indices must be 1-D, got shape {tuple(envs.shape)}")
    if envs.numel():
        lo, hi = torch.aminmax(envs)
        if int(lo) < 0 or int(hi) >= n:  # one sync on an accelerator
            raise ValueError(
                f"{what}: environment indices must be in [0, {n}), got {int(lo)} .. {int(hi)}"
            )
    mask = torch.zeros(n, dtype=torch.bool, device=device)
    return mask.index_fill_(0, envs.to(device, torch.int64), True)


def _listed(envs: list | tuple | range, n: int, what: str) -> torch.Tensor:
    index = np.asarray(envs, dtype=np.int64) if len(envs) else np.zeros(0, np.int64)
    if index.ndim != 1:
        raise ValueError(f"{what}: envs must be a flat list of indices")
    if len(index) and (index.min() < 0 or index.max() >= n):
        raise ValueError(
            f"{what}: environment indices must be in [0, {n}), got {index.min()} .. {index.max()}"
        )
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.from_numpy(index)] = True
    return mask


def frame_mask(
    mask: Any, n: int, frames: int, h: int, w: int, device: torch.device
) -> torch.Tensor:
    """A composite mask `(n, frames or 1, H, W)`, bool or float, checked, as `(n, frames or
    1, 1, H, W)`: the same on the three channels of a frame."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if not (mask.dtype == torch.bool or mask.is_floating_point()):
        raise ValueError(f"mask must be bool or float, got {mask.dtype}")
    shape = tuple(mask.shape)
    if mask.dim() != 4 or shape[0] != n or shape[2:] != (h, w) or shape[1] not in (1, frames):
        raise ValueError(
            f"mask must be ({n}, {frames} or 1, {h}, {w}) (num_envs, frames or 1, H, W), "
            f"got {shape}"
        )
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but Backgrounds on {device}")
    check_weights("mask", mask, bool_ok=True)  # a float mask's values (on a CPU)
    return mask.unsqueeze(2)


def check_composite_args(
    obs: Any, n: int, frames: int, device: torch.device, alpha: Any, out: Any
) -> tuple[int, int, int, int]:
    """`obs.shape` when `obs`, `alpha` and `out` suit `Backgrounds.composite` (`n`
    environments, `frames` frames, on `device`).

    Raises:
        TypeError, ValueError: the first that does not, with the fix.
    """
    check_obs(obs)
    batch, c, h, w = obs.shape
    if batch != n:
        raise ValueError(f"obs hold {batch} environments, Backgrounds has num_envs={n}")
    if c != 3 * frames:
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
    elif not is_number(alpha) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if out is not None and (
        out.shape != obs.shape or out.dtype != obs.dtype or out.device != obs.device
    ):
        raise ValueError("out must have the shape, dtype and device of obs")
    return batch, c, h, w

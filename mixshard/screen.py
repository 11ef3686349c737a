"""What a simulator wrapper does to each observation: the image picked out of it, its keep
mask built, each environment's background composited behind it, and the image put back, of
the kind it came as (a numpy array stays one, its memory read in place).

Simulators hand out channels-last images, `(N, H, W, 3)`, uint8 (or float 0..255), numpy or
torch, alone or under a key of a dict. The mask is None (the background everywhere, at
`alpha`), a builder of `mixshard.masks` that reads the images (`green_screen`, `color_key` with
its arguments bound by `functools.partial`, ...), a key of `mixshard.keys` that reads the
images (`green_screen()`, `color_key(...)`: the mask made inside the composite's own pass, the
cheapest), or a callable of the observation and info as the simulator returned them that gives
a keep mask `(N, H, W)` or `(N, H, W, 1)`, or a key (`keys.from_segmentation(ids, ...)` of the
step's ids: again made in the pass).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .augment.backgrounds import Backgrounds
from .augment.masks.keys import ColorKey, GreenScreen, Key

Mask = Callable[[Any, dict[str, Any]], Any]
# where `mixshard.masks` builders live
_BUILDERS = (
    "mixshard.augment.masks.builders",
    "mixshard.augment.masks.pixelmaps",
    "mixshard.augment.masks.chroma",
    "mixshard.masks",
)


class Screen:
    """Composites `backgrounds` behind the images of a simulator's observations.

    Args:
        backgrounds: a `mixshard.Backgrounds` of `num_envs` environments and `frames=1`.
        mask: None, a `mixshard.masks` builder, a colour key of `mixshard.keys`, or a
            callable of `(obs, info)` (above).
        key: the image's key in dict observations (None: the observations are the images).
        alpha: the backgrounds' weight where they show.
        num_envs: the simulator's environments.
        name: the simulator's name, for the errors.

    Raises:
        TypeError, ValueError: `backgrounds` of another number of environments or frames, a
            mask that is neither (each named).
    """

    def __init__(
        self, backgrounds: Any, mask: Any, *, key: Any, alpha: Any, num_envs: int, name: str
    ) -> None:
        if not isinstance(backgrounds, Backgrounds):
            raise TypeError(
                f"backgrounds must be a mixshard.Backgrounds, got {type(backgrounds).__name__}"
            )
        n = num_envs
        if backgrounds.num_envs != n:
            raise ValueError(
                f"backgrounds has num_envs={backgrounds.num_envs}, {name} has {n} "
                f"environment{'s' * (n != 1)}: make it with Backgrounds(pack, {n}, frames=1)"
            )
        if backgrounds.frames != 1:
            raise ValueError(
                f"observations are single frames (H, W, 3): make the Backgrounds with frames=1, "
                f"got frames={backgrounds.frames} (stack frames after this wrapper)"
            )
        if isinstance(mask, Key) and not isinstance(mask, (GreenScreen, ColorKey)):
            raise TypeError(
                f"mask={type(mask).__name__} key holds one map, not each step's: pass a "
                f"callable of (obs, info) that returns the key of the step's map"
            )
        if mask is not None and not callable(mask) and not isinstance(mask, Key):
            raise TypeError(
                "mask must be None, a mixshard.masks builder, a mixshard.keys colour key or a "
                f"callable of (obs, info) returning a keep mask, got {type(mask).__name__}"
            )
        self.name, self.bg, self.mask, self.key, self.alpha = name, backgrounds, mask, key, alpha
        self.builder = _is_builder(mask)

    def __call__(self, obs: Any, info: dict[str, Any], single: bool = False) -> Any:
        """`obs` (a batch, or one `single` observation) with the backgrounds composited."""
        image = obs[self.key] if self.key is not None else obs
        batch = _tensor(image, self.bg.device)
        batch = batch.unsqueeze(0) if single else batch
        keep = self._keep(obs, info, batch, single)
        out = self.bg.composite(batch, keep, self.alpha, layout="NHWC")
        out = out[0] if single else out
        back = out.cpu().numpy() if isinstance(image, np.ndarray) else out.to(image.device)
        return back if self.key is None else {**obs, self.key: back}

    def _keep(
        self, obs: Any, info: dict[str, Any], batch: torch.Tensor, single: bool
    ) -> torch.Tensor | Key | None:
        """The keep mask `(N, H, W, 1)` on the backgrounds' device, checked, a key, or None."""
        if self.mask is None or isinstance(self.mask, Key):
            return self.mask
        n, h, w = batch.shape[:3]
        shape = (n, h, w) if self.builder or not single else (h, w)
        keep: Any
        if self.builder:  # a builder of `mixshard.masks`, on the channels-last images
            got = keep = self.mask(batch, layout="NHWC")
        else:
            got = self.mask(obs, info)
            if isinstance(got, Key):  # (its map is checked by the composite)
                return got
            keep = torch.from_numpy(got) if isinstance(got, np.ndarray) else got
        if (
            not isinstance(keep, torch.Tensor)
            or tuple(keep.shape) not in (shape, (*shape, 1))
            or not (keep.dtype == torch.bool or keep.is_floating_point())
        ):
            given = (
                f"{tuple(keep.shape)} {keep.dtype}"
                if isinstance(keep, torch.Tensor)
                else type(got).__name__
            )
            seen = tuple(batch.shape[1:] if single else batch.shape)
            raise ValueError(
                f"mask returned {given} for {self.name}'s observations {seen}: a keep mask is "
                f"{shape} or {(*shape, 1)}, bool or float (true or 1 keeps the pixel)"
            )
        return keep.reshape(n, h, w, 1).to(self.bg.device)


def _is_builder(mask: Any) -> bool:
    """Whether `mask` is a `mixshard.masks` builder (or a partial of one), called on the images;
    a builder of masks from something else (ids, depth) is refused: it needs a callable."""
    inner = mask.func if isinstance(mask, functools.partial) else mask
    if getattr(inner, "__module__", None) not in _BUILDERS:
        return False
    first = next(iter(inspect.signature(inner).parameters), None)
    if first != "obs":
        raise TypeError(
            f"mask={inner.__name__} builds masks from {first}, not from the image: pass a "
            f"callable of (obs, info) that calls it (e.g. lambda obs, info: "
            f"masks.{inner.__name__}(torch.from_numpy(obs[...]), ...))"
        )
    return True


def _tensor(image: Any, device: torch.device) -> torch.Tensor:
    """The images as a tensor on `device` (a numpy array's memory, on a CPU)."""
    if isinstance(image, torch.Tensor):
        return image.to(device)
    if not isinstance(image, np.ndarray):
        raise TypeError(f"observations must be numpy arrays or torch tensors, got {image!r}")
    if image.flags.writeable:
        return torch.from_numpy(image).to(device)
    with warnings.catch_warnings():  # never written: the composite writes a new array
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        return torch.from_numpy(image).to(device)

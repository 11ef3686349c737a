"""Arrays of other libraries at the API's edge: JAX, Warp and numpy in, the same kind out.

MJX and MuJoCo Playground hand out JAX arrays, MuJoCo Warp Warp arrays, gymnasium numpy
arrays; mixshard computes in torch. `as_torch` views such an array as a torch tensor through
DLPack (or `torch.from_numpy`), without copying, and returns with it the function that views a
result as the caller's kind again. `same_kind` does that for the array arguments of a function,
so that an entry point takes every kind by one line above its `def`.

Nothing here imports JAX or Warp: an array can only be one of theirs when its library is
already imported (`sys.modules`), so torch-only callers pay one dictionary lookup per argument.
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
import torch

__all__ = ["as_torch", "kind_of", "same_kind"]

Back = Callable[[torch.Tensor], Any]
F = TypeVar("F", bound=Callable[..., Any])


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def kind_of(x: object) -> str:
    """`"torch"`, `"numpy"`, `"jax"`, `"jax-traced"`, `"warp"` or `"other"` (None, numbers,
    lists: left to the function's own checks)."""
    if isinstance(x, torch.Tensor):
        return "torch"
    if isinstance(x, np.ndarray):
        return "numpy"
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, jax.Array):
        # (a tracer is a jax.Array too, but holds no buffer to share)
        return "jax-traced" if isinstance(x, jax.core.Tracer) else "jax"
    warp = sys.modules.get("warp")
    if warp is not None and isinstance(x, warp.array):
        return "warp"
    return "other"


def as_torch(
    x: Any,
    name: str = "obs",
    device: torch.device | str | None = None,
    *,
    written: bool = False,
) -> tuple[Any, Back]:
    """`x` as a torch tensor sharing its memory, and the function that gives a result back as
    `x`'s kind.

    Args:
        x: a torch tensor (returned as it is), a numpy array, a JAX array (on one device) or a
            Warp array. Anything else is returned unchanged, for the caller's own checks.
        name: the argument's name, for errors.
        device: where the caller computes (a `Backgrounds`' device); a JAX or Warp array on
            another device is refused, not copied.
        written: `x` is an output the caller writes into (`out=`).

    Returns:
        `(tensor, back)`: `back(result)` is a JAX array on `x`'s device for a JAX `x`, a Warp
        array for a Warp `x` (of `x`'s vector dtype when the result has `x`'s shape), a numpy
        array for a numpy `x`, the result itself otherwise. Each shares the result's memory
        (JAX copies a result that is not contiguous).

    Raises:
        TypeError: a JAX array inside `jax.jit` (a tracer has no buffer); a JAX array to
            write into (JAX arrays are immutable).
        ValueError: a JAX array on several devices, or a JAX or Warp array on another device
            than `device`; a read-only numpy array to write into.
    """
    kind = kind_of(x)
    if kind in ("torch", "other"):
        return x, _same
    if kind == "numpy":
        if written and not x.flags.writeable:
            raise ValueError(f"{name} is a read-only numpy array; mixshard would write into it")
        return _from_numpy(x), _to_numpy
    if kind == "jax-traced":
        raise TypeError(
            f"{name} is a traced JAX value (inside jax.jit or another transform), which holds "
            f"no buffer to share: call mixshard outside the jitted function, on its outputs"
        )
    if kind == "jax":
        if written:
            raise TypeError(
                f"{name} cannot be a JAX array: JAX arrays are immutable, so mixshard does not "
                f"write into one; leave {name}=None and take the result"
            )
        where = _jax_device(x, name)
        t = torch.from_dlpack(x)
        _check_device(t, name, f"a JAX array on {where}", device)
        return t, _to_jax
    t = torch.from_dlpack(x)  # Warp: a vector dtype becomes a last dimension
    _check_device(t, name, f"a Warp array on {x.device}", device)
    return t, functools.partial(_to_warp, dtype=x.dtype, like=(tuple(t.shape), t.dtype))


def _from_numpy(x: np.ndarray) -> torch.Tensor:
    if x.flags.writeable:
        return torch.from_numpy(x)
    # an observation handed out read-only is only read; torch's warning is about writing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(x)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.numpy() if t.device.type == "cpu" else t.cpu().numpy()


def _jax_device(x: Any, name: str) -> str:
    devices = x.devices()
    if len(devices) != 1:
        raise ValueError(
            f"{name} is a JAX array sharded over {len(devices)} devices; give one device's "
            f"array (e.g. each shard of x.addressable_shards, or jax.device_put(x, device))"
        )
    return str(next(iter(devices)))


def _check_device(t: torch.Tensor, name: str, what: str, device: torch.device | str | None) -> None:
    if device is not None and t.device != torch.device(device):
        raise ValueError(
            f"{name} is {what} (torch's {t.device}), but mixshard computes on {device} here: "
            f"put it there first (or the Backgrounds and the other arrays on {t.device})"
        )


def _to_jax(t: torch.Tensor) -> Any:
    import jax.dlpack  # (imported already: the input was a JAX array)

    return jax.dlpack.from_dlpack(t)


def _to_warp(t: torch.Tensor, dtype: Any, like: tuple[tuple[int, ...], torch.dtype]) -> Any:
    import warp  # (imported already: the input was a Warp array)

    # a result of the input's shape and scalar type (a composite) gets its vector dtype (vec3
    # RGB) back; another (a bool mask of an id map's shape) its own
    return warp.from_torch(t, dtype=dtype if (tuple(t.shape), t.dtype) == like else None)


def same_kind(*names: str) -> Callable[[F], F]:
    """A decorator: the named array arguments of the function may be numpy, JAX or Warp
    arrays; they reach it as torch tensors (zero-copy), and a tensor it returns goes back as
    the first named argument's kind.

    The arrays must be on the device of the first one (or of `self.device`, for a method of
    an object that has one). A call whose arguments are all torch tensors (or None, numbers)
    runs the function directly.

    Args:
        names: the array parameters; the first decides the result's kind.
    """

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _foreign(args, kwargs):
                return fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            device = _device_of(bound.arguments.get("self"))
            back: Back = _same
            for i, name in enumerate(names):
                if bound.arguments.get(name) is None:
                    continue
                written = name == "out"  # (the one output parameter mixshard's API has)
                t, to = as_torch(bound.arguments[name], name, device, written=written)
                if i == 0:
                    back = to
                if device is None and isinstance(t, torch.Tensor):
                    device = t.device  # the rest must be where the first one is
                bound.arguments[name] = t
            result = fn(*bound.args, **bound.kwargs)
            return back(result) if isinstance(result, torch.Tensor) else result

        return cast(F, wrapper)

    return decorate


def _foreign(args: tuple, kwargs: dict) -> bool:
    """Whether any argument is a numpy, JAX or Warp array: one isinstance per argument, the
    cost a torch-only call pays (a loop, not `any` of a generator: half the time)."""
    kinds = _kinds(sys.modules.get("jax"), sys.modules.get("warp"))
    for v in args:
        if isinstance(v, kinds):
            return True
    return bool(kwargs) and any(isinstance(v, kinds) for v in kwargs.values())


@functools.lru_cache(maxsize=8)
def _kinds(jax: Any, warp: Any) -> tuple[type, ...]:
    """The array types not torch's, of the libraries imported (made once per pair)."""
    kinds: tuple[type, ...] = (np.ndarray,)
    if jax is not None:
        kinds += (jax.Array,)
    if warp is not None:
        kinds += (warp.array,)
    return kinds


def _device_of(owner: object) -> torch.device | None:
    device = getattr(owner, "device", None)
    return device if isinstance(device, torch.device) else None

"""Gymnasium wrappers: each environment's own background behind its agent, reset with it.

    from mixshard.gym import VectorBackgroundWrapper  # pip install 'mixshard[gymnasium]'
    envs = VectorBackgroundWrapper(envs, mixshard.Backgrounds(pack, envs.num_envs, frames=1),
                                   mask=lambda obs, info: (obs != 0).any(-1))

`VectorBackgroundWrapper` wraps a vector env of `(N, H, W, 3)` images, `BackgroundWrapper` one
env of `(H, W, 3)` images. An environment's background changes exactly where its episode does,
under each of gymnasium's autoreset modes (docs/simulators.md, "Gymnasium", says how in each).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
except ImportError as exc:  # an optional extra: the runtime install has no simulator
    raise ImportError(
        "mixshard.gym needs gymnasium 1.1 or later: pip install 'mixshard[gymnasium]'"
    ) from exc

from .augment.backgrounds import Backgrounds
from .screen import Mask, Screen

__all__ = ["BackgroundWrapper", "VectorBackgroundWrapper"]


class VectorBackgroundWrapper(VectorWrapper):
    """A background per environment of a gymnasium vector env of image observations.

    Args:
        env: a `gymnasium.vector.VectorEnv` whose observations are `(N, H, W, 3)` images, uint8
            or float 0..255 (numpy, or torch), or dicts holding them under `key`.
        backgrounds: a `mixshard.Backgrounds` of `env.num_envs` environments, `frames=1`:
            its pack, playback, clip order, seed and device.
        mask: which pixels stay: None (the background shows everywhere, at `alpha`), a builder
            of `mixshard.masks` (`green_screen`, `color_key` with its arguments bound by
            `functools.partial`, ...: called on the images), a colour key of `mixshard.keys`
            (`keys.color_key((0, 0, 0))`: made inside the composite's pass, the cheapest), or
            a callable of `(obs, info)` as the environment returned them, giving a bool or
            float keep mask `(N, H, W)` or `(N, H, W, 1)` (numpy or torch; true keeps the
            observation), or a key of the step's map (`keys.from_segmentation(ids, ...)`).
        key: the image's key in dict observations (None: the observations are the images).
        alpha: the backgrounds' weight where they show (a float, or an `(N,)` tensor).

    Raises:
        TypeError, ValueError: an `env` without image observations, a `key` it does not
            have, `backgrounds` of another number of environments (all before any step);
            a mask of another shape, at the first `reset`.
    """

    def __init__(
        self,
        env: VectorEnv,
        backgrounds: Backgrounds,
        mask: Mask | None = None,
        *,
        key: str | None = None,
        alpha: float | torch.Tensor = 1.0,
    ) -> None:
        if not isinstance(env, VectorEnv):
            raise TypeError(
                f"VectorBackgroundWrapper wraps a gymnasium.vector.VectorEnv, got "
                f"{type(env).__name__} (one gymnasium.Env: use BackgroundWrapper)"
            )
        super().__init__(env)
        n = env.num_envs
        self._screen = _screen(env, env.single_observation_space, backgrounds, mask, key, alpha)
        self.backgrounds = backgrounds
        self.autoreset_mode = _autoreset_mode(env)
        self._pending = np.zeros(n, dtype=bool)  # NEXT_STEP: these reset at the next step
        self._started = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the environments (all, or `options["reset_mask"]`'s) and their backgrounds."""
        mask = None if options is None else options.get("reset_mask")  # the env pops it
        obs, info = self.env.reset(seed=seed, options=options)
        if not self._started:  # the first episodes are each environment's episode 0
            self._started = True
        elif mask is None:
            self.backgrounds.reset()
        else:
            self.backgrounds.reset(mask)
        if mask is None:
            self._pending[:] = False
        else:
            self._pending &= ~np.asarray(mask, dtype=bool)
        return self._screen(obs, info), info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step the environments and their clips; backgrounds change where episodes do."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        done = _flags(terminated) | _flags(truncated)
        bg = self.backgrounds
        bg.step()
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            if self._pending.any():  # these returned their reset observations
                bg.reset(self._pending)
            self._pending = done
        elif self.autoreset_mode == AutoresetMode.SAME_STEP and done.any():
            info = self._finals(obs, info, done)
            bg.reset(done)
        return self._screen(obs, info), reward, terminated, truncated, info

    def _finals(self, obs: Any, info: dict[str, Any], done: np.ndarray) -> dict[str, Any]:
        """SAME_STEP: `info["final_obs"]` (the ended episodes' last observations) composited
        with the backgrounds of the episodes they end, before those are reset."""
        finals = info.get("final_obs")
        if finals is None:  # a vector env that does not hand them out
            return info
        which = np.flatnonzero(done)
        batch = _with_rows(obs, {int(i): finals[i] for i in which})
        out = self._screen(batch, info)
        kept = finals.copy()
        for i in which:
            kept[i] = _row(out, int(i))
        return {**info, "final_obs": kept}

    def state_dict(self) -> dict[str, Any]:
        """The backgrounds' state, whether the first reset was, and (NEXT_STEP) which
        environments reset at the next step: with the environment restored too,
        `load_state_dict` shows the same frames from there on."""
        return {
            "backgrounds": self.backgrounds.state_dict(),
            "started": self._started,
            "pending": torch.from_numpy(self._pending.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict` (checked before anything changes)."""
        _check_wrapper_state(state, pending=True)
        pending = _check_pending(state["pending"], self.num_envs)
        self.backgrounds.load_state_dict(state["backgrounds"])
        self._started, self._pending = state["started"], pending


class BackgroundWrapper(gymnasium.Wrapper):
    """A background behind one gymnasium environment's image observations.

    As `VectorBackgroundWrapper` for one environment: `backgrounds` is a `mixshard.Backgrounds`
    of one environment (`frames=1`); a mask callable gets one `(obs, info)` and gives `(H, W)`
    or `(H, W, 1)`. Each `reset` after the first starts the background's next episode, each
    `step` plays its clip on. Copies of this wrapper in a vector env would play the same
    backgrounds (each its environment 0): wrap the vector env instead.
    """

    def __init__(
        self,
        env: gymnasium.Env,
        backgrounds: Backgrounds,
        mask: Mask | None = None,
        *,
        key: str | None = None,
        alpha: float = 1.0,
    ) -> None:
        if isinstance(env, VectorEnv) or not isinstance(env, gymnasium.Env):
            raise TypeError(
                f"BackgroundWrapper wraps one gymnasium.Env, got {type(env).__name__} (a vector "
                f"env: use VectorBackgroundWrapper)"
            )
        super().__init__(env)
        self._screen = _screen(env, env.observation_space, backgrounds, mask, key, alpha)
        self.backgrounds = backgrounds
        self._started = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the environment; every reset but the first starts the next background."""
        obs, info = self.env.reset(seed=seed, options=options)
        if self._started:
            self.backgrounds.reset()
        self._started = True
        return self._screen(obs, info, single=True), info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step the environment, and its background's clip with it."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.backgrounds.step()
        return self._screen(obs, info, single=True), reward, terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        """The background's state and whether the first reset was."""
        return {"backgrounds": self.backgrounds.state_dict(), "started": self._started}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict` (checked before anything changes)."""
        _check_wrapper_state(state, pending=False)
        self.backgrounds.load_state_dict(state["backgrounds"])
        self._started = state["started"]


def _name(env: Any) -> str:
    """The environment's id (`HalfCheetah-v5`), or its class's name."""
    spec = getattr(env, "spec", None)
    return getattr(spec, "id", None) or type(env).__name__


def _image_shape(space: Any, key: Any, name: str) -> tuple[int, int]:
    """`(H, W)` of one environment's image observations, or the error that says why not."""
    boxes = gymnasium.spaces
    if isinstance(space, boxes.Dict):
        keys = ", ".join(repr(k) for k in space.spaces)
        if key is None:
            raise ValueError(
                f"{name}'s observations are a dict ({keys}): pass key= the one holding the image"
            )
        if key not in space.spaces:
            raise ValueError(f"key={key!r} is not an observation of {name}: it has {keys}")
        space = space.spaces[key]
    elif key is not None:
        raise ValueError(
            f"key={key!r} picks the image of dict observations, but {name}'s are {space}: "
            f"leave key out"
        )
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if (
        not isinstance(space, boxes.Box)
        or shape is None
        or len(shape) != 3
        or shape[2] != 3
        or not (dtype == np.uint8 or np.issubdtype(dtype, np.floating))
    ):
        which = f"[{key!r}] " if key is not None else ""
        raise ValueError(
            f"{name}'s observations {which}are {space}, not images (H, W, 3) uint8 or float "
            f"0..255: render them with gymnasium.wrappers.AddRenderObservation(env, "
            f"render_only=True) (make_vec: wrappers=[...])"
        )
    return int(shape[0]), int(shape[1])


def _autoreset_mode(env: Any) -> AutoresetMode:
    """The vector env's autoreset mode (`metadata`; gymnasium's default where none is said)."""
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    try:
        return AutoresetMode(mode)
    except ValueError:
        raise ValueError(
            f"{_name(env)}'s metadata['autoreset_mode'] is {mode!r}, not one of gymnasium's "
            f"AutoresetMode ({', '.join(m.value for m in AutoresetMode)})"
        ) from None


def _flags(flags: Any) -> np.ndarray:
    """`terminated` or `truncated` of a vector env as a numpy bool array (a torch one's read
    to the host: which environments reset is the host's business here)."""
    if isinstance(flags, torch.Tensor):
        flags = flags.detach().cpu().numpy()
    return np.asarray(flags, dtype=bool)


def _with_rows(obs: Any, rows: dict[int, Any]) -> Any:
    """A copy of the batch `obs` (an array, tensor or dict of them) with rows replaced."""
    if isinstance(obs, dict):
        return {k: _with_rows(v, {i: r[k] for i, r in rows.items()}) for k, v in obs.items()}
    out = obs.clone() if isinstance(obs, torch.Tensor) else np.array(obs, copy=True)
    for i, row in rows.items():
        out[i] = torch.as_tensor(row) if isinstance(out, torch.Tensor) else row
    return out


def _row(obs: Any, i: int) -> Any:
    """Row `i` of a batch (an array, tensor or dict of them)."""
    return {k: _row(v, i) for k, v in obs.items()} if isinstance(obs, dict) else obs[i]


def _screen(env: Any, space: Any, backgrounds: Any, mask: Any, key: Any, alpha: Any) -> Screen:
    """The `Screen` of a gymnasium environment (one, or a vector env's), its space checked."""
    name = _name(env)
    _image_shape(space, key, name)
    n = env.num_envs if isinstance(env, VectorEnv) else 1
    return Screen(backgrounds, mask, key=key, alpha=alpha, num_envs=n, name=name)


def _check_wrapper_state(state: Any, pending: bool) -> None:
    """A wrapper's `state_dict()` checked (the backgrounds' part is `Backgrounds`' to check)."""
    keys = {"backgrounds", "started"} | ({"pending"} if pending else set())
    if not isinstance(state, dict) or set(state) != keys:
        given = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"state must be the wrapper's state_dict() ({sorted(keys)}), got {given}")
    if not isinstance(state["started"], bool):
        raise TypeError(f"state['started'] must be True or False, got {state['started']!r}")


def _check_pending(pending: Any, n: int) -> np.ndarray:
    """A vector wrapper's `state["pending"]`: a bool tensor `(n,)`, as a numpy mask."""
    if not (
        isinstance(pending, torch.Tensor) and pending.dtype == torch.bool and pending.shape == (n,)
    ):
        raise ValueError(f"state['pending'] must be a bool tensor of shape ({n},), got {pending!r}")
    return pending.cpu().numpy().copy()

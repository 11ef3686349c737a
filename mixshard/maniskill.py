"""ManiSkill3: a background per parallel environment, where ManiSkill's green screen pastes one.

`ManiSkillBackgrounds` pastes a `mixshard.Backgrounds` where a digital twin pastes one static
image: each environment its own image or clip, redrawn when that environment resets
(docs/simulators.md, "ManiSkill3", has the lines and the rules). An optional extra (`pip
install "mixshard[maniskill]"`); `import mixshard` never imports it, and this module imports
neither ManiSkill nor SAPIEN: it reads the env's observations and its `segmentation_id_map`.
Observations stay ManiSkill's: `(N, H, W, 3)` uint8 rgb and `(N, H, W, 1)` int16 segmentation
per camera under `obs["sensor_data"]`, on the env's device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .augment.backgrounds import Backgrounds
from .augment.masks import builders as masks

__all__ = ["ManiSkillBackgrounds"]


def _gymnasium_wrapper() -> Any:
    """gymnasium's `Wrapper`, or `object` where gymnasium is not installed: the module still
    imports (the API's checks import every module); making a wrapper then says what to
    install."""
    try:
        from gymnasium import Wrapper
    except ImportError:
        return object
    return Wrapper


_Wrapper: Any = _gymnasium_wrapper()


class ManiSkillBackgrounds(_Wrapper):
    """Each parallel environment's own background behind the robot and the objects it keeps.

    Wraps the env `gym.make` returns (batched: the GPU simulation's `num_envs`, or one on the
    CPU), under `ManiSkillVectorEnv` when autoresets are wanted. Every camera observation with
    `rgb` and `segmentation` (`obs_mode="rgb+segmentation"`) gets its environment's background
    where the segmentation id is not kept.

    Args:
        env: a ManiSkill3 env (`gym.make(..., obs_mode="rgb+segmentation")`, any wrappers).
        backgrounds: a `mixshard.Backgrounds` with `num_envs` of the env, `frames=1`, on the
            env's device (one for every camera), or a mapping of camera names to one each.
        keep: what stays in front: ManiSkill objects (an articulation keeps its links, an actor
            or a link itself) and integer segmentation ids. None keeps what the env's own green
            screen keeps (a digital twin's `remove_object_from_greenscreen` objects), and
            elsewhere every articulation's links and every dynamic actor: the robot and what
            moves stay, the static scene (ground, table, walls) and id 0 are replaced.
        background: instead of `keep`, what is replaced (objects or ids; `[0]`: only the
            empty background), everything else kept.
        cameras: the cameras to composite (default every camera that has rgb and
            segmentation, or the mapping's cameras).
        alpha: the background's weight where it shows: a float in [0, 1] or an `(N,)` tensor.

    Raises:
        ImportError: gymnasium is not installed.
        TypeError, ValueError: an env that is not a ManiSkill env with camera observations, a
            camera without rgb or segmentation, backgrounds of another size, frame count or
            device, or keep objects that are not ManiSkill objects or ids: before any step.
    """

    def __init__(
        self,
        env: Any,
        backgrounds: Backgrounds | Mapping[str, Backgrounds],
        *,
        keep: Iterable[Any] | None = None,
        background: Iterable[Any] | None = None,
        cameras: Iterable[str] | None = None,
        alpha: float | torch.Tensor = 1.0,
    ) -> None:
        if _Wrapper is object:
            raise ImportError(
                "ManiSkillBackgrounds needs gymnasium and ManiSkill3: "
                'pip install "mixshard[maniskill]"'
            )
        _check_env(env)
        super().__init__(env)
        base = env.unwrapped
        self.num_envs = int(base.num_envs)
        self.device = torch.device(base.device)
        if keep is not None and background is not None:
            raise ValueError("give keep= (what stays) or background= (what is replaced), not both")
        chosen = keep if keep is not None else background
        self._chosen = None if chosen is None else list(chosen)
        self._replaced = background is not None
        self._by_camera = _cameras(base, backgrounds, cameras, self.num_envs, self.device)
        self._unique = list({id(b): b for b in self._by_camera.values()}.values())
        self.alpha = alpha
        self._map: object = None
        self._ids = torch.empty(0, dtype=torch.int16, device=self.device)

    # -- the gymnasium calls -----------------------------------------------------------------

    def reset(self, *, seed: Any = None, options: dict | None = None) -> tuple[Any, Any]:
        """The env's reset, and a new background for every environment it resets: those of
        `options["env_idx"]` (a partial reset), or all."""
        obs, info = self.env.reset(seed=seed, options=options)
        index = (options or {}).get("env_idx")
        for bg in self._unique:
            if index is None:
                bg.reset()
            else:
                bg.reset(index=index)
        return self._paste(obs), info

    def step(self, action: Any) -> tuple[Any, ...]:
        """The env's step, each background clip advanced with it."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        for bg in self._unique:
            bg.step()
        return self._paste(obs), reward, terminated, truncated, info

    def state_dict(self) -> list[dict[str, Any]]:
        """Each `Backgrounds`' state (one per distinct object, cameras' order)."""
        return [bg.state_dict() for bg in self._unique]

    def load_state_dict(self, state: list[dict[str, Any]]) -> None:
        """Continue from a `state_dict`: the same frames as where it was taken."""
        if not isinstance(state, list) or len(state) != len(self._unique):
            raise ValueError(
                f"state must be the list state_dict() gives ({len(self._unique)} entries), "
                f"got {type(state).__name__}"
            )
        for bg, one in zip(self._unique, state):
            bg.load_state_dict(one)

    # -- the paste ---------------------------------------------------------------------------

    def kept_ids(self) -> torch.Tensor:
        """The segmentation ids in front (or, with `background=`, those replaced), as the env's
        current scene numbers them (read again after a reconfiguration)."""
        base = self.env.unwrapped
        current = base.segmentation_id_map  # (ManiSkill makes a new one when it reconfigures)
        if current is not self._map:
            ids = _resolve(base, current, self._chosen)
            self._ids = ids.to(device=self.device, dtype=torch.int16)
            self._map = current
        return self._ids

    def _paste(self, obs: Any) -> Any:
        ids = self.kept_ids()
        for camera, bg in self._by_camera.items():
            data = obs["sensor_data"][camera]
            keep = _keep_mask(data["segmentation"], ids, self._replaced)
            data["rgb"] = _composite_nhwc(bg, data["rgb"], keep, self.alpha)
        return obs


def _check_env(env: Any) -> None:
    from gymnasium import Env

    if not isinstance(env, Env):
        kind = type(env).__name__
        fix = (
            ": wrap the env inside it, ManiSkillVectorEnv(ManiSkillBackgrounds(env, bg))"
            if kind == "ManiSkillVectorEnv"
            else ""
        )
        raise TypeError(f"env must be a ManiSkill3 gymnasium.Env, got {kind}{fix}")
    base = env.unwrapped
    if not hasattr(base, "segmentation_id_map") or not hasattr(base, "num_envs"):
        raise TypeError(
            f"env must be a ManiSkill3 env (gym.make of a ManiSkill task), got "
            f"{type(base).__name__}, which has no segmentation_id_map or num_envs"
        )


def _cameras(
    base: Any,
    backgrounds: Backgrounds | Mapping[str, Backgrounds],
    cameras: Iterable[str] | None,
    n: int,
    device: torch.device,
) -> dict[str, Backgrounds]:
    """camera name -> its `Backgrounds`, each checked against the env's observation space."""
    space = base.single_observation_space
    mode = getattr(base, "obs_mode", "?")
    # (a gymnasium space's `in` asks whether a value is a sample of it: the names are listed)
    sensors = space["sensor_data"] if "sensor_data" in list(space.keys()) else None
    if sensors is None or not list(sensors.keys()):
        raise ValueError(
            f"env has no camera observations (obs_mode={mode!r}): make it with "
            f"obs_mode='rgb+segmentation'"
        )
    if isinstance(backgrounds, Mapping):
        names = list(backgrounds) if cameras is None else list(cameras)
        chosen = {c: backgrounds[c] for c in names if c in backgrounds}
        missing = [c for c in names if c not in backgrounds]
        if missing:
            raise ValueError(f"cameras {missing} have no Backgrounds in the mapping")
    else:
        names = list(cameras) if cameras is not None else _pasteable(sensors)
        chosen = dict.fromkeys(names, backgrounds)
    for camera, bg in chosen.items():
        _check_camera(sensors, camera, mode)
        _check_backgrounds(bg, camera, n, device)
    if not chosen:
        raise ValueError(
            f"no camera has both rgb and segmentation (obs_mode={mode!r}, cameras "
            f"{list(sensors.keys())}): make the env with obs_mode='rgb+segmentation'"
        )
    return chosen


def _pasteable(sensors: Any) -> list[str]:
    names = list(sensors.keys())
    return [c for c in names if {"rgb", "segmentation"} <= set(sensors[c].keys())]


def _check_camera(sensors: Any, camera: str, mode: str) -> None:
    names = list(sensors.keys())
    if camera not in names:
        raise ValueError(f"camera {camera!r} is not one of the env's: {names}")
    given = sorted(sensors[camera].keys())
    if not {"rgb", "segmentation"} <= set(given):
        raise ValueError(
            f"camera {camera!r} gives {given} (obs_mode={mode!r}); the background needs rgb "
            f"and segmentation: make the env with obs_mode='rgb+segmentation'"
        )
    rgb = tuple(sensors[camera]["rgb"].shape)
    if rgb[-1] != 3:
        raise ValueError(f"camera {camera!r} gives rgb of shape {rgb}; expected (H, W, 3)")


def _check_backgrounds(bg: Any, camera: str, n: int, device: torch.device) -> None:
    if not isinstance(bg, Backgrounds):
        raise TypeError(
            f"backgrounds must be a mixshard.Backgrounds (or a mapping of cameras to them), "
            f"got {type(bg).__name__} for camera {camera!r}"
        )
    if bg.num_envs != n or bg.frames != 1 or bg.device != device:
        raise ValueError(
            f"camera {camera!r}: Backgrounds has num_envs={bg.num_envs}, frames={bg.frames}, "
            f"device={bg.device}; the env needs num_envs={n}, frames=1, device={str(device)!r}"
        )


def _resolve(base: Any, id_map: Mapping[int, Any], chosen: list[Any] | None) -> torch.Tensor:
    """The ids of `chosen` objects and ids; with nothing chosen, the env's own green-screen
    ids, or else its articulations' links and dynamic actors."""
    if chosen is not None:
        return torch.cat([torch.zeros(0, dtype=torch.int64), *(_ids_of(x) for x in chosen)])
    own = getattr(base, "_segmentation_ids_to_keep", None)  # a digital twin's
    if isinstance(own, torch.Tensor):
        return own.flatten()
    moving = [
        obj.per_scene_id
        for obj in id_map.values()
        # (an actor has a body type; a link, part of an articulation, has none)
        if getattr(obj, "px_body_type", "dynamic") == "dynamic"
    ]
    return torch.cat([torch.as_tensor(i).flatten() for i in moving]) if moving else torch.zeros(0)


def _ids_of(x: Any) -> torch.Tensor:
    """The segmentation ids of one `keep=`/`background=` entry, in every sub-scene."""
    if isinstance(x, int) and not isinstance(x, bool):
        return torch.tensor([x])
    if isinstance(x, torch.Tensor) and not (x.is_floating_point() or x.dtype == torch.bool):
        return x.flatten().cpu()
    links = getattr(x, "links", None)
    if links is not None:  # an articulation: a robot, a cabinet
        return torch.cat([_ids_of(link) for link in links])
    ids = getattr(x, "per_scene_id", None)
    if isinstance(ids, torch.Tensor):
        return ids.flatten().cpu()
    raise TypeError(
        f"keep and background take ManiSkill actors, links and articulations, and integer "
        f"segmentation ids; got {type(x).__name__} {x!r}"
    )


def _keep_mask(seg: torch.Tensor, ids: torch.Tensor, replaced: bool) -> torch.Tensor:
    """`(N, H, W, 1)` bool: true where the observation stays."""
    if replaced:
        return masks.from_segmentation(seg, background=ids, layout="NHWC")
    return masks.from_segmentation(seg, ids, layout="NHWC")


def _composite_nhwc(
    bg: Backgrounds, rgb: torch.Tensor, keep: torch.Tensor, alpha: float | torch.Tensor
) -> torch.Tensor:
    """`bg.composite` on channels-last rgb `(N, H, W, 3)` and keep `(N, H, W, 1)`."""
    return bg.composite(rgb, keep, alpha, layout="NHWC")

"""A drop-in for DMC-GB2's video modes (`envs/dmcgb/dmcgb_photometric.py`, its
`ColorVideoWrapper` with `mode="video_easy"` or `"video_hard"`), from clip packs.

DMC-GB2 projects its videos onto a box behind the agent: it rebuilds the domain's MJCF with a
`projector` texture (type skybox, 512 px, the model's texture 2), a material of it and a box
site `video_screen` of that material, and at every reset decodes a whole video with OpenCV,
resizes each frame to its `video_render_size` (256) with PIL's `Image.resize` (its default for
RGB: bicubic, antialiased) and shrinks texture 2 to that size; at the reset and at every step it
writes the next frame into the texture and uploads it (`mjr_uploadTexture`). This wrapper
builds the same scene and plays the same frames from a clip pack packed at the texture's size
with PIL's filter (`make dmcgb2-videos`: `--clips --crop full --size 256 --resample bicubic`,
PIL's bytes): a reset copies one frame out of the pack, as does a step (`textures.clipreads`).

Its schedule, as DMC-GB2's (facts of its code, reproduced here):

- one draw, when the wrapper is made: `np.random.RandomState(seed).randint(100)`, whose value
  modulo the clip count (10 or 100) is the video index; each reset first moves it on by one, so
  the first episode plays clip `(draw + 1) % n`;
- a reset shows frame 0; each step the next, wrapping at the clip's end; the counter is set to
  0 only by `reset()`: when the wrapped environment starts an episode by itself (a step after
  the last), the clip and the counter carry on, as DMC-GB2's do;
- `video_hard` makes material `grid`'s alpha 0 at every reset (the floor hidden);
- in `walker` and `cheetah` the box follows the torso's centre of mass (offsets x 0 / -0.05,
  z -1.07 / 0.15) after every reset and step, before the render.

Other modes are DMC-GB2's own: `video_modes(ColorVideoWrapper)` makes this wrapper for the two
video modes and DMC-GB2's class for the rest (its colours, `color_video_*`, the geometric ones).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import numpy as np

from .core.constants import RESAMPLE_MODES
from .core.errors import MixshardError
from .core.presets import select_clips
from .datasets import pack_folder
from .textures.clipreads import ClipFrames
from .textures.target import FrameWriter, TextureTarget, Upload, physics_upload, raw_model

MODES = ("video_easy", "video_hard")
DMCGB2_RESAMPLE = RESAMPLE_MODES[2]  # PIL's bicubic: how DMC-GB2 resizes its frames
SCREEN_TEXTURE = 2  # DMC-GB2's `_SKY_TEXTURE_INDEX`: the projector in its rebuilt model
STARTS = 100  # its first draw: `randint(100)`
MATERIALS, SKYBOX = "./common/materials.xml", "./common/skybox.xml"
# DMC-GB2's box per domain: (size, pos, euler) of site `video_screen`
SCREENS = {
    "walker": ("1.86 0.1 1.86", "0.0 1.96 -0.7", "-30 0 0"),
    "cheetah": ("1.86 0.1 1.86", "0.0 1.6 -0.7", "0 0 0"),
    "cartpole": ("1.86 0.1 1.86", "0.0 0.5 1.0", "0 0 0"),
    "ball_in_cup": ("0.66 0.1 0.66", "0.0 0.5 0.05", "-27 0 0"),
    "finger": ("0.66 0.1 0.66", "0.0 0.5 0.05", "-27 0 0"),
}
FOLLOW = {"walker": (0.0, -1.07), "cheetah": (-0.05, 0.15)}  # the box's (x, z) off the torso


def with_screen(model_xml: str | bytes, assets: dict, domain: str) -> tuple[str, dict]:
    """DMC-GB2's rebuilt scene: texture `projector` (skybox, builtin flat, 512 px, no mark)
    after material file's first texture, material `projector` last, and for the five domains
    of `SCREENS` the box site `video_screen` last in the worldbody. Returns the model's XML and
    the assets (bytes), the materials file rewritten.

    Raises:
        MixshardError: the assets lack the suite's materials file.
    """
    if MATERIALS not in assets:
        raise MixshardError(
            f"the assets lack {MATERIALS!r} (they hold {', '.join(map(repr, assets)) or 'none'}):"
            f" DMC-GB2 puts its projector texture into dm_control suite's materials"
        )
    materials = ET.fromstring(assets[MATERIALS])
    asset = materials.find("asset")
    if asset is None:
        asset = ET.SubElement(materials, "asset")
    textures = asset.findall("texture")
    spec = dict(name="projector", type="skybox", builtin="flat", width="512", height="512")
    texture = ET.Element("texture", dict(spec, mark="none"))
    asset.insert(list(asset).index(textures[0]) + 1 if textures else 0, texture)
    look = dict(texuniform="false", specular="0", shininess="0", reflectance="0", emission="0")
    ET.SubElement(asset, "material", dict(name="projector", texture="projector", **look))
    model = ET.fromstring(model_xml)
    if domain in SCREENS:
        size, pos, euler = SCREENS[domain]
        body = model.find("worldbody")
        if body is None:
            body = ET.SubElement(model, "worldbody")
        site = dict(name="video_screen", type="box", size=size, pos=pos, euler=euler)
        ET.SubElement(body, "site", dict(site, material="projector"))
    out = {k: (v if isinstance(v, bytes) else str(v).encode()) for k, v in assets.items()}
    out[MATERIALS] = ET.tostring(materials)
    return ET.tostring(model, encoding="unicode"), out


def suite_model(domain: str) -> tuple[bytes, dict]:
    """The domain's MJCF and assets as DMC-GB2 reads them (dm_control suite's `common`)."""
    from dm_control.suite import common  # the benchmark's dependency, not mixshard's

    name = "ball_in_cup" if domain == "cup" else domain
    return common.read_model(f"{name}.xml"), dict(common.ASSETS)


def _open_clips(mode: str, size: int, dataset_path: str | os.PathLike | None) -> ClipFrames:
    """The pack of `mode` (`dataset_path`, else `$MIXSHARD_DATA/dmcgb2-<mode>-<size>` or
    `dmcgb2-<mode>`), checked to hold `size` px frames resized as DMC-GB2 resizes.

    Raises:
        MixshardError: no such pack, an image pack, frames of another size, resized with
            another filter, or not every frame in colour.
    """
    path = dataset_path or pack_folder(f"dmcgb2-{mode}", (size, size))
    clips = ClipFrames(path)
    resample = clips.manifest.options.get("resample")
    problem = None
    if clips.size != size:
        problem = (
            f"{clips.origin} holds {clips.size} px frames but DMC-GB2's texture is {size} px "
            f"(video_render_size): pack its videos at {size} px (`make dmcgb2-videos ... "
            f"SIZE={size}`); it resizes each decoded frame once, to the texture"
        )
    elif resample != DMCGB2_RESAMPLE:
        problem = (
            f"{clips.origin} was resized with {resample!r}, not PIL's bicubic "
            f"({DMCGB2_RESAMPLE!r}, as DMC-GB2 resizes): pack it again with `make "
            f"dmcgb2-videos ... REPACK=1` (--resample {DMCGB2_RESAMPLE})"
        )
    o = clips.manifest.options
    if problem is None and (o.get("every", 1) != 1 or o.get("max_frames") or o.get("grey")):
        kept = f"every={o.get('every', 1)}, max_frames={o.get('max_frames')}"
        problem = (
            f"{clips.origin} keeps only some frames or their grey ({kept}, "
            f"grey={bool(o.get('grey'))}): DMC-GB2 plays every frame of each video in colour "
            f"(`make dmcgb2-videos` packs them so)"
        )
    if problem is not None:
        clips.close()
        raise MixshardError(problem)
    return clips


class ColorVideoWrapper:
    """DMC-GB2's `ColorVideoWrapper(env, mode, seed, video_render_size=256)` for its video
    modes, playing its videos from a clip pack (module docstring).

    Args:
        env: the dm_control environment DMC-GB2 wraps (its `_domain_name` set, as its `make`
            sets it; or pass `domain`).
        mode: `"video_easy"` (10 clips) or `"video_hard"` (100).
        seed: the seed of its one draw.
        video_render_size: the texture's side; the pack's frames must be this size.
        dataset_path: the clip pack (default: `$MIXSHARD_DATA/dmcgb2-<mode>`, `make
            dmcgb2-videos`).
        domain: the suite domain (default: `env._domain_name`).
        model: the domain's MJCF and assets (default: dm_control suite's, as DMC-GB2 reads).
        upload: renews texture `i` in the renderer (default: the physics' own context).

    Raises:
        ValueError: another mode (`video_modes` leaves those to DMC-GB2's class).
        MixshardError: no pack, an image pack, fewer clips than the mode's, frames of another
            size than `video_render_size`, or resized with another filter than PIL's bicubic.
    """

    def __init__(
        self,
        env: Any,
        mode: str,
        seed: int,
        video_render_size: int = 256,
        *,
        dataset_path: str | os.PathLike | None = None,
        domain: str | None = None,
        model: tuple[str | bytes, dict] | None = None,
        upload: Upload | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(
                f"mode must be one of {', '.join(MODES)} (got {mode!r}); video_modes(...) "
                "leaves the others to DMC-GB2's own class"
            )
        self._env, self._mode, self._seed = env, mode, seed
        self._domain_name = domain or env._domain_name
        self._random_state = np.random.RandomState(seed)
        self._video_render_size = int(video_render_size)
        self._clips = _open_clips(mode, self._video_render_size, dataset_path)
        try:
            self._setup(model, upload)
        except BaseException:
            self._clips.close()
            raise

    def _setup(self, model: tuple[str | bytes, dict] | None, upload: Upload | None) -> None:
        clips, size = self._clips, self._video_render_size
        name = f"dmcgb2-{self._mode}"
        self._selected = select_clips(name, clips.names, clips.origin, MixshardError)
        self._num_videos = len(self._selected)
        self._video_index = self._random_state.randint(STARTS) % self._num_videos
        self._current_video_frame, self._current_video_len = 0, 1
        xml, assets = model if model is not None else suite_model(self._domain_name)
        physics = self._env.physics
        physics.reload_from_xml_string(*with_screen(xml, assets, self._domain_name))
        target = TextureTarget(physics.model, SCREEN_TEXTURE, size)
        self._writer = FrameWriter(
            target, physics_upload(physics) if upload is None else upload, 1.0
        )
        self._grid = _material(physics.model, "grid") if self._mode == "video_hard" else None
        self._first = -1  # the pack image of the clip's frame 0 (none before the first reset)

    def reset(self) -> Any:
        """Reset the environment, then the video: the next clip, from frame 0."""
        time_step = self._env.reset()
        self._current_video_frame = 0
        if self._grid is not None:
            raw_model(self._env.physics.model).mat_rgba[self._grid, 3] = 0.0
        self._video_index = (self._video_index + 1) % self._num_videos
        clip = self._selected[self._video_index]
        self._first = int(self._clips.first[clip])
        self._current_video_len = int(self._clips.length[clip])
        self._apply_video()
        self._move_backcube()
        return time_step

    def step(self, action: Any) -> Any:
        time_step = self._env.step(action)
        self._apply_video()
        self._move_backcube()
        return time_step

    def _apply_video(self) -> None:
        """This frame into the texture and uploaded; the counter moves on, wrapping."""
        if self._first < 0:
            raise RuntimeError("ColorVideoWrapper: call reset() before step()")
        image = self._first + self._current_video_frame
        self._writer.show(self._clips.frame(image, self._writer.buffer))
        self._current_video_frame = (self._current_video_frame + 1) % self._current_video_len

    def _move_backcube(self) -> None:
        """In walker and cheetah, the box to the torso's centre of mass (DMC-GB2's offsets)."""
        if self._domain_name not in FOLLOW:
            return
        dx, dz = FOLLOW[self._domain_name]
        data = self._env.physics.data
        data = getattr(data, "ptr", data)
        com = data.body("torso").subtree_com
        xpos = data.site("video_screen").xpos
        xpos[0], xpos[2] = com[0] + dx, com[2] + dz

    def _render_high(self, size: int = 256, camera_id: int = 0) -> Any:
        """DMC-GB2's render at `size`, which must be the pack's (it would decode and resize the
        videos again at another size).

        Raises:
            MixshardError: `size` is not the texture's.
        """
        if size != self._video_render_size:
            raise MixshardError(
                f"{self._clips.origin} holds {self._clips.size} px frames; rendering at {size} "
                f"px needs a pack of {size} px frames (`make dmcgb2-videos SIZE={size}`)"
            )
        return self._env.physics.render(height=size, width=size, camera_id=camera_id)

    def observation_spec(self) -> Any:
        return self._env.observation_spec()

    def action_spec(self) -> Any:
        return self._env.action_spec()

    def close(self) -> None:
        """Close the pack, then the environment."""
        self._clips.close()
        close = getattr(self._env, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_env":
            raise AttributeError(name)
        return getattr(self._env, name)


def _material(model: Any, name: str) -> int:
    """The id of material `name`.

    Raises:
        MixshardError: the model has none of that name.
    """
    raw = raw_model(model)
    names = [raw.material(i).name for i in range(raw.nmat)]
    if name not in names:
        raise MixshardError(
            f"the model has no material {name!r}, whose alpha video_hard sets to 0 (its "
            f"materials: {', '.join(map(repr, names)) or 'none'})"
        )
    return names.index(name)


def video_modes(original: Callable[..., Any]) -> Callable[..., Any]:
    """DMC-GB2's class `original` with its video modes played from packs: a callable taking
    its arguments that makes `ColorVideoWrapper` for `video_easy` and `video_hard` and
    `original` for every other mode.

        dmcgb_photometric.ColorVideoWrapper = video_modes(dmcgb_photometric.ColorVideoWrapper)
    """

    def make(env: Any, mode: str, seed: int, video_render_size: int = 256) -> Any:
        if mode in MODES:
            return ColorVideoWrapper(env, mode, seed, video_render_size)
        return original(env, mode, seed, video_render_size=video_render_size)

    make.__doc__ = f"{getattr(original, '__name__', 'it')}, video modes from clip packs"
    return make

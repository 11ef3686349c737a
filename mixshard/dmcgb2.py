"""A drop-in for DMC-GB2's video and colour-video modes (`envs/dmcgb/dmcgb_photometric.py`,
its `ColorVideoWrapper` with `mode="video_easy"`, `"video_hard"`, `"color_video_easy"` or
`"color_video_hard"`), from clip packs.

DMC-GB2 projects its videos onto a box behind the agent and decodes and resizes a whole video
at every reset. This wrapper builds the same scene and plays the same frames, with DMC-GB2's
schedule, from a clip pack packed at the texture's size with PIL's filter (`make
dmcgb2-videos`): a reset or a step copies one frame out of the pack (`textures.clipreads`).
docs/migrating.md, "DMC-GB2's video modes", lists the scene, the packing and the schedule.

`video_modes(ColorVideoWrapper)` makes this wrapper for the four video modes and DMC-GB2's own
class for the rest (`color_easy`, `color_hard`; the geometric modes are another wrapper).
"""

from __future__ import annotations

import os
import types
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .core.constants import RESAMPLE_MODES
from .core.errors import MixshardError
from .core.presets import select_clips
from .datasets import pack_folder
from .textures.clipreads import ClipFrames
from .textures.target import (
    FrameWriter,
    TextureTarget,
    Upload,
    find_material,
    physics_upload,
    raw_model,
)

MODES = ("video_easy", "video_hard", "color_video_easy", "color_video_hard")
COLORS_AT_LEAST = 100  # DMC-GB2 asserts its colour lists hold at least 100
# DMC-GB2's colour keys and the attribute each sets (`grid_texrepeat`: material 0's)
COLOR_KEYS = {
    "grid_rgb1": "rgb1", "grid_rgb2": "rgb2", "grid_markrgb": "markrgb",
    "grid_texrepeat": "texrepeat", "skybox_rgb": "rgb1", "skybox_rgb2": "rgb2",
    "skybox_markrgb": "markrgb",
}  # fmt: skip
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


def with_screen(
    model_xml: str | bytes, assets: dict, domain: str, colors: Mapping[str, Any] | None = None
) -> tuple[str, dict]:
    """DMC-GB2's rebuilt scene: texture `projector` (skybox, builtin flat, 512 px, no mark)
    after material file's first texture, material `projector` last, and for the five domains
    of `SCREENS` the box site `video_screen` last in the worldbody; with `colors` (one of its
    colour dicts, `color_video_*`) the grid, `self` and the sky recoloured first (`recolour`).
    Returns the model's XML and the assets (bytes), the materials and skybox files rewritten.

    Raises:
        MixshardError: the assets lack the suite's materials file, or a file `colors` edits
            is not as DMC-GB2 asserts it.
    """
    if MATERIALS not in assets:
        raise MixshardError(
            f"the assets lack {MATERIALS!r} (they hold {', '.join(map(repr, assets)) or 'none'}):"
            f" DMC-GB2 puts its projector texture into dm_control suite's materials"
        )
    materials = ET.fromstring(assets[MATERIALS])
    skybox = recolour(materials, assets, colors or {})
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
    if skybox is not None:
        out[SKYBOX] = ET.tostring(skybox)
    return ET.tostring(model, encoding="unicode"), out


def _triple(values: Any, count: int = 3) -> str:
    """`count` values as DMC-GB2 writes them into an attribute (`f"{v[0]} {v[1]} {v[2]}"`)."""
    return " ".join(f"{values[i]}" for i in range(count))


def recolour(materials: ET.Element, assets: dict, colors: Mapping[str, Any]) -> Any:
    """DMC-GB2's colour edits (`_reformat_xml`) in place in the parsed materials file: the
    `grid_*` keys into its one texture (`grid`: rgb1, rgb2, markrgb) and its first material
    (texrepeat), `self_rgb` into its second (`self`: rgba, alpha 1); the `skybox_*` keys into
    the skybox file's one texture (`skybox`), which is returned parsed (None when untouched).
    Other keys are ignored, as DMC-GB2 ignores them.

    Raises:
        MixshardError: a file edited lacks the one texture or the material DMC-GB2 asserts.
    """
    grid = {k: a for k, a in COLOR_KEYS.items() if k.startswith("grid_") and k in colors}
    if grid:
        texture = _only(materials, "texture", "grid", MATERIALS)
    for key, attribute in grid.items():
        if key == "grid_texrepeat":  # its `material[0]`'s, two values
            _nth_material(materials, 0, None).set(attribute, _triple(colors[key], 2))
        else:
            texture.set(attribute, _triple(colors[key]))
    if "self_rgb" in colors:
        _nth_material(materials, 1, "self").set("rgba", _triple(colors["self_rgb"]) + " 1")
    sky = {k: a for k, a in COLOR_KEYS.items() if k.startswith("skybox_") and k in colors}
    if not sky:
        return None
    if SKYBOX not in assets:
        raise MixshardError(f"the assets lack {SKYBOX!r}, whose sky DMC-GB2 recolours")
    skybox = ET.fromstring(assets[SKYBOX])
    texture = _only(skybox, "texture", "skybox", SKYBOX)
    for key, attribute in sky.items():
        texture.set(attribute, _triple(colors[key]))
    return skybox


def _only(root: ET.Element, tag: str, name: str, file: str) -> ET.Element:
    """The one `<asset><tag>` of `root`, named `name` (as DMC-GB2 asserts)."""
    found = root.findall(f"asset/{tag}")
    if len(found) != 1 or found[0].get("name") != name:
        names = ", ".join(repr(e.get("name")) for e in found) or "none"
        raise MixshardError(
            f"{file} holds the {tag}s {names}; DMC-GB2 recolours a file of one {tag}, {name!r}"
        )
    return found[0]


def _nth_material(root: ET.Element, n: int, name: str | None) -> ET.Element:
    """Material `n` of the materials file (named `name` where DMC-GB2 asserts a name)."""
    found = root.findall("asset/material")
    if len(found) <= n or (name is not None and found[n].get("name") != name):
        names = ", ".join(repr(e.get("name")) for e in found) or "none"
        want = f"{name!r}" if name else "one"
        raise MixshardError(
            f"{MATERIALS} holds the materials {names}; DMC-GB2 recolours material {n} ({want})"
        )
    return found[n]


def suite_model(domain: str) -> tuple[bytes, dict]:
    """The domain's MJCF and assets as DMC-GB2 reads them (dm_control suite's `common`)."""
    from dm_control.suite import common  # the benchmark's dependency, not mixshard's

    name = "ball_in_cup" if domain == "cup" else domain
    return common.read_model(f"{name}.xml"), dict(common.ASSETS)


def _open_clips(mode: str, size: int, dataset_path: str | os.PathLike | None) -> ClipFrames:
    """The pack of videos `mode` (`video_easy` or `video_hard`: `dataset_path`, else
    `$MIXSHARD_DATA/dmcgb2-<mode>-<size>` or `dmcgb2-<mode>`), checked to hold `size` px
    frames resized as DMC-GB2 resizes.

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
    """DMC-GB2's `ColorVideoWrapper(env, mode, seed, video_render_size=256)` for its video and
    colour-video modes, playing its videos from a clip pack (module docstring).

    Args:
        env: the dm_control environment DMC-GB2 wraps (its `_domain_name` set, as its `make`
            sets it; or pass `domain`).
        mode: `"video_easy"` (10 clips), `"video_hard"` (100), `"color_video_easy"` or
            `"color_video_hard"` (the same clips, and the scene recoloured at every reset).
        seed: the seed of its one draw.
        video_render_size: the texture's side; the pack's frames must be this size.
        dataset_path: the clip pack (default: `$MIXSHARD_DATA/dmcgb2-video_<level>`, `make
            dmcgb2-videos`).
        domain: the suite domain (default: `env._domain_name`).
        model: the domain's MJCF and assets (default: dm_control suite's, as DMC-GB2 reads).
        upload: renews texture `i` in the renderer (default: the physics' own context).
        colors: the colour-video modes' colours, DMC-GB2's list of dicts (its
            `color_<level>.pt`, as its `_load_colors` loads it; `video_modes` loads it so).

    Raises:
        ValueError: another mode (`video_modes` leaves those to DMC-GB2's class).
        MixshardError: no pack, an image pack, fewer clips than the mode's, frames of another
            size than `video_render_size`, or resized with another filter than PIL's bicubic;
            no colours or fewer than 100 for a colour-video mode, colours for a video mode.
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
        colors: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(
                f"mode must be one of {', '.join(MODES)} (got {mode!r}); video_modes(...) "
                "leaves the others to DMC-GB2's own class"
            )
        self._env, self._mode, self._seed = env, mode, seed
        self._domain_name = domain or env._domain_name
        self._colors = _checked_colors(mode, colors)
        self._random_state = np.random.RandomState(seed)
        self._video_render_size = int(video_render_size)
        self._clips = _open_clips(_videos(mode), self._video_render_size, dataset_path)
        try:
            self._setup(model, upload)
        except BaseException:
            self._clips.close()
            raise

    def _setup(self, model: tuple[str | bytes, dict] | None, upload: Upload | None) -> None:
        clips = self._clips
        name = f"dmcgb2-{_videos(self._mode)}"
        self._selected = select_clips(name, clips.names, clips.origin, MixshardError)
        self._num_videos = len(self._selected)
        start = self._random_state.randint(STARTS)  # its one draw, for colours and videos
        self._color_index = start % len(self._colors) if self._colors else 0
        self._video_index = start % self._num_videos
        self._current_video_frame, self._current_video_len = 0, 1
        self._xml = model if model is not None else suite_model(self._domain_name)
        physics = self._env.physics
        self._upload = physics_upload(physics) if upload is None else upload
        self._rebuild(None)
        self._first = -1  # the pack image of the clip's frame 0 (none before the first reset)

    def _rebuild(self, colors: Mapping[str, Any] | None) -> None:
        """The physics reloaded from DMC-GB2's scene (recoloured with `colors`); the writer
        and video_hard's floor found in the new model. Texture 2 is checked to hold the
        video's size now, and keeps its own (512 x 3072 px) until the reset makes it the
        video's, as DMC-GB2's `_reset_background` does."""
        physics = self._env.physics
        physics.reload_from_xml_string(*with_screen(*self._xml, self._domain_name, colors))
        raw = raw_model(physics.model)
        own = int(raw.tex_width[SCREEN_TEXTURE]), int(raw.tex_height[SCREEN_TEXTURE])
        target = TextureTarget(raw, SCREEN_TEXTURE, self._video_render_size)
        raw.tex_width[SCREEN_TEXTURE], raw.tex_height[SCREEN_TEXTURE] = own
        self._writer = FrameWriter(target, self._upload, 1.0)
        self._grid = None
        if self._mode == "video_hard":
            self._grid = find_material(physics.model, "grid", "whose alpha video_hard sets to 0")

    def reset(self) -> Any:
        """Recolour (colour-video modes: the model rebuilt with the next colours), reset the
        environment, then the video: the next clip, from frame 0."""
        if self._colors is not None:
            self._rebuild(self._colors[self._color_index])
            self._color_index = (self._color_index + 1) % len(self._colors)
        time_step = self._env.reset()
        self._current_video_frame = 0
        raw = raw_model(self._env.physics.model)
        if self._grid is not None:
            raw.mat_rgba[self._grid, 3] = 0.0
        raw.tex_width[SCREEN_TEXTURE] = raw.tex_height[SCREEN_TEXTURE] = self._writer.target.size
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


def _videos(mode: str) -> str:
    """The videos a mode plays: `video_easy` or `video_hard` (DMC-GB2's `'easy' in mode`)."""
    return "video_easy" if "easy" in mode else "video_hard"


def _checked_colors(
    mode: str, colors: Sequence[Mapping[str, Any]] | None
) -> list[Mapping[str, Any]] | None:
    """`colors` as a colour-video mode takes them (None for a video mode).

    Raises:
        MixshardError: none or fewer than DMC-GB2 asserts for a colour mode, or some for a
            video mode.
    """
    level = "easy" if "easy" in mode else "hard"
    if not mode.startswith("color_"):
        if colors is not None:
            raise MixshardError(
                f"{mode} recolours nothing but {len(colors)} colours were given; pass colors= "
                f"with color_{mode} only"
            )
        return None
    if colors is None or len(colors) < COLORS_AT_LEAST:
        got = "none" if colors is None else len(colors)
        raise MixshardError(
            f"{mode} recolours the scene at every reset from DMC-GB2's colours, at least "
            f"{COLORS_AT_LEAST} (got {got}): pass colors= (its color_{level}.pt, a list of "
            "dicts), or make it with video_modes(ColorVideoWrapper), which loads them as it does"
        )
    return list(colors)


def dmcgb2_colors(original: Any, mode: str) -> Any:
    """The colours DMC-GB2's class `original` loads for `mode`: its own `_load_colors` (a
    `torch.load` of `color_<level>.pt` from its `dmcgb_data_dir`), run on a holder of `mode`.

    Raises:
        MixshardError: `original` has no `_load_colors`.
    """
    load = getattr(original, "_load_colors", None)
    if load is None:
        raise MixshardError(
            f"{getattr(original, '__name__', original)!r} has no _load_colors, DMC-GB2's loader "
            f"of the colours {mode} plays: make mixshard.dmcgb2.ColorVideoWrapper with colors="
        )
    holder = types.SimpleNamespace(_mode=mode)
    load(holder)
    return holder._colors


def video_modes(original: Callable[..., Any]) -> Callable[..., Any]:
    """DMC-GB2's class `original` with its video and colour-video modes played from packs: a
    callable taking its arguments that makes `ColorVideoWrapper` for the four modes of `MODES`
    (the colour ones with the colours `original` loads, `dmcgb2_colors`) and `original` for
    every other mode.

        dmcgb_photometric.ColorVideoWrapper = video_modes(dmcgb_photometric.ColorVideoWrapper)
    """

    def make(env: Any, mode: str, seed: int, video_render_size: int = 256) -> Any:
        if mode in MODES:
            colors = dmcgb2_colors(original, mode) if mode.startswith("color_") else None
            return ColorVideoWrapper(env, mode, seed, video_render_size, colors=colors)
        return original(env, mode, seed, video_render_size=video_render_size)

    make.__doc__ = f"{getattr(original, '__name__', 'it')}, video modes from clip packs"
    return make

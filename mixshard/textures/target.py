"""The MuJoCo texture a player writes frames into: found by name (or the model's skybox),
checked against the frames' size before the first episode, written as RGB rows in place in the
model's texture buffer and uploaded to the renderer.

MuJoCo keeps every texture in one byte buffer, `tex_data` (`tex_rgb` before MuJoCo 3), texture
`i` at `tex_adr[i]`, `tex_height[i]` rows of `tex_width[i]` pixels of `tex_nchannel[i]` bytes;
a skybox's `6 * width` rows become one square face, as DCS sets them (docs/design.md,
"Backgrounds in MuJoCo textures"). The renderer's copy is renewed by `mjr_uploadTexture`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.errors import MixshardError

TEXTURE_2D, TEXTURE_CUBE, TEXTURE_SKYBOX = 0, 1, 2  # mujoco.mjtTexture
Upload = Callable[[int], None]  # renews texture `i` in the renderer


def raw_model(model: Any) -> Any:
    """The `mujoco.MjModel` of `model` (dm_control's wrapper holds it in `.ptr`)."""
    return getattr(model, "ptr", model)


def texture_buffer(model: Any) -> np.ndarray:
    """The model's texture bytes: `tex_data`, or `tex_rgb` in MuJoCo before 3.0."""
    raw = raw_model(model)
    data = getattr(raw, "tex_data", None)
    return raw.tex_rgb if data is None else data


def texture_names(model: Any) -> list[str]:
    raw = raw_model(model)
    return [raw.texture(i).name for i in range(raw.ntex)]


def find_material(model: Any, name: str, why: str, fix: str = "") -> int:
    """The id of material `name`, which the caller changes `why` (the error says it, then `fix`).

    Raises:
        MixshardError: the model has no such material (its materials are named).
    """
    raw = raw_model(model)
    names = [raw.material(i).name for i in range(raw.nmat)]
    if name not in names:
        raise MixshardError(
            f"the model has no material {name!r}, {why} (its materials: {_listed(names)}){fix}"
        )
    return names.index(name)


def find_texture(model: Any, name: str | int | None) -> int:
    """The id of texture `name` (a name, or an id as a benchmark hard-codes it), or of the
    model's first skybox texture when `name` is None.

    Raises:
        MixshardError: no such texture (the model's are named), or no skybox.
    """
    raw = raw_model(model)
    names = texture_names(raw)
    if isinstance(name, int) and not isinstance(name, bool):
        if not 0 <= name < len(names):
            raise MixshardError(
                f"the model has no texture {name}: it has {len(names)} ({_listed(names)})"
            )
        return name
    if name is None:
        skies = np.flatnonzero(np.asarray(raw.tex_type) == TEXTURE_SKYBOX)
        if not len(skies):
            raise MixshardError(
                f"the model has no skybox texture (its textures: {_listed(names)}); add "
                f'<texture type="skybox" .../> to its <asset> or pass texture=NAME'
            )
        return int(skies[0])
    if name not in names:
        raise MixshardError(
            f"the model has no texture named {name!r}; its textures are {_listed(names)}"
        )
    return names.index(name)


def _listed(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names) if names else "none"


class TextureTarget:
    """Texture `texture` (a name or an id; None: the skybox) of `model`, as a writable `(rows,
    width, 3)` uint8 view into the model's texture buffer (`pixels`). A skybox or cube texture
    of `6 * width` rows is made `width` rows high (one image on every face); with `size`, any
    texture is made `size` px square inside the bytes it has (as DMC-GB2 sets its screen's
    `tex_width` and `tex_height` to its video size).

    Raises:
        MixshardError: no such texture, no skybox, a texture not RGB, or not square, or too
            small for `size`.
    """

    def __init__(self, model: Any, texture: str | int | None = None, size: int | None = None):
        raw = self.model = raw_model(model)
        self.id = find_texture(raw, texture)
        self.name = raw.texture(self.id).name or f"texture {self.id}"
        width, height = int(raw.tex_width[self.id]), int(raw.tex_height[self.id])
        channels = int(raw.tex_nchannel[self.id]) if hasattr(raw, "tex_nchannel") else 3
        if channels != 3:
            raise MixshardError(
                f"texture {self.name!r} has {channels} channels; frames are written into RGB "
                f"textures (3 channels)"
            )
        if size is not None:
            width = height = self._square(width, height, size)
        elif int(raw.tex_type[self.id]) != TEXTURE_2D and height == 6 * width:
            height = width  # one image for every face, as the Distracting Control Suite does
            raw.tex_height[self.id] = height
        if height != width:
            raise MixshardError(
                f"texture {self.name!r} is {width} x {height} px; clip frames are square: "
                f"give the model a square texture (or a cube of 6 square faces)"
            )
        self.size = width
        start = int(raw.tex_adr[self.id])
        flat = texture_buffer(raw)[start : start + height * width * 3]
        self.pixels: np.ndarray = flat.reshape(height, width, 3)

    def _square(self, width: int, height: int, size: int) -> int:
        """Texture `self.id` made `size` px square (`width x height` px of bytes it has)."""
        if size < 1 or size * size > width * height:
            raise MixshardError(
                f"texture {self.name!r} holds {width} x {height} px; it cannot be made {size} "
                f"px square (at most {int((width * height) ** 0.5)} px)"
            )
        self.model.tex_width[self.id] = self.model.tex_height[self.id] = size
        return size

    def check_size(self, size: int, origin: str, resize: bool) -> None:
        """Frames of `size` px fit this texture, or are resized to it (`resize`).

        Raises:
            MixshardError: the sizes differ and `resize` is False.
        """
        if size != self.size and not resize:
            raise MixshardError(
                f"{origin} holds {size} px frames but texture {self.name!r} is {self.size} px: "
                f"pack the clips at {self.size} px (`mixshard pack SRC OUT --clips --size "
                f"{self.size}`) or pass resize=True (each clip resized as it is read)"
            )


def physics_upload(physics: Any) -> Upload:
    """The upload of a dm_control `physics`' texture `i`: `mjr_uploadTexture` in the physics'
    own OpenGL context, made current (as dm_control's renderer needs)."""
    import mujoco  # the simulator's own dependency, not mixshard's

    def upload(texture: int) -> None:
        with physics.contexts.gl.make_current() as ctx:
            ctx.call(
                mujoco.mjr_uploadTexture,
                physics.model.ptr,
                physics.contexts.mujoco.ptr,
                texture,
            )

    return upload


class FrameWriter:
    """Shows frames in a `TextureTarget` and uploads it: a frame blended over the background at
    `alpha` as the Distracting Control Suite blends (`alpha * frame + (1 - alpha) *
    background` in float32, truncated to uint8), copied as it is at `alpha == 1`, the
    background alone at `alpha == 0` or for no frame. The background is the texture as it is
    when made, or at `set_background` (the blend's background half is computed there, once an
    episode); the texture holds it already where it shows it, so that is only uploaded.
    `buffer` is where to put a frame: the texture itself at `alpha == 1` (no copy)."""

    def __init__(self, target: TextureTarget, upload: Upload, alpha: float) -> None:
        self.target, self.upload, self.alpha = target, upload, float(alpha)
        self._alpha = np.float32(alpha)
        self._blends = 0.0 < self.alpha < 1.0
        shape = target.pixels.shape
        self._part = np.empty(shape if self._blends else (0,), np.float32)  # (1 - a) * bg
        self._sum = np.empty(shape if self._blends else (0,), np.float32)
        self.buffer = target.pixels if self.alpha == 1.0 else np.empty_like(target.pixels)
        self.set_background(target.pixels)

    def set_background(self, pixels: np.ndarray) -> None:
        """Blend over `pixels` from now on (the texture's own pixels, as they are now)."""
        if self._blends:
            np.multiply(pixels, np.float32(1.0 - self.alpha), out=self._part)

    def show(self, frame: np.ndarray | None) -> None:
        """Show `frame` (`(size, size, 3)` uint8, maybe `buffer`; None: the background) and
        upload the texture."""
        pixels = self.target.pixels
        if frame is not None and self._blends:
            np.multiply(frame, self._alpha, out=self._sum)
            np.add(self._sum, self._part, out=self._sum)
            np.copyto(pixels, self._sum, casting="unsafe")  # truncated, as `astype(np.uint8)`
        elif frame is not None and self.alpha == 1.0 and frame is not pixels:
            np.copyto(pixels, frame)
        self.upload(self.target.id)

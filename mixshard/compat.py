"""Drop-ins for the overlays of the visual-RL code bases: change one import (docs/migrating.md
lists the line for each code base).

The pack for a dataset and `size x size` observations is `$MIXSHARD_DATA/<dataset>-<size>`
when it exists, else `$MIXSHARD_DATA/<dataset>`. A pack larger than the observations gets a
fresh RandomResizedCrop (area 0.08-1, as the reference) per draw; one at another size is resized
(warned once per size). Every function, alpha and mask shares one `Overlay`, so one device
cache, per pack.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from .augment.inputs.checks import check_obs
from .augment.masks.builders import hsv_above, salient_patches
from .augment.masks.chroma import check_tolerances, despill, keep_matte
from .augment.masks.shared import constant
from .augment.overlay import Overlay
from .core.checks import is_number
from .core.constants import DEFAULT_SIZE
from .datasets import check_dataset, pack_folder
from .dbc import RandomVideoSource
from .dmcgb import VideoWrapper

__all__ = [
    "RandomOverlay",
    "RandomVideoSource",
    "VideoWrapper",
    "attribution_augmentation",
    "attribution_random_patch_augmentation",
    "chroma_key",
    "random_overlay",
]

METHODS = ("default", "splice")
_overlays: dict[str, Overlay] = {}


def overlay_for(
    dataset: str,
    size: tuple[int, int] = (DEFAULT_SIZE, DEFAULT_SIZE),
    dirs: Sequence[str | os.PathLike] | None = None,
) -> Overlay:
    """The shared `Overlay` of a pack (random flips as the reference; alpha given per call;
    a RandomResizedCrop per draw from a pack larger than the observations)."""
    folder = str(pack_folder(dataset, size, dirs))  # keyed by folder: MIXSHARD_DATA may change
    if folder not in _overlays:
        _overlays[folder] = Overlay(folder, alpha=0.5, flip=True, crop="auto")
    return _overlays[folder]


def _float_obs(x: object) -> torch.Tensor:
    obs = check_obs(x)
    return obs if obs.is_floating_point() else obs.float()


def _size(x: torch.Tensor) -> tuple[int, int]:
    return int(x.shape[-2]), int(x.shape[-1])


def random_overlay(
    x: torch.Tensor,
    dataset: str = "places365_standard",
    *,
    alpha: float = 0.5,
    method: str = "default",
    hue: float = 0.0,
    sat: float = 0.0,
    val: float = 0.6,
) -> torch.Tensor:
    """Randomly overlay an image from Places365 or COCO: the reference contract.

    Args:
        x: `(N, 3k, H, W)` observations, float in 0..255 (uint8 is converted to float).
        dataset: `"places365_standard"`, `"coco"` or any pack folder name in $MIXSHARD_DATA.
        alpha: the image's weight (DMC-GB: 0.5; TLDA's `random_overlay_mani`: 0.3).
        method: `"default"`, `(1 - alpha) * x + alpha * image`; or `"splice"` (MaDi): the
            pixels of x whose HSV (kornia's `rgb_to_hsv` on the 0..255 values) is above
            `(hue, sat, val) * 255` in all of H, S and V, per frame, pasted on the image, and
            the result clamped to 0..255.
        hue, sat, val: the splice thresholds, as fractions of 255.

    Returns:
        float `(N, 3k, H, W)`, one image per sample on all k frames.
    """
    if dataset in METHODS:
        raise TypeError(
            f"random_overlay's second argument is the dataset (as in DMC-GB), got {dataset!r}: "
            f"pass method={dataset!r}"
        )
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    x = _float_obs(x)
    overlay = overlay_for(dataset, _size(x))
    if method == "default":
        return overlay(x, alpha=alpha)
    thresholds = torch.tensor([hue, sat, val], dtype=torch.float32) * 255.0
    return overlay(x, alpha=1.0, mask=hsv_above(x, thresholds)).clamp_(0, 255)


def attribution_augmentation(
    x: torch.Tensor, mask: torch.Tensor, dataset: str = "places365_standard"
) -> torch.Tensor:
    """SGQN's: `x * mask + image * (1 - mask)`, the image shown where the attribution mask
    is 0.

    Args:
        x: `(N, 3k, H, W)` float observations in 0..255.
        mask: bool or float 0..1, `(N, 3k, H, W)` per channel (SGQN's
            `compute_attribution_mask`), or `(N, 1, H, W)` per pixel.
        dataset: as `random_overlay`.
    """
    x = _float_obs(x)
    return overlay_for(dataset, _size(x))(x, alpha=1.0, mask=mask)


def attribution_random_patch_augmentation(
    x: torch.Tensor,
    cam: torch.Tensor,
    image_size: int = 84,
    output_size: int = 4,
    quantile: float = 0.90,
    patch_proba: float = 0.7,
    dataset: str = "places365_standard",
) -> torch.Tensor:
    """SGQN's random patches: `x` kept on patches of its attribution map, the image elsewhere.

    `cam` `(N, H, W)` is pooled to `output_size x output_size` patches; the patches at or
    above the sample's `quantile` are kept each with probability `patch_proba`, one of them
    always; upsampled (nearest) to `image_size`. (SGQN's `exploration_mask[~mask] = 0` on an
    integer mask indexes rows -1 and -2, which keeps the last two samples whole and lets the
    always-kept patch be any patch; mixshard keeps one salient patch, as the line means.)
    """
    x = _float_obs(x)
    patches = salient_patches(cam.to(x.device), image_size, output_size, quantile, patch_proba)
    return overlay_for(dataset, _size(x))(x, alpha=1.0, mask=patches)


class RandomOverlay(torch.nn.Module):
    """DMC-GB2's `random_overlay` module: `from mixshard.compat import RandomOverlay as
    random_overlay`.

    Args:
        max_batch_size: accepted for DMC-GB2's signature; any batch size works.
        alpha: the image's weight.
        dataset: as `random_overlay`.

    `RandomOverlay.places_dirs` (what DMC-GB2's `utils.add_aug_directory` sets) lists folders
    to look for the pack in when `MIXSHARD_DATA` is unset. Any number of calls on subsets
    (`x[sel] = aug(x[sel])`) draw from the one shared cache.
    """

    places_dirs: Sequence[str | os.PathLike] | None = None

    def __init__(
        self,
        max_batch_size: int | None = None,
        alpha: float = 0.5,
        dataset: str = "places365_standard",
    ) -> None:
        super().__init__()
        if not is_number(alpha):
            raise TypeError(
                f"alpha must be a float in [0, 1], got {type(alpha).__name__} {alpha!r}"
            )
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        check_dataset(dataset)
        self.max_batch_size, self.alpha, self.dataset = max_batch_size, alpha, dataset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _float_obs(x)
        return overlay_for(self.dataset, _size(x), self.places_dirs)(x, alpha=self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, dataset={self.dataset!r}"


def chroma_key(
    image: torch.Tensor,
    keycolor: str | Sequence[str],
    tola: float | torch.Tensor = 10,
    tolb: float | torch.Tensor = 30,
    background_image: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GreenAug's soft chroma key, `chromakey.torch.chroma_key` (chromakey 0.2.1): the same
    outputs for float32 input (`scripts/compare_greenaug.py` runs both side by side).

    Args:
        image: `(B, 3, H, W)` float in [0, 1].
        keycolor: the key colour per sample as PIL's `ImageColor` reads it (`"#439f82"`): a
            list of B strings or of one (for every sample), or one string.
        tola, tolb: the (Cb, Cr) distances between which the background's weight falls from 1
            to 0 (0 <= tola <= tolb): numbers, or `(B,)` tensors, one per sample (chromakey
            itself broadcasts those against the image's width).
        background_image: `(B, 3, H, W)` float in [0, 1], or None.

    Returns:
        `(out, mask)`: `out` `(B, 3, H, W)` in [0, 1], `image - mask * key + mask *
        background` with the key colour's spill removed; `mask` `(B, H, W)` float32, the
        background's weight (1 on the key colour). In mixshard's terms `1 - mask` is
        `mixshard.masks.chroma_key`'s keep matte.
    """
    if not isinstance(image, torch.Tensor) or not image.is_floating_point():
        what = image.dtype if isinstance(image, torch.Tensor) else type(image).__name__
        raise TypeError(
            f"image must be a float tensor (B, 3, H, W) in [0, 1], got {what} (uint8 images: "
            f"image.float() / 255)"
        )
    if image.dim() != 4 or image.shape[1] != 3:
        raise ValueError(f"image must be (B, 3, H, W), got {tuple(image.shape)}")
    n = image.shape[0]
    keys = _key_rgb(keycolor, n, image.device)
    check_tolerances(tola, tolb, n)
    x = image * 255  # chromakey keys on 0..255, in the image's dtype
    keep = keep_matte(x[:, 0:1], x[:, 1:2], x[:, 2:3], keys, tola, tolb)
    mask = 1 - keep
    background = None
    if background_image is not None:
        if not isinstance(background_image, torch.Tensor) or background_image.shape != image.shape:
            got = getattr(background_image, "shape", type(background_image).__name__)
            raise ValueError(
                f"background_image must be shaped like image {tuple(image.shape)}, got {got}"
            )
        background = background_image * 255
    out = despill(x, mask, keys.view(-1, 3, 1, 1), background)
    return torch.clip(out / 255, 0, 1), mask[:, 0]


def _key_rgb(keycolor: object, n: int, device: torch.device) -> torch.Tensor:
    """`keycolor` as a `(1 or n, 3)` float32 tensor, read by PIL as chromakey reads it."""
    from PIL import ImageColor

    colours = [keycolor] if isinstance(keycolor, str) else keycolor
    if not isinstance(colours, Sequence) or len(colours) not in (1, n):
        raise ValueError(
            f"keycolor must be one colour string or a list of 1 or {n} (one per image), got "
            f"{keycolor!r}"
        )
    rgb = []
    for colour in colours:
        try:
            value = ImageColor.getrgb(colour) if isinstance(colour, str) else ()
        except ValueError:
            value = ()
        if len(value) != 3:
            raise ValueError(
                f"keycolor must hold RGB colour strings like '#439f82', got {colour!r}"
            )
        rgb.append(value)
    # made once per colours and device (a fresh tensor per call: a blocking copy to a GPU)
    flat = tuple(float(c) for colour in rgb for c in colour)
    return constant(flat, torch.float32, device).view(-1, 3)

"""`random_overlay(x, dataset=...)` with the reference signature: change one import line.

    # before: from augmentations import random_overlay
    from mixshard.compat import random_overlay

The pack for a dataset is the folder `$MIXSHARD_DATA/<dataset>` holding `index.json` (the
train split; `<dataset>_val` holds a packed val split). `make places365` and `make coco` make
them. One `Overlay` per dataset is shared by every call.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .augment.overlay import Overlay
from .core.constants import MANIFEST_NAME
from .core.env import data_is_a_pack
from .core.errors import MixshardError

ENV = "MIXSHARD_DATA"
_MAKE = {
    "places365_standard": "make places365 SRC=<...>/places365_standard DATA={data}",
    "places365_standard_val": "make places365 SRC=<...>/places365_standard DATA={data}",
    "coco": "make coco SRC=<...>/val2017 DATA={data}",
}
_overlays: dict[str, Overlay] = {}


def pack_folder(dataset: str) -> Path:
    """`$MIXSHARD_DATA/<dataset>`, checked to hold a finished pack."""
    data = os.environ.get(ENV)
    if not data:
        raise MixshardError(
            f"set {ENV} to the folder that holds the packed datasets (e.g. {ENV}=data, after "
            f"`make places365 SRC=<...>/places365_standard DATA=data` or `make coco "
            f"SRC=<...>/val2017 DATA=data`)"
        )
    folder = Path(data) / dataset
    if not (folder / MANIFEST_NAME).exists() and (problem := data_is_a_pack(data, ENV)):
        raise MixshardError(problem)
    if not (folder / MANIFEST_NAME).exists():
        make = _MAKE.get(dataset, f"mixshard pack <image folder> {{data}}/{dataset}")
        raise MixshardError(
            f"no packed dataset {dataset!r}: {folder / MANIFEST_NAME} does not exist. Make it "
            f"with `{make.format(data=data)}`"
        )
    return folder


def overlay_for(dataset: str) -> Overlay:
    """The shared `Overlay` of a dataset (alpha 0.5, random flips, as the reference)."""
    folder = str(pack_folder(dataset).resolve())  # keyed by folder: MIXSHARD_DATA may change
    if folder not in _overlays:
        _overlays[folder] = Overlay(folder, alpha=0.5, flip=True)
    return _overlays[folder]


def random_overlay(x: torch.Tensor, dataset: str = "places365_standard") -> torch.Tensor:
    """Randomly overlay an image from Places365 or COCO: the reference contract.

    Args:
        x: `(N, 3k, H, W)` observations, float in 0..255 (uint8 is converted to float).
        dataset: `"places365_standard"`, `"coco"` or any pack folder name in $MIXSHARD_DATA.

    Returns:
        float `(1 - 0.5) * x + 0.5 * image` in 0..255, one image per sample on all k frames.
    """
    if not x.is_floating_point():
        x = x.float()
    return overlay_for(dataset)(x)

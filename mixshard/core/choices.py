"""The options that take one of a few values, as `Literal` types: the one place those values are
listed. The library's signatures are typed with them, its checks and `core/constants.py`'s
tuples list `values()` of them, and the command line builds its `click.Choice`s from them, so
a value added here is accepted everywhere at once."""

from __future__ import annotations

from typing import Any, Literal, get_args

# how an image is cut to a square: the shorter side to the size and the centre kept; a
# RandomResizedCrop from the full-size image, seeded; the whole image squashed
Crop = Literal["center", "random", "full"]
# where labels come from: decided from the tree; top-level subfolders are classes; none
Labels = Literal["auto", "folders", "none"]
# the resize filter: PIL's bilinear (the default); bilinear without antialias, as the video
# benchmarks resize; PIL's bicubic, as DMC-GB2 does (docs/design.md, "Resize filters")
Resample = Literal["bilinear", "bilinear-no-antialias", "bicubic"]
# a video benchmark's clip list, by name (`core/presets.py` holds the clips of each)
ClipList = Literal[
    "dmcgb-video_easy",
    "dmcgb-video_hard",
    "dmcgb2-video_easy",
    "dmcgb2-video_hard",
    "davis17-train",
    "davis17-val",
]


def values(choice: Any) -> tuple[str, ...]:
    """The values of a choice type, in their order (the first is the default where there is
    one)."""
    return tuple(get_args(choice))

"""The clip lists of the video-distractor benchmarks, by name, and the check that a source or a
clip pack holds every clip of one.

- `dmcgb-video_easy` / `dmcgb-video_hard`: DMControl-GB's evaluation videos, `video0.mp4` ...
  in the order its `VideoWrapper` plays them (index i is `video{i}.mp4`): 10 and 100.
- `davis17-train` / `davis17-val`: the Distracting Control Suite's DAVIS 2017 training and
  validation clips (60 and 30 frame folders of `JPEGImages/480p`), as its `background.py`
  names them.

A clip matches an entry by its name or by its name without the extension (`video3.mp4` and
`video3` both match `video3`). Pure data and name matching: no torch, no files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .choices import ClipList
from .errors import ManifestError, MixshardError
from .manifest import Manifest

DAVIS17_TRAIN = (
    "bear", "bmx-bumps", "boat", "boxing-fisheye", "breakdance-flare", "bus", "car-turn",
    "cat-girl", "classic-car", "color-run", "crossing", "dance-jump", "dancing", "disc-jockey",
    "dog-agility", "dog-gooses", "dogs-scale", "drift-turn", "drone", "elephant", "flamingo",
    "hike", "hockey", "horsejump-low", "kid-football", "kite-walk", "koala", "lady-running",
    "lindy-hop", "longboard", "lucia", "mallard-fly", "mallard-water", "miami-surf",
    "motocross-bumps", "motorbike", "night-race", "paragliding", "planes-water", "rallye",
    "rhino", "rollerblade", "schoolgirls", "scooter-board", "scooter-gray", "sheep",
    "skate-park", "snowboard", "soccerball", "stroller", "stunt", "surf", "swing", "tennis",
    "tractor-sand", "train", "tuk-tuk", "upside-down", "varanus-cage", "walking",
)  # fmt: skip
DAVIS17_VAL = (
    "bike-packing", "blackswan", "bmx-trees", "breakdance", "camel", "car-roundabout",
    "car-shadow", "cows", "dance-twirl", "dog", "dogs-jump", "drift-chicane", "drift-straight",
    "goat", "gold-fish", "horsejump-high", "india", "judo", "kite-surf", "lab-coat", "libby",
    "loading", "mbike-trick", "motocross-jump", "paragliding-launch", "parkour", "pigs",
    "scooter-black", "shooting", "soapbox",
)  # fmt: skip

# by `ClipList`, in its order
CLIP_LISTS: dict[ClipList, tuple[str, ...]] = {
    "dmcgb-video_easy": tuple(f"video{i}.mp4" for i in range(10)),
    "dmcgb-video_hard": tuple(f"video{i}.mp4" for i in range(100)),
    "davis17-train": DAVIS17_TRAIN,
    "davis17-val": DAVIS17_VAL,
}


def clip_list(name: str) -> tuple[str, ...]:
    """The clip names of the list `name`, in the benchmark's order."""
    if name not in CLIP_LISTS:
        raise ValueError(f"clip list must be one of {', '.join(CLIP_LISTS)}; got {name!r}")
    return CLIP_LISTS[name]


def _stem(name: str) -> str:
    return os.path.splitext(name)[0]


def select_clips(
    name: str, found: Sequence[str], where: str, error: type[MixshardError] = ManifestError
) -> list[int]:
    """The positions in `found` (clip names of a source or a pack) of the list `name`'s clips,
    in the list's order.

    Raises `error` (naming `where`, the pack or source) when any clip of the list is missing:
    a pack of fewer clips would play other backgrounds than the benchmark's.
    """
    wanted = clip_list(name)
    position: dict[str, int] = {}
    for i, clip in enumerate(found):
        position.setdefault(clip, i)
        position.setdefault(_stem(clip), i)
    missing = [c for c in wanted if c not in position and _stem(c) not in position]
    if missing:
        shown = ", ".join(missing[:8]) + (
            f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        )
        raise error(
            f"{where} holds {len(found)} clips but lacks {len(missing)} of the {len(wanted)} of "
            f"{name!r}: {shown}; pack it from a source that holds them all"
        )
    return [position[c] if c in position else position[_stem(c)] for c in wanted]


def check_clip_pack(manifest: Manifest, where: str, name: str) -> list[int]:
    """`select_clips` on a pack's manifest: the positions of the list's clips in the pack's
    clip table, or `ManifestError` naming the pack `where` (an image pack, or fewer clips)."""
    if manifest.clips is None:
        raise ManifestError(
            f"{where} is an image pack, not a clip pack; pack the {name!r} videos with clips=True"
        )
    return select_clips(name, [c.name for c in manifest.clips], where)

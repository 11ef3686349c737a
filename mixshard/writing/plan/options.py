"""What `pack` is asked for, checked once: `PackOptions` (with a clip pack's `ClipOptions`),
made from `pack`'s arguments before anything is read or written, and the pack's modes.

Every rule that no pack can be made against is here, the clip rules too: the command line
relies on them (an `ArgumentError` names the arguments, which it spells as its flags), so a
rule is stated, and worded, once."""

from __future__ import annotations

from dataclasses import dataclass

from ...core import presets
from ...core.choices import ClipList, Crop, Labels, Resample
from ...core.constants import (
    CROP_MODES,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_SEED,
    DEFAULT_SHARD_SIZE,
    DEFAULT_SIZE,
    LABEL_MODES,
    MAX_BLOCK_SIZE,
    MAX_SIZE,
    RESAMPLE,
    RESAMPLE_MODES,
)
from ...core.errors import Arg, ArgumentError

CLIPS = Arg("clips", True)


@dataclass(frozen=True)
class ClipOptions:
    """A clip pack's own options: every `every`-th frame, at most `max_frames` of a clip, the
    clips in a seeded order (`shuffle_clips`), only a benchmark list's clips (`clip_list`)."""

    every: int = 1
    max_frames: int | None = None
    shuffle_clips: bool = False
    clip_list: ClipList | None = None


@dataclass(frozen=True)
class PackOptions:
    """The options that decide a pack's bytes, as `pack` takes them; `clips` None for an
    image pack. Made only valid: a rule they break raises `ValueError` when they are made."""

    size: int = DEFAULT_SIZE
    crop: Crop = "center"
    variants: int = 1
    shard_size: int = DEFAULT_SHARD_SIZE
    block_size: int = DEFAULT_BLOCK_SIZE
    seed: int = DEFAULT_SEED
    shuffle: bool = True
    labels: Labels = "auto"
    resample: Resample = RESAMPLE
    grey: bool = False
    clips: ClipOptions | None = None

    def __post_init__(self) -> None:
        check_options(
            self.size, self.crop, self.variants, self.shard_size, self.block_size, self.seed,
            self.labels, self.resample,
        )  # fmt: skip
        if self.clips is not None:
            check_clips(self.crop, self.variants, self.labels, self.clips)


def clip_options(
    clips: bool, every: int, max_frames: int | None, shuffle: bool, clip_list: ClipList | None
) -> ClipOptions | None:
    """`pack`'s clip arguments as `ClipOptions` (None: an image pack, which takes none).

    Raises:
        ArgumentError: a clip argument without `clips=True`.
    """
    if clips:
        return ClipOptions(every, max_frames, shuffle, clip_list)
    given = {Arg("every"): every != 1, Arg("max_frames"): max_frames is not None,
             Arg("shuffle_clips"): shuffle, Arg("clip_list"): clip_list is not None}  # fmt: skip
    first = next((arg for arg, set_ in given.items() if set_), None)
    if first is not None:
        e, m, s, c = given
        raise ArgumentError(
            first, " applies to clip packs only: add ", CLIPS, " (", e, ", ", m, ", ", s, " and ",
            c, " apply to ", CLIPS, " only)",
        )  # fmt: skip
    return None


def check_clips(crop: str, variants: int, labels: str, clips: ClipOptions) -> None:
    """Raise `ArgumentError` (a `ValueError`) for options no clip pack takes."""
    if crop == "random" or variants != 1:
        raise ArgumentError(
            CLIPS, " takes ", Arg("crop", "center"), " or ", Arg("crop", "full"), " and one "
            "variant: a clip's frames share one window (got ", Arg("crop", crop), ", ",
            Arg("variants", variants), ")",
        )  # fmt: skip
    if labels != "auto":
        raise ArgumentError(
            Arg("labels"), " does not apply to ", CLIPS, ": a frame's label is its clip's (got ",
            Arg("labels", labels), ")",
        )  # fmt: skip
    if clips.every < 1 or (clips.max_frames is not None and clips.max_frames < 1):
        raise ValueError(
            f"every and max_frames must be >= 1, got {clips.every} and {clips.max_frames}"
        )
    if clips.clip_list is not None:
        presets.clip_list(clips.clip_list)  # a ValueError naming the lists there are


def check_options(
    size: int,
    crop: str,
    variants: int,
    shard_size: int,
    block_size: int,
    seed: int,
    labels: str,
    resample: str = RESAMPLE,
) -> None:
    """Raise `ValueError` for pack options no pack can be made with."""
    if crop not in CROP_MODES:
        raise ValueError(f"unknown crop mode {crop!r}; use one of {', '.join(CROP_MODES)}")
    if resample not in RESAMPLE_MODES:
        raise ValueError(
            f"unknown resample filter {resample!r}; use one of {', '.join(RESAMPLE_MODES)}"
        )
    if labels not in LABEL_MODES:
        raise ValueError(f"unknown labels mode {labels!r}; use one of {', '.join(LABEL_MODES)}")
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size must be in [1, {MAX_SIZE}], got {size}")
    if not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise ValueError(f"block_size must be in [1, {MAX_BLOCK_SIZE}], got {block_size}")
    if variants < 1 or shard_size < 1 or seed < 0:
        raise ValueError(
            f"variants and shard_size must be >= 1 and seed >= 0, got variants={variants}, "
            f"shard_size={shard_size}, seed={seed}"
        )
    if variants > 1 and crop != "random":
        raise ArgumentError(
            Arg("variants", variants), " needs ", Arg("crop", "random"),
            " (other crops are all the same)",
        )  # fmt: skip
    if variants > shard_size:
        raise ArgumentError(Arg("variants", variants), " exceeds ", Arg("shard_size", shard_size))


def check_modes(resume: bool, overwrite: bool, part, finish: bool, ray) -> None:
    """Raises `ArgumentError` (a `ValueError`) for `pack` modes that exclude each other."""
    if resume and overwrite:
        raise ArgumentError(
            Arg("resume"), " and ", Arg("overwrite"), " exclude each other; pick one"
        )
    if finish and (resume or overwrite or part is not None or ray is not None):
        raise ArgumentError(
            Arg("finish"), " only writes index.json: no ", Arg("resume"), ", ", Arg("overwrite"),
            ", ", Arg("part"), " or ", Arg("ray"),
        )  # fmt: skip
    if part is not None:
        k, n = part
        if n < 1 or not 0 <= k < n:
            raise ValueError(f"part must be (k, n) with 0 <= k < n, got ({k}, {n})")
        if overwrite or ray is not None:
            raise ArgumentError(
                Arg("part"), " cannot be combined with ", Arg("overwrite"), " or ", Arg("ray"),
            )  # fmt: skip

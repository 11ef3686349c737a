"""The clip table of a clip pack (`clips` in `index.json`, format version 2): which pack images
are the frames of which clip, in play order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .checks import json_int as _int
from .checks import json_str as _str


@dataclass(frozen=True)
class Clip:
    """One clip of a clip pack: frames `start .. start + count - 1` (pack image numbers, in play
    order), played at `fps` frames per second (0 when the source does not say)."""

    name: str
    start: int
    count: int
    fps: float


def clip_to_dict(clip: Clip) -> dict[str, Any]:
    """The JSON form of a clip entry."""
    return {"name": clip.name, "start": clip.start, "count": clip.count, "fps": clip.fps}


def clip_from_dict(data: Any) -> Clip:
    """Parse one clip entry; types and ranges are checked, not its place in the pack.

    Raises:
        ValueError: a missing field or a bad value, named in the message.
    """
    if not isinstance(data, dict):
        raise ValueError(f"a clip entry must be an object, got {data!r:.80}")
    name = _str(data.get("name"), "clip name")
    fps: Any = data.get("fps")
    if type(fps) not in (int, float) or not 0 <= fps <= 1e6:
        raise ValueError(f"clip {name!r}: fps must be a number in [0, 1e6], got {fps!r:.40}")
    return Clip(
        name,
        _int(data.get("start"), f"clip {name!r}: start", 0),
        _int(data.get("count"), f"clip {name!r}: count", 1),
        float(fps),
    )


def check_clips(clips: tuple[Clip, ...], count: int) -> None:
    """Clips follow one another from image 0 and cover all `count` images.

    Raises:
        ValueError: the first clip out of place, or a total that is not `count`.
    """
    if not clips:
        raise ValueError("a clip pack lists no clips")
    at = 0
    for clip in clips:
        if clip.start != at:
            raise ValueError(f"clip {clip.name!r} starts at {clip.start}, expected {at}")
        at += clip.count
    if at != count:
        raise ValueError(f"clip frame counts add up to {at}, not to count {count}")

"""Video files -> frames, with PyAV (`av`, which ships its own FFmpeg).

Two steps, as for an image pack's files: at plan time `probe_video` counts a video's frames
from its packets (a demux, no decode: ~30 ms for 500 frames of 352 px) and reads its rate, so
the plan can list every frame before any pixel is made; in a decode worker `decode_frames`
decodes a run of one clip's frames in play order and resizes each as an image is resized
(`image.frame_pixels`). Decoding always starts at the first frame (no seeking, whose first
frames after a keyframe depend on the codec), so a frame's pixels are the same whichever
worker decodes it; a worker keeps its last video open so the next run of the same clip
continues where it stopped instead of decoding again from the start. The decoder runs on one
thread: a pack's parallelism is its worker processes, one clip each.

A video that cannot be opened, has no video stream or frames, or holds fewer frames than its
header lists (a file cut short) is skipped at plan time. One that fails part-way through
decoding, or decodes to fewer frames than its packets, has every frame of the failing run
skipped with one reason (never a traceback).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import ImageDecodeError
from .archive import MemberReader
from .image import frame_pixels


@dataclass(frozen=True)
class VideoInfo:
    """What a probe found: `frames` (its video packets) and `fps` (0 when unknown)."""

    frames: int
    fps: float


def _why(exc: BaseException) -> str:
    """FFmpeg's words for an error, without the file name it appends (`path` is reported)."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text)


def _open(path: str, data: bytes | None) -> Any:
    import av

    container = av.open(io.BytesIO(data) if data is not None else path, mode="r")
    if not container.streams.video:
        container.close()
        raise ImageDecodeError("no video stream in the file")
    return container


def _fps(stream: Any) -> float:
    rate = stream.average_rate or stream.guessed_rate
    return round(float(rate), 6) if rate else 0.0


def probe_video(path: str, data: bytes | None = None) -> VideoInfo:
    """Frame count (packets of the first video stream, no decoding) and rate of a video file,
    or of `data` (an archive member) that `path` names.

    Raises:
        ImageDecodeError: not a video PyAV can open, no video stream, no frames, or fewer
            frames than the header lists (cut short); `reason` says which.
    """
    try:
        container = _open(path, data)
        try:
            stream = container.streams.video[0]
            header, fps = int(stream.frames or 0), _fps(stream)
            count = sum(1 for packet in container.demux(stream) if packet.size)
        finally:
            container.close()
    except ImageDecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bad file must never stop a pack
        raise ImageDecodeError(f"not a video PyAV can read: {_why(exc)}") from None
    if count == 0:
        raise ImageDecodeError("no frames in its video stream")
    if count < header:
        raise ImageDecodeError(
            f"truncated: its header lists {header} frames, the file holds {count}"
        )
    return VideoInfo(count, fps)


class _Decoding:
    """One open video being decoded in play order; `next` is the number of the next frame."""

    def __init__(self, key: tuple[str, str, str], path: str, data: bytes | None, total: int):
        self.key, self.total, self.next = key, total, 0
        self.pid = os.getpid()
        try:
            self.container = _open(path, data)
            stream = self.container.streams.video[0]
            stream.thread_type = "NONE"  # one core per worker: the pack runs one per core
            stream.codec_context.thread_count = 1
            self.frames: Iterator[Any] = self.container.decode(stream)
        except ImageDecodeError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ImageDecodeError(f"not a video PyAV can read: {_why(exc)}") from None

    def frame(self, t: int) -> np.ndarray:
        """Frame `t` (not before `next`) as RGB `(height, width, 3)`; frames before it are
        decoded and dropped.

        Raises:
            ImageDecodeError: the decoder failed or ended before frame `t`.
        """
        while True:
            try:
                frame = next(self.frames)
            except StopIteration:
                raise ImageDecodeError(
                    f"decodes to {self.next} frames, {self.total} expected (its packets)"
                ) from None
            except Exception as exc:  # noqa: BLE001 - a bad file must never stop a pack
                raise ImageDecodeError(
                    f"cannot decode frame {self.next} of {self.total}: {_why(exc)}"
                ) from None
            self.next += 1
            if self.next > t:
                return frame.to_ndarray(format="rgb24")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing after a decode error may fail again
            self.container.close()


_local = threading.local()  # per thread: `.open`, its open video (a pack runs in any thread)


def _decoding(reader: MemberReader, rel: str, ref: Any, first: int, total: int) -> _Decoding:
    """This thread's open decoder of `rel` if it has not passed frame `first`, else a new one
    (the one it held closed)."""
    key = (reader.path, reader.kind, rel)
    held: _Decoding | None = getattr(_local, "open", None)
    if held is not None:
        if held.key == key and held.pid == os.getpid() and held.next <= first:
            return held
        _release(held)
    path, data = reader.fetch(rel, ref)
    held = _local.open = _Decoding(key, path, data, total)
    return held


def _release(held: _Decoding) -> None:
    _local.open = None
    if held.pid == os.getpid():  # a forked worker leaves its parent's decoder alone
        held.close()


def decode_frames(
    reader: MemberReader,
    rel: str,
    ref: Any,
    indices: list[int],
    counts: tuple[int, int],
    size: int,
    crop: str,
) -> list[np.ndarray | str]:
    """Frames `indices` (increasing) of the video `rel`, each `(1, 3, size, size)`; or, when
    any of them cannot be decoded, the same skip reason for every one (a run of a clip is
    packed whole or not at all). `counts`: the frames the plan counted in the video, and the
    number of the last one it keeps (after which the video is closed)."""
    total, last = counts
    decoding: _Decoding | None = None
    try:
        decoding = _decoding(reader, rel, ref, indices[0], total)
        out: list[np.ndarray | str] = [frame_pixels(decoding.frame(t), size, crop) for t in indices]
    except ImageDecodeError as exc:
        if decoding is not None:
            _release(decoding)
        return [exc.reason] * len(indices)
    if decoding.next > last:  # nothing more of this clip to read
        _release(decoding)
    return out

"""Video files -> frames, with PyAV (`av`, which ships its own FFmpeg).

Two steps, as for an image pack's files: at plan time `probe_video` counts a video's frames
from its packets (a demux, no decode) and reads its rate, so the plan lists every frame before
any pixel is made; in a decode worker `decode_frames` decodes a run of one clip's frames in
play order, never seeking, and resizes each as an image is resized (`image.frame_pixels`). A
video that cannot be probed or decoded is skipped with one reason, never a traceback.
docs/design.md, "Clip packs", says what is skipped where, and why decoding never seeks.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.constants import RESAMPLE
from ...core.errors import ImageDecodeError
from ..sources.archive import MemberReader
from .image import check_pixels, frame_pixels
from .videofile import Budget, VideoFile, open_video, options


@dataclass(frozen=True)
class VideoInfo:
    """What a probe found: `frames` (its video packets) and `fps` (0 when unknown)."""

    frames: int
    fps: float


def _why(exc: BaseException) -> str:
    """FFmpeg's words for an error, without the file name it appends (`path` is reported)."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text)


def _over(exc: BaseException) -> str:
    """What else an FFmpeg "Invalid argument" may mean: a frame larger than the stream said,
    over the pixel limit the decoder was given (`videofile.options`), refused unmade."""
    limit = options().get("max_pixels")
    if limit is None or getattr(exc, "errno", None) != errno.EINVAL:
        return ""
    return f" (damaged, or a frame over PIL's limit of {limit} pixels, PIL.Image.MAX_IMAGE_PIXELS)"


def _open(file: VideoFile) -> Any:
    """The container of `file`, its first video stream's frames within PIL's pixel limit (as
    declared: the decoders refuse larger ones by themselves, `videofile.options`)."""
    import av

    container = av.open(file, mode="r", options=options())
    try:
        if not container.streams.video:
            raise ImageDecodeError("no video stream in the file")
        codec = container.streams.video[0].codec_context
        check_pixels(codec.width, codec.height)
    except BaseException:
        container.close()
        raise
    return container


def _fps(stream: Any) -> float:
    rate = stream.average_rate or stream.guessed_rate
    return round(float(rate), 6) if rate else 0.0


def probe_video(file: VideoFile, progress: Callable[[str, int], None] | None = None) -> VideoInfo:
    """Frame count (packets of the first video stream, no decoding) and rate of a video file,
    read within a `videofile.Budget` (`progress(name, bytes read)` while a long one runs).

    Raises:
        ImageDecodeError: not a video PyAV can open, no video stream, frames over PIL's pixel
            limit, no frames, fewer frames than the header lists (cut short), or a probe that
            ran out of its budget; `reason` says which.
        KeyboardInterrupt: a Ctrl-C came while FFmpeg read (PyAV drops it there).
    """
    budget = file.budget = Budget(os.path.basename(file.name), progress)  # the clip's name
    failed = None
    try:
        header, fps = _count_packets(file, budget)
    except ImageDecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bad file must never stop a pack
        failed = f"not a video PyAV can read: {_why(exc)}"
    finally:
        file.close()
    file.check()
    count = budget.frames
    if budget.stopped is not None:  # (an open that ran out of it fails: this is why)
        raise ImageDecodeError(
            f"probe stopped: {budget.stopped} past frame {count} without another (data after "
            "the video, or damage?); cut the file after its last frame, or remux it "
            "(ffmpeg -i IN -c copy OUT)"
        )
    if failed is not None:
        raise ImageDecodeError(failed)
    if count == 0:
        raise ImageDecodeError("no frames in its video stream")
    if count < header:
        raise ImageDecodeError(
            f"truncated: its header lists {header} frames, the file holds {count}"
        )
    return VideoInfo(count, fps)


def _count_packets(file: VideoFile, budget: Budget) -> tuple[int, float]:
    """Counts the video packets of `file` into `budget.frames` (a packet of any stream renews
    the budget); its header's frame count and its rate."""
    container = _open(file)
    try:
        stream = container.streams.video[0]
        header, fps = int(stream.frames or 0), _fps(stream)
        for packet in container.demux():
            if packet.size:
                budget.packet(packet.stream.index == stream.index)
    finally:
        container.close()
    return header, fps


class _Decoding:
    """One open video being decoded in play order; `next` is the number of the next frame."""

    def __init__(self, key: tuple[str, str, str], file: VideoFile, total: int):
        self.key, self.total, self.next = key, total, 0
        self.pid, self.file = os.getpid(), file
        try:
            self.container = _open(file)
            stream = self.container.streams.video[0]
            stream.thread_type = "NONE"  # one core per worker: the pack runs one per core
            stream.codec_context.thread_count = 1
            stream.codec_context.options = options()  # no frame over PIL's pixel limit
            self.frames: Iterator[Any] = self.container.decode(stream)
        except ImageDecodeError:
            file.close()
            raise
        except Exception as exc:  # noqa: BLE001
            file.close()
            raise ImageDecodeError(f"not a video PyAV can read: {_why(exc)}") from None

    def frame(self, t: int, grey: bool = False) -> np.ndarray:
        """Frame `t` (not before `next`) as RGB `(height, width, 3)` (`grey`: FFmpeg's grey,
        the full-range Y plane, in all three channels); frames before it are decoded and
        dropped.

        Raises:
            ImageDecodeError: the decoder failed or ended before frame `t`.
        """
        while True:
            try:
                frame = next(self.frames)
            except StopIteration:
                self.file.check()
                raise ImageDecodeError(
                    f"decodes to {self.next} frames, {self.total} expected (its packets)"
                ) from None
            except Exception as exc:  # noqa: BLE001 - a bad file must never stop a pack
                self.file.check()
                raise ImageDecodeError(
                    f"cannot decode frame {self.next} of {self.total}: {_why(exc)}{_over(exc)}"
                ) from None
            self.next += 1
            if self.next > t:
                check_pixels(frame.width, frame.height)  # (FFmpeg's `max_pixels` did already)
                if not grey:
                    return frame.to_ndarray(format="rgb24")
                return np.repeat(frame.to_ndarray(format="gray")[..., None], 3, axis=2)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing after a decode error may fail again
            self.container.close()
        self.file.close()


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
    held = _local.open = _Decoding(key, open_video(reader, rel, ref), total)
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
    resample: str = RESAMPLE,
    grey: bool = False,
) -> list[np.ndarray | str]:
    """Frames `indices` (increasing) of the video `rel`, each `(1, 3, size, size)` (resized by
    the filter `resample`; FFmpeg's grey in each channel with `grey`); or, when
    any of them cannot be decoded, the same skip reason for every one (a run of a clip is
    packed whole or not at all). `counts`: the frames the plan counted in the video, and the
    number of the last one it keeps (after which the video is closed)."""
    total, last = counts
    decoding: _Decoding | None = None
    try:
        decoding = _decoding(reader, rel, ref, indices[0], total)
        out: list[np.ndarray | str] = [
            frame_pixels(decoding.frame(t, grey), size, crop, resample) for t in indices
        ]
    except ImageDecodeError as exc:
        if decoding is not None:
            _release(decoding)
        return [exc.reason] * len(indices)
    if decoding.next > last:  # nothing more of this clip to read
        _release(decoding)
    return out

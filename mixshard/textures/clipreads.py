"""A clip pack opened for texture players: its clip table, and its frames in the texture's
layout (rows of RGB pixels, HWC), one at a step or a whole clip read ahead.

At the texture's size, a step copies its one frame out of the pack's read-only mappings (every
shard mapped when the pack is opened, `PackReader.map_all`: a copy from the page cache, no
`read` call, no decode) and interleaves its planes into the texture (`frame`): a reset draws
and copies one frame, whatever the clip's length, and no process holds more than the frame it
shows (the page cache holds the pack once for every process). A pack of another size is
resized (`resized`), a clip at a time: its next episode's clip is read, on a thread of its own
(`clippool.ReadAhead`), as soon as an episode starts, whose draws are then known (a pure
function of `(seed, environment, episode)`, or a benchmark's random state, which nothing else
draws from), so that the next reset finds it in memory (`ask`, `take`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..augment.caches.clippool import ReadAhead
from ..core.errors import MixshardError
from ..core.jobs import own
from ..reading.buffers import read_images_into
from ..reading.source import Source, resolve_source

_CHUNK = 16  # frames resized at once (float32 at 800 px: 7.7 MB a frame)


def resized(chw: torch.Tensor, size: int, floor: bool) -> torch.Tensor:
    """uint8 frames `(n, 3, h, w)` resized to `size` px as `tf.image.resize` and
    `F.interpolate(mode="bilinear", align_corners=False)` do (half-pixel centres, no
    antialias), then rounded (`floor`: truncated, as `tf.cast` does), as `(n, size, size, 3)`."""
    out = torch.empty((len(chw), size, size, 3), dtype=torch.uint8)
    for lo in range(0, len(chw), _CHUNK):
        part = chw[lo : lo + _CHUNK].float()
        big = F.interpolate(part, size=(size, size), mode="bilinear", align_corners=False)
        big = big.floor_() if floor else big.round_()
        out[lo : lo + _CHUNK] = big.clamp_(0, 255).permute(0, 2, 3, 1)
    return out


class ClipFrames:
    """A clip pack opened for texture players (see the module docstring).

    Args:
        source: a clip pack (`mixshard pack SRC OUT --clips`): a folder, a store URL or a
            resolved `Source`.

    Raises:
        MixshardError: an image pack (still images), where clips are needed.
    """

    def __init__(self, source: str | os.PathLike | Source) -> None:
        src = resolve_source(source)
        m = self.manifest = src.manifest
        if m.clips is None:
            raise MixshardError(
                f"{m.origin} is an image pack (still images); a texture player plays clips: "
                f"pack the videos or frame folders with `mixshard pack SRC OUT --clips`"
            )
        self.origin, self.size = m.origin, m.size
        self.names = [c.name for c in m.clips]
        self.first = np.array([c.start for c in m.clips], np.int64)
        self.length = np.array([c.count for c in m.clips], np.int64)
        self._pack = src.open_pack()
        self._pack.map_all()  # (where it cannot be mapped: one pread a step)
        self._scratch = np.empty((1, m.image_bytes), np.uint8)
        self._asks: dict[int, tuple[np.ndarray, int, bool]] = {}
        self._done: dict[int, torch.Tensor | BaseException] = {}
        self._ticket = 0
        self._readers: list[ReadAhead] = []  # the reader thread, made by the first `ask`
        self._closer = own(self, _close, self._readers, self._pack)

    def clip_frames(self, clip: int) -> np.ndarray:
        """The pack image numbers of clip `clip`'s frames, in play order."""
        return self.first[clip] + np.arange(self.length[clip])

    def frame(self, image: int, out: np.ndarray) -> np.ndarray:
        """Pack image `image` into `out` (`(size, size, 3)` uint8), interleaved from the
        pack's planes.

        Raises:
            ShardError, MixshardError: a damaged or changed shard.
        """
        bad = self._pack.read_images(np.array([image]), self._scratch)
        if bad is not None and bad.any():  # (not `read_images_into`: one frame a step)
            raise MixshardError(f"frame {image} of {self.origin} lies in a damaged block")
        planes = self._scratch.reshape(3, self.size, self.size)
        np.stack((planes[0], planes[1], planes[2]), axis=-1, out=out)  # 2x torch's permute copy
        return out

    def ask(self, frames: np.ndarray, size: int, floor: bool = False) -> int:
        """Start reading pack images `frames` as `(n, size, size, 3)` texture rows (resized
        when the pack is not `size` px: `resized`); returns the ticket to `take` them by."""
        self._ticket += 1
        self._asks[self._ticket] = (np.asarray(frames, np.int64), size, floor)
        if not self._readers:  # (a player of frames at the pack's size never needs it)
            self._readers.append(ReadAhead(self._read))
        self._readers[0].ask(self._ticket)
        return self._ticket

    def wait(self, ticket: int) -> None:
        """Wait until the read asked for under `ticket` is done (failed reads too)."""
        if ticket not in self._asks:
            raise ValueError(f"no read was asked for under ticket {ticket} (or it was taken)")
        while ticket not in self._done:
            done = self._readers[0].take(block=True)
            if done is not None and done[0] in self._asks:  # (not dropped meanwhile)
                self._done[done[0]] = done[1]

    def take(self, ticket: int) -> np.ndarray:
        """The frames asked for under `ticket`, waiting for their read if it is not done.

        Raises:
            ShardError, MixshardError: the read failed (a damaged or changed shard).
        """
        self.wait(ticket)
        result = self._done.pop(ticket)
        del self._asks[ticket]
        if isinstance(result, BaseException):
            raise result
        return result.numpy()

    def drop(self, ticket: int) -> None:
        """Forget the frames asked for under `ticket` (read or not)."""
        self._done.pop(ticket, None)
        self._asks.pop(ticket, None)

    @property
    def _read(self) -> Callable[[int], torch.Tensor]:
        # the thread holds these, not `self`: a player nobody closed is still collected
        asks, pack, size, origin = self._asks, self._pack, self.size, self.origin

        def read(ticket: int) -> torch.Tensor:
            if ticket not in asks:  # dropped before its turn
                return torch.empty(0, dtype=torch.uint8)
            frames, want, floor = asks[ticket]
            chw = torch.empty((len(frames), 3, size, size), dtype=torch.uint8)
            read_images_into(pack, frames, chw, f"frames of {origin} lie in a damaged block")
            if want != size:
                return resized(chw, want, floor)
            return chw.permute(0, 2, 3, 1).contiguous()

        return read

    def close(self) -> None:
        """Stop the reader thread and close the pack."""
        self._closer()


def _close(readers: list[ReadAhead], pack: Any) -> None:
    for reads in readers:
        reads.close()
    pack.close()

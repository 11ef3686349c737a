"""A `torch.Generator`'s state in few bytes, for `Overlay.state_dict()`.

A CUDA generator's state is 16 bytes (seed and Philox offset). A CPU generator's is 5,056: the
Mersenne Twister's 624 32-bit words, each stored in a 64-bit field, between a 24-byte header
(seed, words left, seeded, next) and a 40-byte tail (the normal distribution's cache). Two
states of one run differ by a whole number of the Twister's regenerations ("twists") of the
words, and a header and tail: so a state is kept as 2,496 bytes of words, and a later state of
the same generator as the number of twists from it plus its header and tail (`pack_states`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...core.errors import MixshardError

_N, _M = 624, 397
_CPU_BYTES, _HEAD, _TAIL = 5056, 24, 40
_UPPER, _LOWER, _MATRIX = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)
MAX_TWISTS = 1 << 20  # (2**29 numbers drawn between the two states: far more than an epoch's)


def twist(words: np.ndarray) -> np.ndarray:
    """The Mersenne Twister's regeneration of its 624 words (uint32), as torch's
    `mt19937::next_state`: three vectorised runs, each reading only words already made."""
    mt = words.copy()

    def run(lo: int, hi: int) -> None:
        i = np.arange(lo, hi)
        y = (mt[i] & _UPPER) | (mt[(i + 1) % _N] & _LOWER)
        mt[i] = mt[(i + _M) % _N] ^ (y >> np.uint32(1)) ^ np.where(y & 1, _MATRIX, np.uint32(0))

    run(0, _N - _M)
    run(_N - _M, 2 * (_N - _M))
    run(2 * (_N - _M), _N - 1)
    run(_N - 1, _N)
    return mt


def _words(state: torch.Tensor) -> np.ndarray:
    return state.numpy()[_HEAD:-_TAIL].view(np.uint64).astype(np.uint32)


def _is_cpu(state: torch.Tensor) -> bool:
    return state.numel() == _CPU_BYTES


def pack_states(then: torch.Tensor | None, now: torch.Tensor) -> dict[str, Any]:
    """Generator states `then` (or None) and `now`, a later state of the same run, compact.

    Raises:
        MixshardError: `now` is more than `MAX_TWISTS` twists after `then`.
    """
    if not _is_cpu(now):
        return {"then": None if then is None else bytes(then.numpy()), "now": bytes(now.numpy())}
    raw = now.numpy()
    ends = bytes(raw[:_HEAD]) + bytes(raw[-_TAIL:])
    if then is None:
        return {"then": None, "now": ends + _words(now).tobytes(), "twists": None}
    words, target = _words(then), _words(now)
    for twists in range(MAX_TWISTS):
        if np.array_equal(words, target):
            return {"then": _pack_cpu(then), "now": ends, "twists": twists}
        words = twist(words)
    raise MixshardError(f"the generator's state is over {MAX_TWISTS} twists from its last epoch")


def _pack_cpu(state: torch.Tensor) -> bytes:
    raw = state.numpy()
    return bytes(raw[:_HEAD]) + bytes(raw[-_TAIL:]) + _words(state).tobytes()


def _unpack_cpu(ends: bytes, words: np.ndarray) -> torch.Tensor:
    body = words.astype(np.uint64).tobytes()
    blob = ends[:_HEAD] + body + ends[_HEAD : _HEAD + _TAIL]
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


def unpack_states(packed: dict[str, Any]) -> tuple[torch.Tensor | None, torch.Tensor]:
    """`pack_states`'s `(then, now)` again, as `torch.Generator.set_state` takes them.

    Raises:
        ValueError: not a `pack_states` result.
    """
    try:
        then, now = packed["then"], packed["now"]
        if "twists" not in packed:  # a CUDA generator's: its states whole
            raw = None if then is None else torch.frombuffer(bytearray(then), dtype=torch.uint8)
            return raw, torch.frombuffer(bytearray(now), dtype=torch.uint8)
        ends_len = _HEAD + _TAIL
        if then is None:
            return None, _unpack_cpu(now[:ends_len], np.frombuffer(now[ends_len:], np.uint32))
        words = np.frombuffer(then[ends_len:], np.uint32)
        first = _unpack_cpu(then[:ends_len], words)
        for _ in range(int(packed["twists"])):
            words = twist(words)
        return first, _unpack_cpu(now, words)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"state generator is not a packed generator state: {exc}") from None

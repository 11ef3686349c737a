"""Counter-based draws: random numbers that are a pure function of a key, on any device.

`Backgrounds` draws each environment's clip, start frame and flip from `(seed, environment,
episode, stream)` alone, which a stateful `torch.Generator` cannot give (its draws depend on
how many numbers were drawn before, by anyone). The mix is SplitMix64's finaliser (Steele, Lea
and Flood, 2014) on int64 tensor ops, so the CPU and CUDA give the same bits; the pure-Python
`mix64_int` is its reference (docs/design.md, "Backgrounds per environment", says why).
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels.compiled import lerp as _lerp
from ..kernels.compiled import region

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _signed(x: int) -> int:
    """A 64-bit word as the int64 value with the same bits."""
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


def mix64_int(x: int) -> int:
    """The mix of one word, in Python integers (unsigned): the reference of `mix64`."""
    z = (x + _GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def _shr(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 words (torch's `>>` is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """`mix64_int` of every element of an int64 tensor (bits as int64)."""
    z = x + _signed(_GAMMA)
    z = (z ^ _shr(z, 30)) * _signed(_M1)
    z = (z ^ _shr(z, 27)) * _signed(_M2)
    return z ^ _shr(z, 31)


def seed_key(seed: int) -> int:
    """The int64 key of a seed (mixed once, so that seeds 0, 1, 2 are unrelated words)."""
    return _signed(mix64_int(seed))


def keyed(key: int, env: torch.Tensor, episode: torch.Tensor, stream: int) -> torch.Tensor:
    """64 random bits (int64) per element: a pure function of `(key, env, episode, stream)`.
    On a CPU the compiled loop (`_lerp.keyed`) makes the same bits in one call."""
    if _lerp is not None and env.device.type == "cpu" and episode.device.type == "cpu":
        e, p = torch.broadcast_tensors(env.long(), episode.long())
        e, p = e.contiguous(), p.contiguous()
        out = torch.empty(e.shape, dtype=torch.int64)
        _lerp.keyed(region(out), region(e), region(p), key, stream)
        return out
    return mix64(mix64(mix64(env + key) + episode) + stream)


def below(bits: torch.Tensor, n: torch.Tensor | int) -> torch.Tensor:
    """Integers in `[0, n)` from random words: the top 32 bits scaled by `n` (no modulo bias
    beyond n / 2**32; `n` below 2**31)."""
    return (_shr(bits, 32) * n) >> 32


# -- the same draws in numpy, for the host's small batches (a few µs where torch's ops on a
# CPU tensor cost ~5 µs each); the bits are the torch functions' (tests check it) ----------


def mix64_np(x: np.ndarray) -> np.ndarray:
    """`mix64` of uint64 words (numpy's unsigned arithmetic wraps modulo 2**64)."""
    z = x + np.uint64(_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    return z ^ (z >> np.uint64(31))


def keyed_np(key: int, env: np.ndarray, episode: int, stream: int) -> np.ndarray:
    """`keyed` for int64 `env` numbers and one episode, as uint64 words (the same bits). The
    compiled loop where it is built: numpy's twelve passes over a few values cost more than
    the loop, most of all beside a blend that has pushed them out of the caches."""
    if _lerp is not None:
        e = np.ascontiguousarray(env, dtype=np.int64)
        out = np.empty(e.shape, np.int64)
        episodes = np.full(e.shape, _signed(episode), np.int64)
        _lerp.keyed(out, e, episodes, _signed(key), _signed(stream))
        return out.view(np.uint64)
    return keyed_numpy(key, env, episode, stream)


def keyed_numpy(key: int, env: np.ndarray, episode: int, stream: int) -> np.ndarray:
    """`keyed_np` in numpy's ops (where the compiled module is not built)."""
    with np.errstate(over="ignore"):
        z = mix64_np(env.astype(np.uint64) + np.uint64(key & _MASK64))
        z = mix64_np(z + np.uint64(episode & _MASK64))
        return mix64_np(z + np.uint64(stream & _MASK64))

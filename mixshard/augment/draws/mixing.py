"""Several packs mixed by weight: which pack each draw takes, as a pure function of its key.

`Overlay` picks a pack per sample, `Backgrounds` per episode, both with `Mix.pick`, so a draw's
pack depends on its key and the weights in force only. The weights change with `set_weights`
(a curriculum, an ADR loop) or by a schedule, `[(step, weights), ...]`; the weights in force,
the step and the schedule's position are the state. docs/design.md, "Mixing packs and
resuming", gives the keys, the rule and how independent the draws are.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

_ONE = 1 << 32  # the picks' resolution: a weight is rounded to a multiple of 2**-32
_SIGN = -(1 << 63)  # the sign bit of an int64 word


def check_mix_weights(weights: Any, packs: int, name: str = "weights") -> np.ndarray:
    """`weights` (one non-negative finite number per pack, not all 0) as float64 shares that
    sum to 1.

    Raises:
        TypeError: not a sequence of numbers.
        ValueError: another length, a negative, NaN or infinite value, all 0, or a sum that
            overflows; naming the value.
    """
    if isinstance(weights, torch.Tensor):
        weights = weights.tolist()
    if isinstance(weights, (str, bytes)) or not isinstance(weights, (Sequence, np.ndarray)):
        raise TypeError(
            f"{name} must be a list of numbers, one per pack ({packs}), got "
            f"{type(weights).__name__}"
        )
    if len(weights) != packs:
        raise ValueError(f"{name} has {len(weights)} values but {packs} packs were given")
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            raise TypeError(f"{name}[{i}] must be a number, got {w!r}")
        if not math.isfinite(w):
            raise ValueError(f"{name}[{i}] must be a finite number, got {w!r}")
        if w < 0:
            raise ValueError(f"{name}[{i}] must be >= 0, got {w!r}")
    try:
        total = math.fsum(float(w) for w in weights)
    except OverflowError:
        total = math.inf
    if total == 0:
        raise ValueError(f"{name} are all 0 ({list(weights)!r}): give some pack a weight above 0")
    if not math.isfinite(total):
        raise ValueError(f"{name} sum to {total} ({list(weights)!r}): scale them down")
    return np.array([float(w) / total for w in weights], np.float64)


def check_schedule(schedule: Any, packs: int) -> list[tuple[int, np.ndarray]]:
    """A schedule, `[(step, weights), ...]` or `{step: weights}`, with steps (ints >= 0) in
    increasing order, each entry's weights checked (`check_mix_weights`).

    Raises:
        TypeError, ValueError: an entry that is not a `(step, weights)` pair, a step that is
            not an int >= 0 or not above the one before it, bad weights; naming the entry.
    """
    items = list(schedule.items()) if isinstance(schedule, dict) else schedule
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(
            f"schedule must be a list of (step, weights) pairs, got {type(schedule).__name__}"
        )
    out: list[tuple[int, np.ndarray]] = []
    for i, entry in enumerate(items):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise TypeError(f"schedule[{i}] must be a (step, weights) pair, got {entry!r}")
        step, weights = entry
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"schedule[{i}] step must be an integer >= 0, got {step!r}")
        if out and step <= out[-1][0]:
            raise ValueError(
                f"schedule steps must increase: schedule[{i}] is at step {step}, after step "
                f"{out[-1][0]}"
            )
        out.append((int(step), check_mix_weights(weights, packs, f"schedule[{i}] weights")))
    return out


def thresholds(weights: np.ndarray) -> np.ndarray:
    """The cumulative weights scaled to 2**32 (int64), the last exactly 2**32: a word's top
    32 bits `u` pick the first pack whose threshold is above `u`."""
    cum = np.round(np.cumsum(weights) * _ONE).astype(np.int64)
    cum[-1] = _ONE
    return np.minimum(cum, _ONE)


class Mix:
    """The weights over `packs` packs in force, their schedule and the keyed pick.

    Args:
        packs: how many packs (>= 2).
        weights: the weights to start with (default: the schedule's step-0 entry, else equal).
        schedule: `[(step, weights), ...]` (see the module docstring), or None.
    """

    def __init__(self, packs: int, weights: Any = None, schedule: Any = None) -> None:
        self.packs = packs
        self.schedule = check_schedule(schedule, packs) if schedule is not None else []
        if weights is None:
            start = np.full(packs, 1.0 / packs)
        else:
            start = check_mix_weights(weights, packs)
        # what the state must have been saved with (the constructor's weights and schedule)
        self.initial = start
        self.fingerprint = _fingerprint(start, self.schedule)
        self.step, self.applied = 0, 0
        self._devices: dict[torch.device, torch.Tensor] = {}
        self._set(start)
        self.advance(0)

    def _set(self, weights: np.ndarray) -> None:
        self.weights = weights
        self.cum = thresholds(weights)
        # the thresholds as words, in the signed order of words whose sign bit is flipped:
        # `pick` compares whole words (one xor) instead of shifting out their top 32 bits
        # (a threshold of 2**32 is never reached: it is left out, so that it never wraps)
        words = self.cum[self.cum < _ONE].astype(np.uint64) << np.uint64(32)
        self._words = (words ^ np.uint64(1 << 63)).view(np.int64)
        self._devices = {}

    @property
    def words(self) -> np.ndarray:
        """The weights in force as `pick` compares them: int64 thresholds of words whose sign
        bit is flipped (the pack is how many are at or below)."""
        return self._words

    def set_weights(self, weights: Any) -> None:
        """These weights from now on (until the schedule's next entry)."""
        self._set(check_mix_weights(weights, self.packs))

    def advance(self, steps: int = 1) -> None:
        """Count `steps` more steps; the schedule's entries they reach come into force."""
        self.step += steps
        while self.applied < len(self.schedule) and self.schedule[self.applied][0] <= self.step:
            self._set(self.schedule[self.applied][1])
            self.applied += 1

    def pick(self, bits: torch.Tensor) -> torch.Tensor:
        """The pack (int64) of each random word (int64 bits, from `keyed`)."""
        # compares and a sum, not `searchsorted`: on a CPU that ran on torch's thread pool,
        # and waited up to a scheduler tick (4-85 ms) for a worker on a busy machine
        flipped = bits ^ _SIGN
        if len(self._words) <= 1:
            if not len(self._words):
                return torch.zeros_like(bits)
            return (flipped >= int(self._words[0])).long()
        words = self._devices.get(bits.device)
        if words is None:
            words = self._devices[bits.device] = torch.from_numpy(self._words).to(bits.device)
        return (flipped.unsqueeze(1) >= words).sum(1)

    def pick_np(self, bits: np.ndarray) -> np.ndarray:
        """`pick` of uint64 words in numpy (`keyed_np`): the same packs."""
        return np.searchsorted(self.cum, (bits >> np.uint64(32)).astype(np.int64), side="right")

    def state_dict(self) -> dict[str, Any]:
        """The weights in force, the step and the schedule's position (and the fingerprint
        of the constructor's weights and schedule, which a load checks)."""
        return {
            "mix": self.fingerprint,
            "weights": self.weights.tolist(),
            "step": self.step,
            "applied": self.applied,
        }

    def load_state_dict(self, state: Any) -> None:
        """Continue from `state_dict()`; checked before anything changes.

        Raises:
            TypeError, ValueError: a state of other weights or schedule, or a bad field, named.
        """
        if not isinstance(state, dict) or set(state) != {"mix", "weights", "step", "applied"}:
            raise ValueError(f"state['mix'] is not a Mix.state_dict(), got {_keys(state)}")
        if state["mix"] != self.fingerprint:
            raise ValueError(
                f"the state was saved with other weights= or schedule= (fingerprint "
                f"{state['mix']!r}, this one's {self.fingerprint!r}): make it with the same ones"
            )
        weights = check_mix_weights(state["weights"], self.packs, "state weights")
        for key, top in (("step", None), ("applied", len(self.schedule))):
            value = state[key]
            if type(value) is not int or value < 0 or (top is not None and value > top):
                raise ValueError(f"state {key} must be an int in [0, {top}], got {value!r}")
        self._set(weights)
        self.step, self.applied = state["step"], state["applied"]


def _fingerprint(weights: np.ndarray, schedule: list[tuple[int, np.ndarray]]) -> str:
    words = [weights.tobytes()] + [str(s).encode() + w.tobytes() for s, w in schedule]
    return hashlib.sha256(b"|".join(words)).hexdigest()[:16]


def _keys(state: Any) -> str:
    return repr(sorted(map(str, state))) if isinstance(state, dict) else type(state).__name__

"""Two ways of handing out a sequence in pieces, shared by the caches, the pool and its feed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=Any)  # a tensor or an array: sliceable, with a length


class Carry(Generic[T]):
    """`take(n)`: the next `n` items of a sequence of batches, as consecutive pieces of them;
    the rest of the last batch is carried to the next take, so no item is lost or repeated.

    Args:
        next_batch: the next batch of the sequence.
        keep: applied to the rest of a batch before it is carried (e.g. a copy, when the
            batch's memory is used again for later batches).
    """

    def __init__(self, next_batch: Callable[[], T], keep: Callable[[T], T] | None = None) -> None:
        self._next, self._keep = next_batch, keep
        self._left: T | None = None

    @property
    def left(self) -> int:
        """Items carried to the next take."""
        return 0 if self._left is None else len(self._left)

    def restart(self, left: T | None) -> None:
        """Carry `left` to the next take (a loaded state's)."""
        self._left = left

    def take(self, n: int) -> list[T]:
        parts: list[T] = []
        have = 0
        fresh = False  # the last piece is a batch just taken (not the carried rest)
        if self._left is not None:
            parts.append(self._left)
            have, self._left = len(parts[0]), None
        while have < n:
            parts.append(self._next())
            have += len(parts[-1])
            fresh = True
        last = parts[-1]
        cut = len(last) - (have - n)
        if cut < len(last):
            rest = last[cut:]
            self._left = self._keep(rest) if fresh and self._keep is not None else rest
            parts[-1] = last[:cut]
        return parts


class PermutationWalk(Generic[T]):
    """Draws that walk random permutations of `count` items: every item is drawn once before
    any is drawn twice.

    Args:
        count: the items.
        permute: a fresh random permutation of `range(count)`.
        distinct: each draw is of distinct items: when fewer than asked are left in the
            permutation, a new one starts (the rest is skipped); else a draw runs on into the
            next permutation.
    """

    def __init__(self, count: int, permute: Callable[[], T], distinct: bool) -> None:
        self.count, self._permute, self.distinct = count, permute, distinct
        self._perm: T | None = None
        self._cursor = 0

    @property
    def perm(self) -> T | None:
        """The current permutation (None before the first draw)."""
        return self._perm

    @property
    def cursor(self) -> int:
        """Items drawn of the current permutation."""
        return self._cursor

    def restart(self, perm: T | None, cursor: int) -> None:
        """Continue in `perm` after its first `cursor` items (a loaded state's)."""
        self._perm, self._cursor = perm, cursor

    def take(self, m: int) -> list[T]:
        """The next `m` items, as pieces of permutations (one piece when `distinct`)."""
        if self.distinct and m > self.count:
            raise ValueError(f"cannot draw {m} distinct items of {self.count}")
        parts: list[T] = []
        while m > 0:
            left = 0 if self._perm is None else self.count - self._cursor
            if left == 0 or (self.distinct and left < m):
                self._perm, self._cursor = self._permute(), 0
                left = self.count
            got = min(m, left)
            parts.append(self._perm[self._cursor : self._cursor + got])  # type: ignore[index]
            self._cursor += got
            m -= got
        return parts

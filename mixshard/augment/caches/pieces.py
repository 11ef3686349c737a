"""Two ways of handing out a sequence in pieces, shared by the caches, the pool and its refill."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
        return list(self.pieces(n))

    def pieces(self, n: int, keep: bool = True) -> Iterator[T]:
        """`take`'s pieces, each taken only once the caller is done with the one before: a
        caller that reads each piece before asking for the next may be handed batches that a
        later batch overwrites. `keep=False`: the rest of a batch is carried as it is (such a
        caller reads it at its next take, before the next batch)."""
        have = 0
        if self._left is not None:
            part, self._left = self._left, None
            if len(part) > n:
                part, self._left = part[:n], part[n:]
            have = len(part)
            yield part
        while have < n:
            batch = self._next()
            if len(batch) > n - have:
                rest = batch[n - have :]
                self._left = self._keep(rest) if keep and self._keep is not None else rest
                batch = batch[: n - have]
            have += len(batch)
            yield batch


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

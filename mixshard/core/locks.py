"""Locks that a forked child gets afresh.

`os.fork` copies every lock as it is: one a parent's reader thread held stays held in the
child, where no thread will release it, and the child's first use of the object hangs. So every
lock and condition a child may go on using is made here, and an at-fork hook gives each a new,
released inner lock in the child (which has only the forking thread: no one holds or waits).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

_LIVE: weakref.WeakSet[_Renewed] = weakref.WeakSet()


class _Renewed:
    """What `Lock` and `Condition` share: an inner `threading` object made by `_make`, and
    made again in a forked child."""

    __slots__ = ("_inner", "__weakref__")
    _make: Callable[[], Any]

    def __init__(self) -> None:
        self._inner = self._make()
        _LIVE.add(self)

    def _renew(self) -> None:
        self._inner = self._make()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._inner.acquire(blocking, timeout)

    def release(self) -> None:
        self._inner.release()

    def __enter__(self) -> bool:
        return self._inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self._inner.release()


class Lock(_Renewed):
    """A `threading.Lock` made anew in a forked child."""

    __slots__ = ()
    _make = threading.Lock

    def locked(self) -> bool:
        return self._inner.locked()


class Condition(_Renewed):
    """A `threading.Condition` (on its own lock) made anew in a forked child."""

    __slots__ = ()
    _make = threading.Condition

    def wait(self, timeout: float | None = None) -> bool:
        return self._inner.wait(timeout)

    def wait_for(self, predicate: Any, timeout: float | None = None) -> Any:
        return self._inner.wait_for(predicate, timeout)

    def notify(self, n: int = 1) -> None:
        self._inner.notify(n)

    def notify_all(self) -> None:
        self._inner.notify_all()


def _renew_all() -> None:
    for lock in list(_LIVE):
        lock._renew()


os.register_at_fork(after_in_child=_renew_all)

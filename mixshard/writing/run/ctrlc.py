"""Ctrl-C in the pack process, never lost: Python's own handler raises KeyboardInterrupt
wherever the main thread is, and where an exception cannot propagate (a weakref callback of
the import system or of a process pool, a `__del__`, an `atexit` callback) Python drops it with
"Exception ignored in". `CtrlC` counts every SIGINT, so that the pack raises it again at its
next check: each progress report, the end of the decoding, and before `index.json` is written.
From there on the pack finishes (a Ctrl-C is counted, not raised, while its last files are
written and its lock released) and then raises `LateInterrupt`: the pack is whole."""

from __future__ import annotations

import signal
import threading
from typing import Any

_count = 0  # SIGINTs this process has had while a `CtrlC` handler was set
_deferring = 0  # > 0: count a SIGINT without raising (the pack's last writes, or its exit)


class LateInterrupt(KeyboardInterrupt):
    """A Ctrl-C that came while a pack wrote its `index.json` and let go of OUT: the pack is
    whole (its `index.json` written); raised once it is."""


def _handle(signum: int, frame: Any) -> None:
    global _count
    _count += 1
    if not _deferring:
        raise KeyboardInterrupt


class CtrlC:
    """While entered (in the main thread, where Python's own Ctrl-C handler is set): counts
    each SIGINT and raises KeyboardInterrupt as that handler does; `check()` raises it again
    once one has come since `__enter__`. Python drops an exception raised where it cannot
    propagate (a weakref callback of the import system, a `__del__`), with "Exception ignored
    in"; a Ctrl-C landing there was lost (1 in 80 with 2-4 workers, at the start of a pack,
    while imports ran; 9 in 40 with 8 workers in its last moments, as the pool went). Entered
    again inside (a pack inside the command line's), the outer handler counts for both.

    After `defer()` a SIGINT is counted only; leaving raises `LateInterrupt` if one came."""

    def __init__(self) -> None:
        self._mark = 0
        self._deferred: int | None = None  # the count when `defer` was called
        self._previous: Any = None

    @property
    def seen(self) -> int:
        """The SIGINTs that came since `__enter__`."""
        return _count - self._mark

    def __enter__(self) -> CtrlC:
        self._mark = _count
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, _handle)
        return self

    def check(self) -> None:
        """Raises KeyboardInterrupt when a Ctrl-C has come (and was perhaps dropped)."""
        if self.seen:
            raise KeyboardInterrupt

    def defer(self) -> None:
        """From now to `__exit__`, a SIGINT is counted, not raised: what follows must finish
        (the pack's `index.json`, its lock released); `__exit__` then raises `LateInterrupt`."""
        global _deferring
        if self._deferred is None:
            self._deferred = _count
            _deferring += 1

    def __exit__(self, kind: type[BaseException] | None = None, *exc: object) -> None:
        global _deferring
        late = self._deferred is not None and _count > self._deferred
        if self._deferred is not None:
            _deferring -= 1
            self._deferred = None
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if late and kind is None:
            raise LateInterrupt


def count_only() -> None:
    """From now on a SIGINT is counted, never raised, by any `CtrlC` handler still set: for
    the command line's exit (its `atexit` callbacks, where Python would drop the exception);
    `count()` then says whether one came."""
    global _deferring
    _deferring += 1


def count() -> int:
    """The SIGINTs this process has had while a `CtrlC` handler was set."""
    return _count

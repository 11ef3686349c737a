"""Ctrl-C in the pack process, never lost: Python's own handler raises KeyboardInterrupt
wherever the main thread is, and where an exception cannot propagate (a weakref callback of
the import system, a `__del__`) Python drops it with "Exception ignored in". `CtrlC` counts
every SIGINT, so that the pack loop raises it again at its next progress report."""

from __future__ import annotations

import signal
import threading
from typing import Any


class CtrlC:
    """While entered (in the main thread, where Python's own Ctrl-C handler is set): counts
    each SIGINT and raises KeyboardInterrupt as that handler does; `check()` raises it again
    once one has come. Python drops an exception raised where it cannot propagate (a weakref
    callback of the import system, a `__del__`), with "Exception ignored in"; a Ctrl-C landing
    there was lost (1 in 80 with 2-4 workers, at the start of a pack, while imports ran)."""

    def __init__(self) -> None:
        self.seen = 0
        self._previous: Any = None

    def __enter__(self) -> CtrlC:
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.seen += 1
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raises KeyboardInterrupt when a Ctrl-C has come (and was perhaps dropped)."""
        if self.seen:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

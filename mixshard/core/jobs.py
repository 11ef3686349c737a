"""`JobThread`: a background thread that runs jobs in order and carries their errors to the
caller (the CPU lane of `device.py`)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

CLOSE_TIMEOUT = 10.0  # seconds `close` waits for the job running


class JobThread:
    """Runs submitted jobs one after another on a daemon thread.

    `wait(n)` returns once the first `n` jobs have run; a job's error is kept and raised by
    `raise_error` (and so by every later `wait`) in the caller's thread. The thread starts
    with the first job and ends with `close()`.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: deque[Callable[[], Any]] = deque()
        self._cond = threading.Condition()
        self._submitted = self._done = 0
        self._closed = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], Any]) -> int:
        """Queue `job`; returns its number (1, 2, ...), to `wait` for."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self.name}: submit after close")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name=self.name)
                self._thread.start()
            self._jobs.append(job)
            self._submitted += 1
            self._cond.notify_all()
            return self._submitted

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                with self._cond:
                    self._error = self._error or exc
            finally:
                del job
                with self._cond:
                    self._done += 1
                    self._cond.notify_all()

    def wait(self, n: int | None = None) -> None:
        """Until the first `n` jobs (default: all submitted) have run; then `raise_error`."""
        with self._cond:
            target = self._submitted if n is None else n
            while self._done < target:
                self._cond.wait()
        self.raise_error()

    def raise_error(self) -> None:
        """Raise the first error a job raised, if any."""
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Run what is queued, then end the thread (joined: a thread left inside torch at
        interpreter exit aborts the process)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=CLOSE_TIMEOUT)

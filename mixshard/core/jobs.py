"""Background threads and who owns them: `Job` (one function, its error carried to the
caller), `JobThread` (jobs run in order), and `own`, which stops a thread once: on `close()`,
at garbage collection (on a reaper thread of its own: a join inside `threading`'s locks would
deadlock) or at exit; a forked child raises `ForkedError` rather than wait for its parent's.
docs/design.md, "Background threads and their owners", has the rules owners and targets keep.
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from . import locks
from .errors import ForkedError

CLOSE_TIMEOUT = 10.0  # seconds `close` waits for the job running

_PID = os.getpid()


def _after_fork() -> None:
    global _PID, _REAPED, _REAPER
    _PID = os.getpid()
    _REAPED, _REAPER = queue.SimpleQueue(), None  # the parent's stops are not this process's


os.register_at_fork(after_in_child=_after_fork)


def this_process() -> int:
    """The current process id (kept by an at-fork hook: no system call)."""
    return _PID


def check_process(pid: int, what: str) -> None:
    """Raise `ForkedError` when `what`, made in process `pid`, is used in another one."""
    if pid != _PID:
        raise ForkedError(
            f"{what} was made in process {pid}, before a fork, and its threads are not in this "
            f"process ({_PID}); create it in the child (e.g. in the DataLoader's "
            "worker_init_fn, or on first use there)"
        )


class Owned:
    """What `own` returns: calling it (`close()`) stops now, in the calling thread."""

    __slots__ = ("_finalizer",)

    def __init__(self, finalizer: weakref.finalize) -> None:
        self._finalizer = finalizer

    def __call__(self) -> None:
        _STOPPING.depth += 1
        try:
            self._finalizer()
        finally:
            _STOPPING.depth -= 1

    @property
    def alive(self) -> bool:
        """True until the stop has run (or been handed to the reaper)."""
        return self._finalizer.alive


def own(owner: object, stop: Callable[..., Any], *args: Any) -> Owned:
    """Call `stop(*args)` once: when the returned `Owned` is called (`close()`), when `owner`
    is collected (on the reaper's thread), or at interpreter exit (newest first); never in a
    forked child."""
    finalizer = weakref.finalize(owner, _stop_here, _PID, stop, args)
    _start_reaper()  # here, where starting a thread is safe; after `finalize` first registers
    return Owned(finalizer)  # its exit hook, so that ours runs before it


class _Stopping(threading.local):
    depth = 0  # the calling thread is inside this many `Owned` calls


_STOPPING = _Stopping()
_REAPED: queue.SimpleQueue = queue.SimpleQueue()  # (stop, args) the collector handed over
_REAPER: threading.Thread | None = None
_EXITING = False
_AT_EXIT = False  # `_at_exit` registered (a forked child inherits it)
_REAPER_LOCK = locks.Lock()


def _stop_here(pid: int, stop: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if pid != _PID:
        return
    if _EXITING or _STOPPING.depth:
        stop(*args)
    else:  # run by the collector, in whatever thread it ran: nothing that waits here
        _REAPED.put((stop, args))  # (SimpleQueue.put may be called from a finalizer)


def _start_reaper() -> None:
    global _REAPER, _AT_EXIT
    with _REAPER_LOCK:
        if not _AT_EXIT:
            atexit.register(_at_exit)
            _AT_EXIT = True
        if _REAPER is None or not _REAPER.is_alive():
            _REAPER = threading.Thread(target=_reap, name="mixshard-reaper", daemon=True)
            _REAPER.start()


def _reap() -> None:
    while (item := _REAPED.get()) is not None:
        _run_stop(*item)


def _run_stop(stop: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        stop(*args)
    except BaseException:  # noqa: BLE001 - reported as a thread's error; the reaper goes on
        threading.excepthook(
            threading.ExceptHookArgs([*sys.exc_info(), threading.current_thread()])
        )


def _at_exit() -> None:
    """Stops handed over and not run yet run here; the reaper ends (before the finalizers'
    own exit hook runs the stops still pending, in this thread too)."""
    global _EXITING
    _EXITING = True
    reaper = _REAPER
    if reaper is not None and reaper.is_alive():
        _REAPED.put(None)
        reaper.join(timeout=CLOSE_TIMEOUT)
    while True:
        try:
            item = _REAPED.get_nowait()
        except queue.Empty:
            return
        if item is not None:
            _run_stop(*item)


class Job:
    """`target()` on a daemon thread, started at once; its error is kept for the caller.

    `raise_error()` raises it (in the caller's thread), again on every call; `join` waits for
    the end. The target must not hold the object that owns the job (see the module docs).
    """

    def __init__(self, target: Callable[[], Any], name: str, start: bool = True) -> None:
        self.name = name
        self.pid = _PID
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(target,), daemon=True, name=name)
        if start:
            self._thread.start()

    def _run(self, target: Callable[[], Any]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            self.error = self.error or exc

    def start(self) -> None:
        self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def raise_error(self) -> None:
        """Raise the job's error, if it failed."""
        if self.error is not None:
            raise self.error

    def join(self, timeout: float | None = CLOSE_TIMEOUT) -> None:
        """Wait for the job to end, at most `timeout` seconds (None: however long its own
        deadlines take); not from its own thread, not for one never started."""
        if self.started and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)


class JobThread:
    """Runs submitted jobs one after another on a daemon thread.

    `wait(n)` returns once the first `n` jobs have run; a job's error is kept and raised by
    `raise_error` (and so by every later `wait`) in the caller's thread. The thread starts
    with the first job and ends with `close()`; used after a fork it raises `ForkedError`.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = _PID
        self._jobs: deque[Callable[[], Any]] = deque()
        self._cond = locks.Condition()
        self._submitted = self._done = 0
        self._closed = False
        self._error: BaseException | None = None
        self._thread: Job | None = None

    def submit(self, job: Callable[[], Any]) -> int:
        """Queue `job`; returns its number (1, 2, ...), to `wait` for."""
        check_process(self.pid, self.name)
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self.name}: submit after close")
            if self._thread is None:
                self._thread = Job(self._run, self.name)
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

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet run to the end (queued or running)."""
        with self._cond:
            return self._submitted - self._done

    def wait(self, n: int | None = None) -> None:
        """Until the first `n` jobs (default: all submitted) have run; then `raise_error`."""
        check_process(self.pid, self.name)
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
        interpreter exit aborts the process). Does nothing in a forked child."""
        if self.pid != _PID:
            return
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

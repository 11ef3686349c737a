"""The device seam: the one module that names `torch.cuda`.

Everything above it (the prefetch ring, the pool, the caches, the loader) runs one algorithm on
every device and asks this module only *how* to do the few things devices do differently: a
`Lane` runs jobs in order off the caller's critical path and hands back a `Fence` to wait on
(a side stream and an event on CUDA, a thread on a CPU, inline elsewhere); `host_empty`, `move`
and `move_index` allocate host memory and move data without a host sync; `free_memory`,
`canonical` and `accelerator` answer the device queries. docs/design.md, "One algorithm on
every device", says how each device does them, and why (timm's `PrefetchLoader`: torch's
`torch.Stream`/`torch.Event` cannot record on a CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from . import locks
from .env import available_memory
from .jobs import JobThread

Job = Callable[[], Any]


def accelerator() -> bool:
    """True when a CUDA device can be used (batches are then worth pinning)."""
    return torch.cuda.is_available()


def canonical(device: str | torch.device) -> torch.device:
    """`device` with its index: `cuda` is the current CUDA device, so two spellings of one
    device are one key."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def free_memory(device: torch.device) -> int:
    """Bytes free for a cache on `device`: free device memory, or the RAM this process may
    use."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_memory()


def host_empty(shape: tuple[int, ...], dtype: torch.dtype, pin: bool) -> torch.Tensor:
    """Host memory to read into, pinned when `pin` and a CUDA device exists (torch's pinned
    allocator keeps and reuses such buffers itself, and knows when queued copies are done)."""
    return torch.empty(shape, dtype=dtype, pin_memory=pin and accelerator())


def pinned(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in pinned memory when a CUDA device exists (a copy unless it is already)."""
    if not accelerator() or tensor.is_pinned():
        return tensor
    return tensor.pin_memory()


def wants_pinned(device: torch.device) -> bool:
    """Whether host memory bound for `device` should be pinned."""
    return device.type == "cuda"


def move(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` on `device`. From pinned memory to CUDA the copy is queued, not waited for;
    on its own device a tensor is handed back as it is."""
    return tensor.to(device, non_blocking=True)


def move_index(index: np.ndarray, device: torch.device) -> torch.Tensor:
    """An int64 index array as a tensor on `device`, without a host sync: staged through
    pinned memory and copied asynchronously on CUDA; on a CPU the array's own memory."""
    host = torch.from_numpy(np.ascontiguousarray(index, dtype=np.int64))
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        host = torch.empty(host.shape, dtype=torch.int64, pin_memory=True).copy_(host)
    return host.to(device, non_blocking=True)


class Fence:
    """What a `Lane.submit` hands back: `Lane.wait(fence)` waits for that job (and those before
    it)."""

    __slots__ = ("event", "seq")

    def __init__(self, seq: int, event: Any = None) -> None:
        self.seq, self.event = seq, event


class Lane:
    """Jobs run in submission order off the caller's critical path (see the module docstring).

    A job's error is raised by the next `wait` or `submit`, in the caller's thread, and by
    every one after it.
    """

    def __init__(
        self, device: torch.device, name: str = "mixshard-lane", threaded: bool = True
    ) -> None:
        """`threaded`: on a CPU, jobs run on a thread of the lane's (else inline, for jobs
        that only queue work: a CPU has none to overlap)."""
        self.device = device
        self._submitted = 0
        self._error: BaseException | None = None
        self._lock = locks.Lock()
        self._thread = JobThread(name) if device.type == "cpu" and threaded else None
        self._cuda = _CudaQueue(device) if device.type == "cuda" else None

    @property
    def threaded(self) -> bool:
        """True when jobs run on a thread of their own (a CPU lane)."""
        return self._thread is not None

    def submit(self, job: Job) -> Fence:
        """Queue `job`; it sees everything the caller queued before (on CUDA: the work on the
        caller's stream; on a CPU: the caller's memory, written before this call)."""
        self._raise()
        self._submitted += 1
        if self._thread is not None:
            self._thread.submit(job)
            return Fence(self._submitted)
        if self._cuda is not None:
            return Fence(self._submitted, self._cuda.run(job, self._keep))
        self._keep(job)  # inline: nothing to overlap with
        return Fence(self._submitted)

    def _keep(self, job: Job) -> None:
        """Run `job`, keeping its error for the caller's next `wait`."""
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            with self._lock:
                self._error = self._error or exc

    def wait(self, fence: Fence | None = None) -> None:
        """Until the job of `fence` (default: every job submitted) has run: on CUDA the
        caller's stream waits on its event, the host does not; on a CPU the caller blocks."""
        if self._thread is not None:
            self._thread.wait(self._submitted if fence is None else fence.seq)
        elif self._cuda is not None and fence is not None:
            self._cuda.wait(fence.event)
        elif self._cuda is not None:
            self._cuda.wait(None)
        self._raise()

    def _raise(self) -> None:
        if self._thread is not None:
            self._thread.raise_error()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """End the lane once its jobs have run (never left inside torch at exit)."""
        if self._thread is not None:
            self._thread.close()


class _CudaQueue:
    """A CUDA lane: a side stream, made once, and the event of the job queued last."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.side = torch.cuda.Stream(device)
        self.last: torch.cuda.Event | None = None

    def run(self, job: Job, keep: Callable[[Job], None]) -> torch.cuda.Event:
        consumer = torch.cuda.current_stream(self.device)
        self.side.wait_stream(consumer)  # after what the caller has queued so far
        with torch.cuda.stream(self.side):
            keep(job)
            event = torch.cuda.Event()
            event.record(self.side)
        self.last = event
        return event

    def wait(self, event: torch.cuda.Event | None) -> None:
        event = event if event is not None else self.last
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)

"""Whole shards written by the decode workers themselves, where there are enough of them.

In `LocalRun`'s chunk mode the pack process takes every image's pixels from the workers,
hashes and writes them, so that one process capped a pack's rate however many cores decoded
(`docs/design.md`, "Packing on a cluster", has the figures). With at
least as many shards to write as workers, each worker task here writes one shard instead, from
its first image to its rename, as a Ray task does (`write_shard`: the same bytes), and the pack
process only journals the shards and keeps the progress bar. Only where the workers are forked
(they are handed the plan, which is never pickled) and with one crop per image (with several, a
shard is held in memory until complete: one per worker would be too much).
"""

from __future__ import annotations

import dataclasses
import mmap
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Future, wait
from pathlib import Path

import numpy as np

from ...core.errors import PackInterrupted
from ..out.outdir import write_error
from ..out.shardwrite import Decoded, DoneShard, plan_stamps, write_shard
from ..plan.packplan import PackPlan
from . import decodeworkers
from .decodeworkers import WORKER_DIED, cannot_start, decode_chunk, start_workers

PROGRESS_EVERY = 0.25  # seconds between progress reports while shards are being written


def whole_shards(workers: int, shards: int, variants: int) -> bool:
    """Whether a local pack hands whole shards to its workers (`WholeShards`) rather than
    chunks (`LocalRun`): forked workers, more than one, a shard each at least, one crop per
    image."""
    return decodeworkers.FORKS and 1 < workers <= shards and variants == 1


class ShardJob:
    """What the workers of a whole-shard run share with the pack process, made before they are
    forked: the plan, OUT, and in shared memory a stop flag and, per task slot, the images
    decoded so far and how many of them were skipped (written by the task, read for progress)."""

    def __init__(self, plan: PackPlan, out: Path, slots: int) -> None:
        self.plan, self.out, self.slots = plan, out, slots
        self._map = mmap.mmap(-1, 8 * (1 + 2 * slots))  # MAP_SHARED | MAP_ANONYMOUS
        self._words = np.frombuffer(self._map, np.int64)

    @property
    def stopped(self) -> bool:
        return bool(self._words[0])

    def stop(self) -> None:
        """Ask every running task to stop after its chunk (its shard is not written)."""
        self._words[0] = 1

    def counts(self, slot: int) -> tuple[int, int]:
        """(images decoded, of which skipped) of the task in `slot`: the skipped read first,
        written last, so that never more are skipped than were decoded."""
        skipped = int(self._words[2 + 2 * slot])
        return int(self._words[1 + 2 * slot]), skipped

    def add(self, slot: int, images: int, skipped: int) -> None:
        self._words[1 + 2 * slot] += images
        self._words[2 + 2 * slot] += skipped

    def clear(self, slot: int) -> None:
        self._words[1 + 2 * slot : 3 + 2 * slot] = 0


class _Stopped(Exception):
    """Raised in a task between chunks once the pack process has stopped the run."""


def write_whole_shard(slot: int, index: int) -> DoneShard:
    """Worker task: decode and write planned shard `index` into OUT, counting in `slot`."""
    job = decodeworkers.shared()
    if not isinstance(job, ShardJob):
        raise RuntimeError("write_whole_shard runs in a worker forked with a ShardJob")

    def decode(keys: list[str]) -> list[Decoded]:
        if job.stopped:
            raise _Stopped
        results = decode_chunk(job.plan.decode_task(keys))
        job.add(slot, len(results), sum(isinstance(r, str) for r in results))
        return results

    sources = plan_stamps(job.plan, index)  # before its files are read
    return dataclasses.replace(write_shard(job.out, job.plan, index, decode), sources=sources)


class WholeShards:
    """Writes the planned shards `todo` with `workers` processes, one shard per task, and
    journals each as it ends (in the order they end). Arguments as `LocalRun`'s."""

    def __init__(
        self,
        plan: PackPlan,
        out: Path,
        todo: list[int],
        workers: int,
        on_chunk: Callable[[int, int], None],
        on_shard: Callable[[DoneShard], None],
        close_fds: tuple[int, ...] = (),
    ) -> None:
        self.plan, self.out, self.todo, self.workers = plan, out, deque(todo), workers
        self.on_chunk, self.on_shard, self.close_fds = on_chunk, on_shard, close_fds
        self.pending: dict[Future, tuple[int, int]] = {}  # task -> (slot, shard)
        self.reported: dict[int, tuple[int, int]] = {}  # slot -> counts reported so far

    def run(self) -> None:
        """Write every shard of `todo`.

        Raises:
            PackInterrupted: a worker died (finished shards are kept).
            WriteError: a write failed (the shard being written is removed).
        """
        slots = 2 * self.workers  # a task waits behind each running one: no worker idles
        try:
            pool, job = start_workers(
                self.workers, self.close_fds, lambda: ShardJob(self.plan, self.out, slots)
            )
        except OSError as exc:
            raise cannot_start(self.workers, exc) from None
        assert isinstance(job, ShardJob)  # forked: `whole_shards`
        free = deque(range(slots))
        try:
            self.on_chunk(0, 0)
            while self.todo or self.pending:
                while self.todo and free:
                    self._submit(pool, job, free.popleft())
                done, _ = wait(self.pending, PROGRESS_EVERY, FIRST_COMPLETED)
                self._report(job, self.pending.values())  # the finished ones' last images too
                for future in done:
                    slot, index = self.pending.pop(future)
                    free.append(slot)
                    self.on_shard(self._result(future, index))
        except BrokenExecutor:  # BrokenProcessPool
            raise PackInterrupted(*WORKER_DIED) from None
        finally:
            job.stop()  # running tasks end after their chunk and remove their partial files
            pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, pool, job: ShardJob, slot: int) -> None:
        job.clear(slot)
        self.reported[slot] = (0, 0)
        index = self.todo.popleft()
        self.pending[pool.submit(write_whole_shard, slot, index)] = (slot, index)

    def _report(self, job: ShardJob, tasks: Iterable[tuple[int, int]]) -> None:
        images = skipped = 0
        for slot, _ in tasks:
            (now, now_skipped), (was, was_skipped) = job.counts(slot), self.reported[slot]
            images, skipped = images + now - was, skipped + now_skipped - was_skipped
            self.reported[slot] = (now, now_skipped)
        if images or skipped:  # skipped alone: the images were seen a report before them
            self.on_chunk(images, skipped)

    def _result(self, future: Future, index: int) -> DoneShard:
        try:
            return future.result()
        except OSError as exc:
            raise write_error(exc, self.out / self.plan.shard_name(index)) from None

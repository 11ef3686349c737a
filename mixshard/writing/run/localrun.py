"""Running a pack plan on this machine: a pool of decode processes fed chunks of images in plan
order, and the shard builders that write their results as they arrive."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Future  # not .process: see decodeworkers
from typing import TYPE_CHECKING

from ...core.errors import PackInterrupted
from ..out.outdir import write_error
from ..out.shardwrite import Decoded, DoneShard, ShardBuilder
from ..plan.packplan import PackPlan
from .decodeworkers import (
    WORKER_DIED,
    ResultSlots,
    cannot_start,
    decode_chunk,
    decode_to_slot,
    slot_results,
    start_workers,
)

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

CHUNK = 32  # images per worker task: small enough for a smooth progress bar, large enough for IPC

# (shard index, images decoded so far, of which skipped) after each chunk
Progress = Callable[[int, int], None]


class LocalRun:
    """Decodes and writes the planned shards `todo` (in plan order) with `workers` processes.

    Args:
        plan, out: what to write, and where.
        todo: plan indices of the shards to write.
        workers: decode processes; 1 decodes in this process.
        on_chunk: called with `(images, skipped)` after each chunk of decoded images.
        on_shard: called with each finished shard (to journal it) before the next is started.
        close_fds: descriptors the decode processes must not inherit (the output lock).
    """

    def __init__(
        self,
        plan: PackPlan,
        out,
        todo: list[int],
        workers: int,
        on_chunk: Progress,
        on_shard: Callable[[DoneShard], None],
        close_fds: tuple[int, ...] = (),
    ) -> None:
        self.close_fds = close_fds
        self.plan, self.out = plan, out
        self.tasks = deque((s, start, n) for s in todo for start, n in plan.chunks(s, CHUNK))
        self.chunk = max((n for _, _, n in self.tasks), default=CHUNK)  # the largest task
        self.todo = deque(todo)
        self.workers = max(1, min(workers, len(self.tasks)))
        self.on_chunk, self.on_shard = on_chunk, on_shard
        # a chunk's results, or its task (and the result slot it writes into, if any)
        self.pending: deque[tuple[Future, int | None] | list[Decoded]] = deque()
        self.pool: ProcessPoolExecutor | None = None
        self.slots: ResultSlots | None = None
        self.submitted = 0
        options = plan.options
        self.image_shape = (options["variants"], 3, plan.size, plan.size)  # one image's pixels
        self.builder: ShardBuilder | None = None

    def _submit(self) -> None:
        s, start, n = self.tasks.popleft()
        keys = [p for p, _ in self.plan.chunk_items(s, start, n)]
        task = self.plan.decode_task(keys)
        if self.pool is None:
            self.pending.append(decode_chunk(task))
        elif self.slots is None:
            self.pending.append((self.pool.submit(decode_chunk, task), None))
        else:  # at most `slots.slots` tasks are pending: a slot is free once its task is taken
            slot = self.submitted % self.slots.slots
            self.pending.append((self.pool.submit(decode_to_slot, slot, task), slot))
        self.submitted += 1

    def _results(self, head: tuple[Future, int | None] | list[Decoded]) -> list[Decoded]:
        """A pending chunk's results once its task is done (pixels copied out of its slot)."""
        if isinstance(head, list):
            return head
        future, slot = head
        results = future.result()
        if slot is None or self.slots is None:
            return results
        return slot_results(self.slots, slot, results, self.image_shape)

    def _take(self, results: list[Decoded]) -> None:
        if self.builder is None:
            self.builder = ShardBuilder(self.out, self.plan, self.todo.popleft())
        self.builder.add(results)
        self.on_chunk(len(results), sum(isinstance(r, str) for r in results))
        if self.builder.complete:
            shard = self.builder.finish()
            self.builder = None
            self.on_shard(shard)

    def run(self) -> None:
        """Write every shard of `todo`.

        Raises:
            PackInterrupted: a decode worker died (finished shards are kept).
            WriteError: a write failed (the shard being written is removed).
        """
        ahead = 2 * self.workers if self.workers > 1 else 1
        if self.workers > 1:
            image_bytes = math.prod(self.image_shape)
            try:
                slot_bytes = self.chunk * image_bytes
                self.pool, self.slots = start_workers(
                    self.workers, self.close_fds, lambda: ResultSlots(ahead, slot_bytes)
                )
            except OSError as exc:
                raise cannot_start(self.workers, exc) from None
        try:
            self.on_chunk(0, 0)  # the first progress report, once the workers are forked
            while self.tasks or self.pending:
                while self.tasks and len(self.pending) < ahead:
                    self._submit()
                self._take(self._results(self.pending.popleft()))
        except OSError as exc:
            raise write_error(exc, self.builder.final if self.builder else self.out) from None
        except BrokenExecutor:  # BrokenProcessPool
            raise PackInterrupted(*WORKER_DIED) from None
        finally:
            if self.builder is not None:
                self.builder.abort()
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)

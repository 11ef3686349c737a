"""Running a pack plan on a Ray cluster: one task per shard.

The driver scans, plans, journals and writes `index.json`; each task decodes its shard's
images and writes the shard into OUT under its temporary name, then renames it (SRC and OUT
must be on storage every node sees: NFS, Lustre, a shared disk); into an object store, each
task writes its shard on its own node and uploads it (see `storeout`). A task whose worker dies
(node lost, out of memory) is retried by Ray; the output is a pure function of the plan, so a
retry writes the same bytes. Throughput grows with the cluster's CPUs up to one task per shard.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...core.errors import Arg, MixshardError, PackInterrupted, SkippedImagesError
from ...core.stores import is_store_url
from ..out.shardwrite import Decoded, DoneShard, write_shard
from ..plan.packplan import DecodeTask, PackPlan
from .decodeworkers import decode_chunk

# what decodes a task (`decode_chunk`; a test's stand-in)
Decode = Callable[[DecodeTask], list[Decoded]]

RETRIES = 3  # Ray retries a task whose worker process died this many times


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MixshardError(
            "packing on Ray needs Ray: pip install 'mixshard[ray]' (or pip install ray)"
        ) from None
    return ray


def connect(address: str) -> Any:
    """Connect to the Ray cluster at `address` (`"default"`: a running cluster, else a new
    local one); returns the `ray` module.

    Raises:
        MixshardError: Ray is missing or the cluster cannot be reached.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if address not in ("default", "auto", "local"):
        _probe(address)  # Ray itself retries an unreachable address for minutes
    kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    try:
        if address == "default":
            try:
                ray.init(address="auto", **kwargs)
            except ConnectionError:
                ray.init(**kwargs)
        else:
            ray.init(address=address, **kwargs)
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds for an unreachable cluster
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _unreachable(address, first) from None
    return ray


def _probe(address: str, timeout: float = 10.0) -> None:
    """Fail fast when nothing listens at a cluster address (`host:port` or `ray://host:port`)."""
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _unreachable(address, reason) from None


def _unreachable(address: str, why: str) -> MixshardError:
    return MixshardError(
        f"cannot reach the Ray cluster at {address}: {why}; check the address (`ray status` on "
        "the head node) or pack without ", Arg("ray"),
    )  # fmt: skip


def _node() -> str:
    return f"{socket.gethostname()} ({os.getpid()})"


def ray_task(plan: PackPlan, out: str, index: int, decode: Decode | None = None) -> DoneShard:
    """One Ray task: decode and write planned shard `index` into `out`; into an object store
    (`out` a URL), write it in a staging folder on the node and upload it from there."""
    if is_store_url(out):
        from ..out.storeout import staged_upload

        return staged_upload(out, lambda folder: _write(plan, folder, index, decode))
    folder = Path(out)
    if not folder.is_dir():
        raise MixshardError(
            f"{out} is not visible on Ray node {_node()}: SRC and OUT must be on storage every "
            "node sees (NFS, Lustre, a shared disk) or an object store (s3://...); nothing of "
            "this shard was written"
        )
    return _write(plan, folder, index, decode)


def _write(plan: PackPlan, folder: Path, index: int, decode: Decode | None) -> DoneShard:
    if not (plan.source.visible() if plan.source else Path(plan.src).is_dir()):
        raise MixshardError(
            f"{plan.src} is not visible on Ray node {_node()}: SRC and OUT must be on storage "
            "every node sees (NFS, Lustre, a shared disk)"
        )
    fn = decode or decode_chunk
    return write_shard(folder, plan, index, lambda keys: fn(plan.decode_task(keys)))


def run_on_ray(
    plan: PackPlan,
    out: Path | str,
    todo: list[int],
    address: str,
    on_chunk: Callable[[int, int], None],
    on_shard: Callable[[DoneShard], None],
    decode: Decode | None = None,
) -> None:
    """Write the planned shards `todo` with one Ray task each, journalling each as it ends.

    Raises:
        MixshardError: a task failed (its message names the node), or its worker died more
            than `RETRIES` times; finished shards are kept.
    """
    ray = connect(address)
    task = ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=False)(ray_task)
    plan_ref = ray.put(plan)
    target = out if isinstance(out, str) else str(Path(out).absolute())  # a URL as it is
    pending = {task.remote(plan_ref, target, i, decode): i for i in todo}
    on_chunk(0, 0)
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                index = pending.pop(ref)
                shard = _result(ray, ref, index)
                on_chunk(len(plan.shard_items(index)), len(shard.skipped))
                on_shard(shard)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def _result(ray: Any, ref: Any, index: int) -> DoneShard:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause if isinstance(exc.cause, Exception) else None
        if isinstance(cause, SkippedImagesError):
            raise SkippedImagesError(*cause.args, skipped=cause.skipped) from None
        if isinstance(cause, MixshardError):
            raise type(cause)(*cause.args) from None
        raise PackInterrupted(f"the Ray task of shard {index} failed: {cause or exc}") from None
    except ray.exceptions.RayError as exc:
        first = str(exc).strip().splitlines()[0]
        raise PackInterrupted(
            f"the Ray task of shard {index} failed {RETRIES + 1} times ({first}); finished "
            "shards are kept"
        ) from None

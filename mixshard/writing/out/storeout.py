"""Packing into an object store (`s3://bucket/prefix`, `gs://...`, any fsspec protocol).

The local packer writes each shard into a staging folder, the `Uploader` uploads and deletes it
(staging stays bounded), each shard's journal line becomes an object of its own for `--resume`
(`journaled`, `altered`), and `index.json` goes last, so a reader never sees a half pack. The
lock is a `Marker` object with a heartbeat, taken over once its run is gone. What each step
keeps and why is user-facing: docs/packing-to-a-store.md says it in full.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import json
import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ...core.constants import JOURNAL_GLOB, JOURNAL_NAME, LOCK_NAME, MANIFEST_NAME
from ...core.errors import OutputError
from ...core.files import user_cache_dir
from ...core.jobs import Job
from ...core.stores import Store
from .outdir import is_ours, not_empty, part_suffix
from .shardwrite import DoneShard

STAGING_ENV = "MIXSHARD_STAGING"  # where shards wait for their upload (default: the user cache)
HEARTBEAT = 30.0  # seconds between rewrites of the lock marker
STALE_AFTER = 180.0  # a marker not rewritten for this long belongs to a run that died
IN_FLIGHT = 1  # finished shards that may wait for the upload before the packer waits
KEPT = "(the old pack is kept until the new one is complete)"  # true of a folder only
DELETED = "(in an object store the old pack is deleted first)"


def staging_root() -> Path:
    """`$MIXSHARD_STAGING`, else `mixshard/staging` in the user's cache folder."""
    if os.environ.get(STAGING_ENV):
        return Path(os.environ[STAGING_ENV])
    return user_cache_dir() / "staging"


def _holder_line(holder: dict) -> str:
    return (
        f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started')} "
        f"({holder.get('command')})"
    )


def _alive(holder: dict) -> bool:
    """Whether the run a marker names may still be running."""
    beat, pid = holder.get("beat"), holder.get("pid")
    if not isinstance(beat, (int, float)):
        return False
    if holder.get("host") == os.uname().nodename and isinstance(pid, int):
        import psutil

        return psutil.pid_exists(pid)
    return time.time() - beat < STALE_AFTER


MAKE_BUCKET = {  # how to make a bucket, by scheme (for the error that says there is none)
    "s3": "for S3: `aws s3 mb {}`",
    "gs": "for GCS: `gcloud storage buckets create {}`",
}


class Marker:
    """The lock of a pack in a store: a marker object, rewritten by a thread until `release`.

    A whole pack (or a finish run) is refused while any live marker is there; a job-array part
    while the whole-pack marker or its own part's is.
    """

    def __init__(self, store: Store, part: tuple[int, int] | None) -> None:
        from .outlock import _command

        self.store, self.name = store, LOCK_NAME + part_suffix(part)
        self.holder = {
            "token": uuid.uuid4().hex,
            "pid": os.getpid(),
            "host": os.uname().nodename,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": _command(),
        }
        self._stop = threading.Event()
        self._thread: Job | None = None

    def _read(self, name: str) -> dict | None:
        try:
            found = json.loads(self.store.read(name))
        except ValueError:
            return None
        return found if isinstance(found, dict) else None

    def _data(self) -> bytes:
        return json.dumps({**self.holder, "beat": time.time()}).encode()

    def _write(self) -> None:
        self.store.write(self.name, self._data())

    def _busy(self, holder: dict) -> OutputError:
        return OutputError(
            f"{self.store.url} is in use by another mixshard pack ({_holder_line(holder)}); wait "
            f"for it to finish or stop it, then run this again (the marker {LOCK_NAME} of a run "
            f"that died is taken over after {STALE_AFTER:.0f} s)"
        )

    def take(self, names: list[str]) -> None:
        """Write the marker, unless a live one is among `names` (the prefix's objects)."""
        for name in sorted(n for n in names if n.startswith(LOCK_NAME)):
            if self.name != LOCK_NAME and name not in (LOCK_NAME, self.name):
                continue  # another part: parts run side by side
            holder = self._read(name)
            if holder is not None and _alive(holder):
                raise self._busy(holder)
        if self.name in names:
            self._write()  # a marker of a run that died: taken over
        else:  # False when another run made its marker since the listing: read back below
            self.store.create(self.name, self._data())
        back = self._read(self.name)
        if back is None or back.get("token") != self.holder["token"]:
            raise self._busy(back or {})
        self._thread = Job(self._beat, "mixshard-marker")

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            with contextlib.suppress(Exception):
                self._write()

    def release(self) -> None:
        """Stop the heartbeat and remove the marker (when it is still ours)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        with contextlib.suppress(Exception):
            back = self._read(self.name)
            if back is not None and back.get("token") == self.holder["token"]:
                self.store.remove(self.name)


REHASH_THREADS = 4  # objects read back at once by a resumed run, to check their sha256


def journaled(data: bytes) -> tuple[str | None, str | None, str | None]:
    """`(shard name, object version, sha256)` a journal object recorded (Nones: none, or not
    a shard's journal)."""
    try:
        head, line = data.decode().splitlines()[:2]
        info = json.loads(line).get("info") or {}
        return info.get("name"), json.loads(head).get("object"), info.get("sha256")
    except (ValueError, AttributeError):
        return None, None, None  # a journal cut short: load_done redoes its shard


def altered(store: Store, reuse: list[tuple[str, str]]) -> list[str]:
    """The shards of `reuse` (`(name, sha256)`) whose object's sha256 is not the one given:
    each object read once, `REHASH_THREADS` at a time."""
    if not reuse:
        return []
    with ThreadPoolExecutor(REHASH_THREADS, thread_name_prefix="mixshard-rehash") as pool:
        found = list(pool.map(lambda r: store.sha256(r[0]) != r[1], reuse))
    return [name for (name, _), bad in zip(reuse, found) if bad]


class Uploader:
    """Uploads finished shards from the staging folder on a thread, one at a time, deletes
    each, then calls `record` with it; at most `IN_FLIGHT` wait, so staging stays bounded."""

    def __init__(self, store: Store, folder: Path, record: Callable[[DoneShard], None]) -> None:
        self.store, self.folder, self.record = store, folder, record
        self.queue: queue.Queue[DoneShard | None] = queue.Queue(maxsize=IN_FLIGHT)
        self.error: BaseException | None = None
        self.cancelled = False
        self.thread = Job(self._loop, "mixshard-upload")

    def submit(self, shard: DoneShard) -> None:
        """Queue a finished shard (waits while `IN_FLIGHT` do); raises an upload's error."""
        while True:
            self._check()
            try:
                self.queue.put(shard, timeout=0.2)
                return
            except queue.Full:
                continue

    def _loop(self) -> None:
        while (shard := self.queue.get()) is not None:
            if self.error is not None or self.cancelled:
                continue
            try:
                if shard.info is not None:
                    local = self.folder / shard.info.name
                    self.store.upload(local, shard.info.name)
                    local.unlink()
                self.record(shard)
            except BaseException as exc:  # carried to the packer by `_check`
                self.error = exc

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def drain(self) -> None:
        """Wait for every queued upload; raises the first upload error."""
        self.queue.put(None)
        self.thread.join(None)  # as long as the uploads' own store deadlines
        self._check()

    def stop(self) -> None:
        """Drop what is queued and wait for the upload under way (after a failure)."""
        if self.thread.alive:
            self.cancelled = True
            self.queue.put(None)
            self.thread.join(None)


class StoreOut:
    """The output of one `pack` into a store prefix: its staging folder, marker and uploads.

    Args:
        url: `scheme://bucket/prefix`.
        part: the job-array part this run writes, if any (each part stages apart).
    """

    def __init__(self, url: str, part: tuple[int, int] | None) -> None:
        self.store = Store(url)  # a missing extra fails here, before anything is written
        self.url, self.part = self.store.url, part
        key = hashlib.sha256((self.url + part_suffix(part)).encode()).hexdigest()[:16]
        self.staging = staging_root() / key
        self.sizes: dict[str, int] = {}  # the prefix's objects when the run began
        self.uploaded = 0  # images in shards uploaded by this run
        self._last: Any = None
        self._uploader: Uploader | None = None

    def run(self, work: Callable[[], Any], *, resume: bool, overwrite: bool, finish: bool) -> Any:
        """Take the marker, prepare the prefix and staging, run `work` (which packs into
        `staging`), then upload `index.json` when it made one. Returns `work`'s result with
        `out` the URL."""
        marker = Marker(self.store, None if finish else self.part)
        found = self.store.objects()  # one listing: sizes for the checks, versions for resume
        listing = {name: size for name, (size, _) in found.items()}
        if not listing and not self.store.bucket_exists():
            bucket = "/".join(self.url.split("/")[:3])
            how = MAKE_BUCKET.get(bucket.split(":")[0], "with your store's own tool")
            raise OutputError(
                f"{self.url}: the bucket {bucket} does not exist; create it first "
                f"({how.format(bucket)}) or check its name. Nothing was written"
            )
        marker.take(list(listing))
        try:
            again = resume or finish or self.part is not None
            self._prepare(found, again, overwrite, rehash=again and not finish)
            try:
                result = work()
            except OutputError as exc:
                if type(exc) is not OutputError:
                    raise  # a failed write names the staging file, where it failed
                parts = (
                    p.replace(str(self.staging), self.url).replace(KEPT, DELETED)
                    if isinstance(p, str) else p
                    for p in exc.args
                )  # fmt: skip
                raise OutputError(*parts) from None
            if result.manifest is not None and not result.already_complete:
                self._publish()
            return dataclasses.replace(result, out=self.url)
        finally:
            marker.release()
            shutil.rmtree(self.staging, ignore_errors=True)

    def _prepare(
        self,
        found: dict[str, tuple[int, str | None]],
        resume: bool,
        overwrite: bool,
        rehash: bool = False,
    ) -> None:
        """Check the prefix and fill staging with what a resumed run needs. With `rehash` (a
        resumed run, not `--finish`), every shard this run would reuse is read back once and
        its sha256 checked against the journal's."""
        names = sorted(n for n in found if not n.startswith(LOCK_NAME))
        foreign = [n for n in names if not is_ours(n)]
        if foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise OutputError(
                f"{self.url} holds objects mixshard did not write ({shown}); nothing was "
                "written. Choose an empty or new prefix"
            )
        if names and overwrite:
            # index.json first: from then on a reader finds no pack, never a mix of two
            for name in sorted(names, key=lambda n: n != MANIFEST_NAME):
                self.store.remove(name)
            names = []
        if names and not resume:
            raise not_empty(self.url)
        self.sizes = {n: found[n][0] for n in names}
        shutil.rmtree(self.staging, ignore_errors=True)  # what a killed run left: redone
        self.staging.mkdir(parents=True, exist_ok=True)
        tags = {n: found[n][1] for n in names}
        ours = JOURNAL_NAME.replace(".jsonl", part_suffix(self.part) + ".[0-9]*.jsonl")
        reuse: list[tuple[str, str]] = []  # (shard, sha256) this run would reuse
        for name in names:
            if name == MANIFEST_NAME or fnmatch.fnmatch(name, JOURNAL_GLOB):
                data = self.store.read(name)
                (self.staging / name).write_bytes(data)
                shard, tag, digest = journaled(data)
                if shard is None or shard not in self.sizes:
                    continue
                if tag is not None and tags.get(shard) != tag:
                    self.sizes.pop(shard)  # rewritten since it was journaled: redone
                elif rehash and digest and fnmatch.fnmatch(name, ours):
                    reuse.append((shard, digest))
        for shard in altered(self.store, reuse):
            self.sizes.pop(shard)  # not the bytes that were hashed before the upload: redone

    def _publish(self) -> None:
        self.store.upload(self.staging / MANIFEST_NAME, MANIFEST_NAME)
        for name in self.store.listing():
            if fnmatch.fnmatch(name, JOURNAL_GLOB):
                self.store.remove(name)

    def progress(self, report: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
        """`report` given progress with `uploaded` (images in shards now in the store)."""
        if report is None:
            return None

        def with_uploads(p: Any) -> None:
            self._last = p
            report(dataclasses.replace(p, uploaded=self.uploaded))

        self._report = with_uploads
        return with_uploads

    def staged(self, images: int, plan: Any) -> int:
        """Images the staging folder holds at most, of a run of `plan` that writes `images`."""
        shard = plan.options["shard_size"] * plan.options["variants"]
        return min(images, (IN_FLIGHT + 2) * shard)

    def start(self, tracker: Any, uploaded: bool) -> Callable[[DoneShard], None]:
        """The `on_shard` of a run: journal the shard, locally and as a journal object of its
        own (`.mixshard-pack[.part-K-of-N].NNNNNN.jsonl`: a header and its line, so the bytes
        uploaded per shard do not grow with the pack), after uploading the shard itself unless
        `uploaded` (Ray tasks upload their own)."""
        fingerprint = tracker.plan.fingerprint

        def record(shard: DoneShard) -> None:
            tracker.shard(shard)
            line = tracker.done[shard.index].to_json()  # with its source stamps
            name = JOURNAL_NAME.replace(
                ".jsonl", f"{part_suffix(self.part)}.{shard.index:06d}.jsonl"
            )
            # the object's version as uploaded: a resumed run reuses only that version
            tag = self.store.tag(shard.info.name) if shard.info else None
            header = json.dumps({"fingerprint": fingerprint, "object": tag})
            self.store.write(name, f"{header}\n{line}\n".encode())
            self.uploaded += shard.info.count if shard.info else 0
            if self._last is not None:
                self._report(self._last)

        if uploaded:
            return record
        self._uploader = Uploader(self.store, self.staging, record)
        return self._uploader.submit

    def drain(self) -> None:
        if self._uploader is not None:
            self._uploader.drain()

    def stop(self) -> None:
        if self._uploader is not None:
            self._uploader.stop()
            self._uploader = None


def staged_upload(url: str, write: Callable[[Path], DoneShard]) -> DoneShard:
    """Write one shard into a temporary folder here, upload it to the prefix `url` and delete
    it (a Ray task: the nodes share no file system)."""
    root = staging_root()
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="ray-", dir=root))
    try:
        shard = write(folder)
        if shard.info is not None:
            Store(url).upload(folder / shard.info.name, shard.info.name)
        return shard
    finally:
        shutil.rmtree(folder, ignore_errors=True)

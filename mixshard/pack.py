"""scan -> parallel decode -> deterministic shards + manifest, resumable. Never imports torch.

The plan is fixed before any pixel is decoded: the (seeded, shuffled) image order and which
images go to which shard depend only on SRC's file list and the options. Shards are built in
order, each written under a temporary name, fsync'd and renamed, then recorded in a journal;
`--resume` reuses the recorded shards and redoes the rest, so a resumed pack is byte-identical
to an uninterrupted one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .constants import CROP_MODES, JOURNAL_NAME, MANIFEST_NAME, RESAMPLE, TMP_SUFFIX, shard_name
from .decodepool import decode_chunk, start_pool
from .errors import MixshardError, OutputError, SkippedImagesError
from .format import Manifest, ShardInfo, ShardWriter, fsync_dir
from .packdir import DoneShard, load_journal, open_journal, prepare_out
from .scan import ScanResult, path_key, scan

CHUNK = 32  # images per worker task: small enough for a smooth progress bar, large enough for IPC


@dataclass(frozen=True)
class PackProgress:
    """Progress of a running pack, in source images."""

    total: int
    done: int
    skipped: int


@dataclass(frozen=True)
class PackResult:
    """What `pack` made."""

    manifest: Manifest
    out: Path
    seconds: float
    reused_shards: int
    already_complete: bool = False


@dataclass
class _Plan:
    items: list[tuple[str, int]]  # pack order
    per_shard: int  # source images per shard
    options: dict
    fingerprint: str

    @property
    def n_shards(self) -> int:
        return math.ceil(len(self.items) / self.per_shard)

    def shard_items(self, s: int) -> list[tuple[str, int]]:
        return self.items[s * self.per_shard : (s + 1) * self.per_shard]


def _make_plan(found: ScanResult, options: dict, size: int, block_size: int) -> _Plan:
    items = list(found.items)
    if options["shuffle"]:
        order = np.random.default_rng([options["seed"], 1]).permutation(len(items))
        items = [items[i] for i in order]
    per_shard = max(1, options["shard_size"] // options["variants"])
    payload = json.dumps([size, block_size, options, items, found.skipped, found.classes]).encode()
    return _Plan(items, per_shard, options, hashlib.sha256(payload).hexdigest())


class _ShardBuilder:
    """Collects one planned shard's decoded images and writes them block by block.

    Blocks go to disk as soon as they are full, so writing overlaps decoding; only with
    several variants per image (whose crops are spread over the shard) is the shard held in
    memory until it is complete. The file appears under its final name only when complete.
    """

    def __init__(
        self, out: Path, plan: _Plan, index: int, name: str, first_block: int, block_size: int
    ) -> None:
        self.items = plan.shard_items(index)
        self.name, self.block_size = name, block_size
        self.variants = plan.options["variants"]
        self.spread_seed = (
            [plan.options["seed"], 2, index]
            if self.variants > 1 and plan.options["shuffle"]
            else None
        )
        self.final = out / name
        self.tmp = out / (name + TMP_SUFFIX)
        self.next_block = first_block
        self.received = 0
        self.skipped: list[dict[str, str]] = []
        self._images: list[np.ndarray] = []  # decoded, not yet written; (variants, 3, S, S) each
        self._labels: list[int] = []
        self._keys: list[str] = []
        self._file = None
        self._writer: ShardWriter | None = None

    @property
    def complete(self) -> bool:
        return self.received == len(self.items)

    def add(self, results: list[np.ndarray | str]) -> None:
        """Take the next decoded results (pixels or skip reasons), in plan order."""
        for result in results:
            path, label = self.items[self.received]
            self.received += 1
            if isinstance(result, str):
                self.skipped.append({"path": path, "reason": result})
                continue
            self._images.append(result)
            self._labels += [label] * self.variants
            self._keys += [path] * self.variants
        if self.spread_seed is None:
            while len(self._keys) >= self.block_size:
                self._write_blocks(self.block_size)

    def _write_blocks(self, upto: int) -> None:
        """Write the first `upto` pending images (all, in blocks, when `upto` is larger)."""
        images = np.concatenate(self._images)
        labels = np.asarray(self._labels, dtype=np.int32)
        keys = self._keys
        if self.spread_seed is not None:  # spread an image's crops over the shard
            order = np.random.default_rng(self.spread_seed).permutation(len(images))
            images, labels, keys = images[order], labels[order], [keys[i] for i in order]
        if self._writer is None:
            self._file = open(self.tmp, "wb")  # noqa: SIM115 - closed in finish or abort
            self._writer = ShardWriter(self._file)
        upto = min(upto, len(keys))
        for start in range(0, upto, self.block_size):
            end = min(start + self.block_size, upto)
            self._writer.add_block(
                self.next_block, images[start:end], labels[start:end], keys[start:end]
            )
            self.next_block += 1
        rest = images[upto:]
        self._images = [rest] if len(rest) else []
        self._labels = self._labels[upto:]
        self._keys = keys[upto:]

    def finish(self) -> DoneShard:
        """Write what is left, close, fsync and rename; the shard is then complete on disk."""
        if self._keys:
            self._write_blocks(len(self._keys))
        if self._writer is None:
            return DoneShard(None, self.skipped)  # every image of this shard was skipped
        nbytes, digest = self._writer.finish()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.tmp, self.final)
        fsync_dir(self.final.parent)
        info = ShardInfo(self.name, self._writer.count, nbytes, digest, tuple(self._writer.blocks))
        return DoneShard(info, self.skipped)

    def abort(self) -> None:
        """Remove the temporary file: never leave half a shard behind."""
        if self._file is not None:
            self._file.close()
        self.tmp.unlink(missing_ok=True)


def pack(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    size: int = 84,
    crop: str = "center",
    variants: int = 1,
    shard_size: int = 10_000,
    block_size: int = 256,
    workers: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    labels: str = "auto",
    strict: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    progress: Callable[[PackProgress], None] | None = None,
) -> PackResult:
    """Pack an ImageFolder tree or a flat folder of images into pre-resized uint8 shards.

    Args:
        src: source folder (ImageFolder tree or flat folder).
        out: output folder; must be empty or missing unless `resume`/`overwrite`.
        size: side of the stored square images.
        crop: `"center"`, `"random"` (RandomResizedCrop from the full-size image) or `"full"`.
        variants: independent random crops per source image (needs `crop="random"`).
        shard_size: images per shard.
        block_size: images per tar member (block).
        workers: decode processes; default all cores; 1 decodes in this process.
        seed: seed of the image order and of the random crops.
        shuffle: shuffle the image order (seeded) so every shard mixes classes.
        labels: `"auto"`, `"folders"` or `"none"`.
        strict: raise `SkippedImagesError` instead of skipping unreadable images.
        resume: finish an interrupted pack in `out`.
        overwrite: replace an earlier pack in `out`.
        progress: called with a `PackProgress` after each batch of decoded images.

    Returns:
        A `PackResult` with the manifest that was written.

    Raises:
        MixshardError: bad source, unusable output, skipped images under `strict`, a dead
            worker, or a failed write.

    Example:
        >>> pack("places365_standard/train", "data/places365_standard", workers=16)
    """
    if crop not in CROP_MODES:
        raise ValueError(f"unknown crop mode {crop!r}; use one of {', '.join(CROP_MODES)}")
    if variants < 1 or size < 1 or shard_size < 1 or block_size < 1 or seed < 0:
        raise ValueError("size, variants, shard_size and block_size must be >= 1, seed >= 0")
    if variants > 1 and crop != "random":
        raise MixshardError("--variants > 1 needs --crop random (other crops are all the same)")
    if variants > shard_size:
        raise MixshardError(f"--variants {variants} exceeds --shard-size {shard_size}")
    workers = workers or os.cpu_count() or 1
    t0 = time.perf_counter()
    src, out = Path(src), Path(out)
    found = scan(src, labels)  # before touching OUT: a bad SRC must not change anything
    if strict and found.skipped:
        raise _strict_error(found.skipped)
    prepare_out(out, resume, overwrite)

    options = {
        "crop": crop,
        "variants": variants,
        "seed": seed,
        "resample": RESAMPLE,
        "shuffle": shuffle,
        "labels": found.labels,
        "shard_size": shard_size,
    }
    plan = _make_plan(found, options, size, block_size)
    if resume and (out / MANIFEST_NAME).exists():
        manifest = Manifest.load(out)
        if (
            manifest.options != options
            or manifest.size != size
            or manifest.block_size != block_size
        ):
            raise OutputError(
                f"{out} holds a finished pack made with other options; pass "
                "--overwrite to replace it"
            )
        return PackResult(manifest, out, time.perf_counter() - t0, len(manifest.shards), True)

    done = load_journal(out, plan.fingerprint) if resume else {}
    for name in os.listdir(out):
        if name.endswith(TMP_SUFFIX):
            (out / name).unlink()
    journal = open_journal(out, plan.fingerprint, done)
    try:
        shards = _run(
            src,
            out,
            plan,
            done,
            journal,
            size=size,
            block_size=block_size,
            workers=workers,
            strict=strict,
            progress=progress,
        )
    finally:
        journal.close()

    skipped = list(found.skipped) + [s for d in shards for s in d.skipped]
    skipped.sort(key=lambda s: path_key(s["path"]))
    infos = tuple(d.info for d in shards if d.info is not None)
    manifest = Manifest(
        size=size,
        block_size=block_size,
        count=sum(i.count for i in infos),
        classes=tuple(found.classes),
        options=options,
        skipped=tuple(skipped),
        shards=infos,
    )
    manifest.save(out)
    (out / JOURNAL_NAME).unlink()
    return PackResult(manifest, out, time.perf_counter() - t0, len(done))


def _strict_error(skipped: list[dict[str, str]]) -> SkippedImagesError:
    shown = "; ".join(f"{s['path']} ({s['reason']})" for s in skipped[:10])
    more = f"; and {len(skipped) - 10} more" if len(skipped) > 10 else ""
    return SkippedImagesError(
        f"--strict: {len(skipped)} file(s) could not be read: {shown}{more}. Fix or remove them "
        "(then pack again), or drop --strict to skip them",
        skipped,
    )


def _run(src, out, plan, done, journal, *, size, block_size, workers, strict, progress):
    """Decode and write every shard not in `done`; returns all shards in plan order."""
    opts = plan.options
    total = len(plan.items)
    shards: list[DoneShard] = [done[i] for i in sorted(done)]
    n_done = sum(len(plan.shard_items(i)) for i in done)
    n_skipped = sum(len(d.skipped) for d in shards)
    next_block = sum(len(d.info.blocks) for d in shards if d.info is not None)
    next_name = sum(1 for d in shards if d.info is not None)
    tasks = [
        (s, start)
        for s in range(len(done), plan.n_shards)
        for start in range(0, len(plan.shard_items(s)), CHUNK)
    ]
    args = (size, opts["crop"], opts["variants"], opts["seed"])
    pool = start_pool(min(workers, len(tasks))) if workers > 1 and len(tasks) > 1 else None
    if progress:
        progress(PackProgress(total, n_done, n_skipped))
    pending: deque[Future | list] = deque()

    def submit(task: tuple[int, int]) -> None:
        s, start = task
        keys = [p for p, _ in plan.shard_items(s)[start : start + CHUNK]]
        if pool is None:
            pending.append(decode_chunk(str(src), keys, *args))
        else:
            pending.append(pool.submit(decode_chunk, str(src), keys, *args))

    builder = None
    try:
        queue = deque(tasks)
        shard_index = len(done)
        while queue or pending:
            while queue and len(pending) < (2 * workers if pool else 1):
                submit(queue.popleft())
            head = pending.popleft()
            results = head.result() if isinstance(head, Future) else head
            if builder is None:
                builder = _ShardBuilder(
                    out, plan, shard_index, shard_name(next_name), next_block, block_size
                )
            bad = sum(isinstance(r, str) for r in results)
            if strict and bad:
                raise _strict_error(
                    builder.skipped
                    + [
                        {"path": path, "reason": r}
                        for (path, _), r in zip(builder.items[builder.received :], results)
                        if isinstance(r, str)
                    ]
                )
            builder.add(results)
            n_done += len(results)
            n_skipped += bad
            if progress:
                progress(PackProgress(total, n_done, n_skipped))
            if builder.complete:
                shard = builder.finish()
                builder = None
                journal.write(shard.to_json(shard_index) + "\n")
                journal.flush()
                os.fsync(journal.fileno())
                shards.append(shard)
                if shard.info is not None:
                    next_block += len(shard.info.blocks)
                    next_name += 1
                shard_index += 1
    except BaseException as exc:
        if builder is not None:
            builder.abort()
        if isinstance(exc, BrokenProcessPool):
            raise MixshardError(
                "a decode worker process died (out of memory, or a crash inside an image "
                "library); finished shards are kept: rerun with --resume, and with --workers 1 "
                "to find the file"
            ) from None
        if isinstance(exc, OSError):
            hint = "free some space and" if exc.errno == errno.ENOSPC else "fix it and"
            where = builder.final if builder is not None else out
            raise OutputError(
                f"cannot write {where}: {exc.strerror}; {hint} rerun with --resume to continue "
                "(finished shards are kept)"
            ) from None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return shards

"""`pack`: scan -> plan -> decode and write shards -> `index.json`. Never imports torch.

The options are checked and the plan made (`plan/`) before any pixel is decoded or OUT is
touched. Shards are written under temporary names, fsync'd, renamed and recorded in a journal
(`out/`), by this machine, by Ray tasks or by the parts of a job array (`run/`); `index.json`
is written last. Resuming reuses the recorded shards and redoes the rest, so every way of
running a plan gives the same bytes. What it reports while it runs (`PackProgress`) and what it
made (`PackResult`) are here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.choices import ClipList, Crop, Labels, Resample
from ..core.constants import MANIFEST_NAME, RESAMPLE
from ..core.env import usable_cpus
from ..core.errors import OutputError, SkippedImagesError, SourceError
from ..core.manifest import Manifest
from ..core.stores import check_location, is_store_url
from .out.outdir import (
    Journal,
    check_apart,
    check_free_space,
    check_out_path,
    holds_files,
    load_done,
    missing_message,
    part_suffix,
    prepare_out,
    remove_journals,
    remove_partials,
    remove_run,
    write_error,
)
from .out.outlock import OutLock
from .out.replace import replace_pack
from .out.shardwrite import DoneShard, plan_stamps, strict_error
from .out.sourceid import check_source, run_summary, source_record
from .plan.clipplan import finish_clips, plan_clips
from .plan.options import PackOptions, check_modes, clip_options
from .plan.packplan import PackPlan, finished_pack, make_plan
from .run.ctrlc import CtrlC
from .sources.archive import MEMBERS_FILE, materialize, open_source, remove_members
from .sources.scanning import path_key

if TYPE_CHECKING:
    from .out.storeout import StoreOut


@dataclass(frozen=True)
class PackProgress:
    """Progress of a running pack: `done` of `total` images written (a source image counts
    once per variant), and how many source files were skipped.

    While a clip pack's probe of a video has run over a second (before the plan exists: then
    `total`, `done` and `skipped` are 0), `probing` names the video and `probed` counts the
    bytes read of it."""

    total: int
    done: int
    skipped: int
    uploaded: int | None = None  # into an object store: images in shards uploaded so far
    probing: str | None = None
    probed: int = 0


@dataclass(frozen=True)
class PackResult:
    """What `pack` made. For a job-array part, `manifest` is None until the finish run."""

    manifest: Manifest | None
    out: Path | str  # a str: the URL of an object store prefix
    seconds: float
    reused_shards: int
    already_complete: bool = False
    written_shards: int = 0
    rewritten_shards: int = 0  # finished before, rewritten: a source file of theirs changed


class _Tracker:
    """Counts progress and journals finished shards for one run."""

    def __init__(self, plan: PackPlan, done: dict[int, DoneShard], progress, journal: Journal):
        self.plan, self.done, self.journal = plan, done, journal
        self.stamps: dict[int, list] = {}  # of the shards to write, taken before decoding
        self.progress = progress
        self.variants = plan.options["variants"]
        self.total = len(plan.items) * self.variants
        self.count = sum(len(plan.shard_items(i)) for i in done) * self.variants
        self.skipped = sum(len(d.skipped) for d in done.values())
        self.written = 0
        self.ctrl_c = CtrlC()

    def report(self) -> None:
        if self.progress:
            self.progress(PackProgress(self.total, self.count, self.skipped))

    def chunk(self, images: int, skipped: int) -> None:
        self.ctrl_c.check()  # a Ctrl-C Python dropped (see `CtrlC`) ends the run here
        self.count += images * self.variants
        self.skipped += skipped
        self.report()

    def shard(self, shard: DoneShard) -> None:
        # the stamps taken before it was decoded: here, or by the worker that wrote it whole
        shard = dataclasses.replace(shard, sources=self.stamps.get(shard.index, shard.sources))
        self.journal.record(shard)
        self.done[shard.index] = shard
        self.written += 1


def _plan(src: Path, within: str | None, options: PackOptions) -> PackPlan:
    """The plan of an image pack. Made before OUT is touched: a bad SRC changes nothing."""
    source, found = open_source(src, within, options.labels)
    folder = source.reader.kind == "folder"
    return make_plan(
        str(src) if folder else source.label, found, size=options.size, crop=options.crop,
        variants=options.variants, shard_size=options.shard_size, block_size=options.block_size,
        seed=options.seed, shuffle=options.shuffle, resample=options.resample, grey=options.grey,
        source=None if folder else source,
    )  # fmt: skip


def _probing(progress: Callable[[PackProgress], None] | None) -> Callable[[str, int], None] | None:
    """A clip pack's long probe of a video (its name, bytes read) as `PackProgress`."""
    if progress is None:
        return None
    return lambda name, read: progress(PackProgress(0, 0, 0, probing=name, probed=read))


def pack(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    size: int = 84,
    crop: Crop = "center",
    variants: int = 1,
    shard_size: int = 10_000,
    block_size: int = 256,
    workers: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    labels: Labels = "auto",
    strict: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    progress: Callable[[PackProgress], None] | None = None,
    part: tuple[int, int] | None = None,
    finish: bool = False,
    ray: str | None = None,
    within: str | None = None,
    clips: bool = False,
    every: int = 1,
    max_frames: int | None = None,
    shuffle_clips: bool = False,
    clip_list: ClipList | None = None,
    resample: Resample = RESAMPLE,
    grey: bool = False,
) -> PackResult:
    """Pack an ImageFolder tree or a flat folder of images into pre-resized uint8 shards.

    Args:
        src: source folder (ImageFolder tree or flat folder), or a `.tar`, `.tar.gz` or `.zip`
            archive of one, read in place (nothing is extracted): the pack is byte-identical
            to packing the extracted folder.
        out: output folder; must be empty or missing unless `resume`/`overwrite`. Or an object
            store prefix (`s3://bucket/prefix`): shards are staged in `$MIXSHARD_STAGING` (default
            the user cache) and uploaded as each is finished, `index.json` last.
        size: side of the stored square images.
        crop: `"center"`, `"random"` (RandomResizedCrop from the full-size image) or `"full"`.
        variants: independent random crops per source image (needs `crop="random"`).
        shard_size: images per shard.
        block_size: images per tar member (block).
        workers: decode processes; default the CPUs this process may use; 1 decodes here.
        seed: seed of the image order and of the random crops.
        shuffle: shuffle the image order (seeded) so every shard mixes classes.
        labels: `"auto"`, `"folders"` or `"none"`.
        strict: raise `SkippedImagesError` instead of skipping unreadable images.
        resume: finish an interrupted pack in `out`.
        overwrite: replace an earlier pack in `out`.
        progress: called with a `PackProgress` after each batch of decoded images.
        part: `(k, n)`: write only the shards `i` with `i % n == k` (a job-array part) and
            its own journal; a run with `finish=True` then writes `index.json`.
        finish: once every part has run (same SRC and options): check that every planned
            shard is there and write `index.json`; `OutputError` names the missing parts.
        ray: run one Ray task per shard on this cluster address (`"auto"`, `"ray://..."`) or,
            with `"default"`, on a running cluster else a local one.
        within: the folder inside the archive `src` to pack (`"places365_standard/train"`),
            as if the archive had been extracted and that folder given; `"."`: its root.
        clips: pack video clips (`clipplan.py`): with `every`, `max_frames`, `shuffle_clips`,
            and `clip_list` (only a benchmark list's clips, in its order).
        resample: the resize filter, recorded in `index.json`: `"bilinear"` (PIL's bilinear,
            antialiased when shrinking) or `"bilinear-no-antialias"` (as `F.interpolate(mode=
            "bilinear", align_corners=False)` and `tf.image.resize` resize, within a level:
            how DMC-GB, DCS and DMC-VB resize their videos; images are decoded at full size)
            or `"bicubic"` (PIL's `Image.resize(..., BICUBIC)` byte for byte, DMC-GB2's).
        grey: store grey frames, the grey in all three channels (`options.grey` in
            `index.json`): a video's as FFmpeg's grey of each decoded frame (the full-range Y
            plane, as DBC reads its videos), before the resize; an image's by BT.601's weights.

    Returns:
        A `PackResult` with the manifest that was written.

    Raises:
        ValueError: options no pack can be made with.
        MixshardError: bad source, unusable output (in use, full, not ours), skipped images
            under `strict`, a dead worker, or a failed write.

    Example:
        >>> pack("places365_standard/train", "data/places365_standard", workers=16)
    """
    options = PackOptions(
        size=size, crop=crop, variants=variants, shard_size=shard_size, block_size=block_size,
        seed=seed, shuffle=shuffle, labels=labels, resample=resample, grey=grey,
        clips=clip_options(clips, every, max_frames, shuffle_clips, clip_list),
    )  # fmt: skip
    check_modes(resume, overwrite, part, finish, ray)
    t0 = time.perf_counter()
    with CtrlC() as ctrl_c:  # a Ctrl-C Python drops is raised again (see `CtrlC`)
        check_location(out)
        sink = _store_out(out, part)
        src, out = Path(src), sink.staging if sink else Path(out)
        check_out_path(out)
        check_apart(src, out)
        plan = plan_clips(src, within, options, _probing(progress)) or _plan(src, within, options)
        if finish and sink is None:
            return _finish(out, plan, t0, ctrl_c)
        if ray is not None:
            from .run.raypack import connect

            connect(ray)  # an unreachable cluster must fail before OUT is touched
        job = _Job(plan, part, progress, workers, strict, ray, t0, ctrl_c)
        if sink is not None:  # shards staged in `out`, each uploaded when finished
            job.progress, job.sink = sink.progress(progress), sink

            def work() -> PackResult:
                return _finish(out, plan, t0, ctrl_c, sink.sizes) if finish else job.into(out, ())

            return sink.run(work, resume=resume, overwrite=overwrite, finish=finish)
        if overwrite and holds_files(out):
            # the old pack stays whole until the new one is complete beside it
            result = replace_pack(out, plan.fingerprint, job.into)  # into(staging, fds)
            return dataclasses.replace(result, out=out, already_complete=False)
        return job.into(out, (), resume=resume or part is not None)


@dataclass
class _Job:
    """One run of a plan into one folder: its options, then `into` (OUT or a staging folder)."""

    plan: PackPlan
    part: tuple[int, int] | None
    progress: Callable[[PackProgress], None] | None
    workers: int | None
    strict: bool
    ray: str | None
    t0: float
    ctrl_c: CtrlC  # the pack's: a Ctrl-C before `index.json` is written stops it (`_finalize`)
    sink: StoreOut | None = None

    def into(self, out: Path, held: tuple[int, ...], resume: bool = True) -> PackResult:
        plan, part = self.plan, self.part
        created = not out.exists()
        lock = OutLock(out, part)
        empty, fresh = True, False  # until shards are written, a folder made here goes again
        try:
            prepare_out(out, resume)
            # a finished pack is never rewritten by a resumed run or a resubmitted part
            finished = finished_pack(out, plan) if resume else None
            if finished is not None:
                if part is None:  # a job-array part resubmitted after the finish is a no-op
                    check_source(out, finished, plan)
                seconds = time.perf_counter() - self.t0
                return PackResult(finished, out, seconds, len(finished.shards), True)
            sizes = self.sink.sizes if self.sink else None  # a store: its objects, not files
            done = load_done(
                out, plan.fingerprint, redo_skipped=self.strict, sizes=sizes, run=run_summary(plan)
            )
            ours = [i for i in range(plan.n_shards) if part is None or i % part[1] == part[0]]
            changed = [i for i in ours if i in done and not _unchanged(plan, done[i])]
            for i in changed:  # a source file changed since it was packed: write it again
                del done[i]
            todo = [i for i in ours if i not in done]
            self._check_space(out, todo)
            plan = _materialized(plan, out, part, todo)
            fresh, empty = not done, False
            fds = lock.fds + held
            tracker = _run(plan, out, done, todo, part, self.progress, self.workers, self.ray, fds,
                           self.sink)  # fmt: skip
            seconds = time.perf_counter() - self.t0
            if part is not None:
                return PackResult(None, out, seconds, len(done) - tracker.written, False,
                                  tracker.written, len(changed))  # fmt: skip
            manifest = _finalize(plan, out, done, self.ctrl_c, self.strict)
            reused = len(done) - tracker.written
            seconds = time.perf_counter() - self.t0
            return PackResult(manifest, out, seconds, reused, False, tracker.written, len(changed))
        except SourceError:
            empty = True  # nothing was packed: leave no trace of this run
            raise
        except SkippedImagesError:
            if fresh:  # a strict run from scratch leaves OUT as it found it
                remove_run(out)
                empty = True
            raise
        finally:
            remove_members(out, part_suffix(part))
            lock.release()
            if empty and created:
                with contextlib.suppress(OSError):
                    out.rmdir()

    def _check_space(self, out: Path, todo: list[int]) -> None:
        """Refuse a run whose shards `todo` (and a .tar.gz's members, copied into OUT while it
        runs) cannot fit in OUT's free space."""
        plan = self.plan
        images = sum(len(plan.shard_items(i)) for i in todo) * plan.options["variants"]
        scratch = plan.source.scratch_bytes() if plan.source is not None and todo else 0
        staged = self.sink.staged(images, plan) if self.sink else images
        check_free_space(out, staged, plan.size, scratch)


def _materialized(plan: PackPlan, out: Path, part, todo: list[int]) -> PackPlan:
    """The plan reading a .tar.gz's members from one file in OUT (`archive.materialize`)."""
    if plan.source is None or plan.source.reader.kind != "gz" or not todo:
        return plan
    try:
        source = materialize(plan.source, out, part_suffix(part))
    except OSError as exc:
        raise write_error(exc, out / MEMBERS_FILE.format(part_suffix(part))) from None
    return dataclasses.replace(plan, source=source)


def _unchanged(plan: PackPlan, shard: DoneShard) -> bool:
    """Whether every source file of a finished shard has the size and mtime recorded."""
    return shard.sources == plan_stamps(plan, shard.index)


def _store_out(out: str | os.PathLike, part: tuple[int, int] | None) -> StoreOut | None:
    """The upload side of a pack into an object store (None: a local folder, which then
    imports none of it)."""
    if not is_store_url(out):
        return None
    from .out.storeout import StoreOut

    return StoreOut(str(out), part)


def _run(plan, out, done, todo, part, progress, workers, ray, lock_fds, sink=None) -> _Tracker:
    """Write the shards `todo`, journalling each (into a store: uploading each, then the
    journal); returns the run's counters."""
    remove_partials(out, {plan.shard_name(i) for i in todo})
    journal = Journal(out, plan.fingerprint, done, part, run_summary(plan))
    tracker = _Tracker(plan, done, progress, journal)
    on_shard = tracker.shard if sink is None else sink.start(tracker, uploaded=ray is not None)
    try:
        tracker.ctrl_c.__enter__()  # before the imports below (see `CtrlC`)
        from .run.shardworkers import WholeShards, whole_shards  # imports concurrent.futures

        cpus = workers or usable_cpus()
        whole = ray is None and whole_shards(cpus, len(todo), plan.options["variants"])
        if not whole:  # whole-shard tasks stamp their own shard's files (in parallel)
            tracker.stamps = {i: plan_stamps(plan, i) for i in todo}
        if ray is not None:
            from .run.raypack import run_on_ray

            run_on_ray(plan, sink.url if sink else out, todo, ray, tracker.chunk, on_shard)
        else:
            from .run.localrun import LocalRun

            runner = WholeShards if whole else LocalRun
            runner(plan, out, todo, cpus, tracker.chunk, on_shard, lock_fds).run()
        tracker.ctrl_c.check()  # one dropped as the pool went (its weakref callbacks)
        if sink is not None:
            sink.drain()
    except OSError as exc:
        raise write_error(exc, Path(exc.filename) if exc.filename else out) from None
    finally:
        tracker.ctrl_c.__exit__()
        if sink is not None:
            sink.stop()
        journal.close()
    return tracker


def _finalize(
    plan: PackPlan, out: Path, done: dict[int, DoneShard], ctrl_c: CtrlC, strict: bool = False
) -> Manifest:
    """Write `index.json` from the shards of the whole plan, then drop the journals. A strict
    pack that skipped any file (found by the scan or by a decoder) names them all instead."""
    missing = [i for i in range(plan.n_shards) if i not in done]
    if missing:
        raise OutputError(missing_message(plan, out, missing))
    fields, decoded = finish_clips(plan, [s for i in sorted(done) for s in done[i].skipped])
    skipped = list(plan.scan_skipped) + decoded
    skipped.sort(key=lambda s: path_key(s["path"]))
    if strict and skipped:
        raise strict_error(skipped)
    infos = tuple(info for i in sorted(done) if (info := done[i].info) is not None)
    count = sum(info.count for info in infos)
    if count == 0:
        remove_journals(out)
        first = skipped[0] if skipped else {"path": "?", "reason": "?"}
        raise SourceError(
            f"no readable image in {plan.src}: all {len(skipped)} image files were skipped "
            f"(first: {first['path']}: {first['reason']}); nothing was packed"
        )
    manifest = Manifest(
        **fields,
        size=plan.size,
        block_size=plan.block_size,
        count=count,
        classes=plan.classes,
        options=plan.options,
        skipped=tuple(skipped),
        shards=infos,
        source=source_record(plan, done),
    )
    ctrl_c.check()  # interrupted before `index.json`, a pack is resumed; after it, whole:
    ctrl_c.defer()  # the pack finishes, then raises `LateInterrupt` (see `CtrlC`)
    try:
        manifest.save(out)
    except OSError as exc:
        raise write_error(exc, out / MANIFEST_NAME) from None
    remove_journals(out)
    return manifest


def _finish(
    out: Path, plan: PackPlan, t0: float, ctrl_c: CtrlC, sizes: dict[str, int] | None = None
) -> PackResult:
    """Write `index.json` once every job-array part has written its shards."""
    if not out.is_dir():
        raise OutputError(f"{out} is not a folder of job-array parts; run the parts first")
    lock = OutLock(out)
    try:
        finished = finished_pack(out, plan)
        if finished is not None:
            check_source(out, finished, plan)
            return PackResult(finished, out, time.perf_counter() - t0, len(finished.shards), True)
        done = load_done(out, plan.fingerprint, sizes=sizes, run=run_summary(plan))
        manifest = _finalize(plan, out, done, ctrl_c)
        return PackResult(manifest, out, time.perf_counter() - t0, len(done))
    finally:
        lock.release()

"""`mixshard pack`: its flags (the choices built from `core/choices.py`), then one call of
`mixshard.pack`, which checks them all; its `ArgumentError`s are worded with these flags."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from ..core.choices import ClipList, Crop, Labels, Resample, values
from ..core.constants import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_SEED,
    DEFAULT_SHARD_SIZE,
    DEFAULT_SIZE,
    MAX_BLOCK_SIZE,
    MAX_SIZE,
    RESAMPLE,
)
from ..core.errors import ArgumentError
from ..core.stores import is_store_url
from ..writing.run.ctrlc import CtrlC, LateInterrupt
from .base import PartType, as_flag, cli, human_bytes, quiet_option, resume_hint, shown

PACK_OPTIONS = [
    click.option(
        "--size",
        type=click.IntRange(1, MAX_SIZE),
        default=DEFAULT_SIZE,
        show_default=True,
        help="Side of the stored square images, in pixels.",
    ),
    click.option(
        "--crop",
        type=click.Choice(values(Crop)),
        default="center",
        show_default=True,
        help="center: shorter side to SIZE, centre crop; random: RandomResizedCrop "
        "(scale 0.08-1, ratio 3/4-4/3) from the full-size image, seeded; "
        "full: squash the whole image.",
    ),
    click.option(
        "--resample",
        type=click.Choice(values(Resample)),
        default=RESAMPLE,
        show_default=True,
        help="The resize filter, recorded in index.json. bilinear: PIL's, antialiased when "
        "shrinking; bilinear-no-antialias: as torch F.interpolate(mode='bilinear', "
        "align_corners=False) and tf.image.resize resize (half-pixel centres), how DMC-GB, "
        "DCS and DMC-VB resize their videos; bicubic: PIL's Image.resize(..., BICUBIC), byte "
        "for byte, how DMC-GB2 resizes its videos. Example: mixshard pack video_hard "
        "data/dmcgb-video_hard --clips --crop full --resample bilinear-no-antialias",
    ),
    click.option(
        "--grey",
        is_flag=True,
        help="Store grey frames (the grey in all three channels, recorded in index.json): a "
        "video's as FFmpeg's grey of each decoded frame, as DBC reads its videos (-pix_fmt "
        "gray); an image's by BT.601's weights.",
    ),
    click.option(
        "--variants",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="With --crop random: independent crops stored per source image.",
    ),
    click.option(
        "--shard-size",
        type=click.IntRange(min=1),
        default=DEFAULT_SHARD_SIZE,
        show_default=True,
        help="Images per shard file.",
    ),
    click.option(
        "--block-size",
        type=click.IntRange(1, MAX_BLOCK_SIZE),
        default=DEFAULT_BLOCK_SIZE,
        show_default=True,
        help="Images per tar member (block).",
    ),
    click.option(
        "--seed",
        type=click.IntRange(min=0),
        default=DEFAULT_SEED,
        show_default=True,
        help="Seed of the image order and of random crops.",
    ),
    click.option(
        "--no-shuffle",
        is_flag=True,
        help="Keep the sorted source order instead of a seeded global shuffle.",
    ),
    click.option(
        "--labels",
        type=click.Choice(values(Labels)),
        default="auto",
        show_default=True,
        help="folders: top-level subfolders are classes; none: one unlabeled set; "
        "auto: decide from the tree.",
    ),
]


def pack_options(f: Callable) -> Callable:
    for option in reversed(PACK_OPTIONS):
        f = option(f)
    return f


def _on_terminal(stream: Any) -> bool:
    """Whether `stream` is a terminal: not for None (a process started without stderr), a
    closed file, or a stand-in without `isatty`."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _progress_bar(quiet: bool) -> tuple[Callable[[Any], None], Callable[[], None]]:
    """A tqdm bar fed by `PackProgress` updates, made on the first one; and its closer. With
    `quiet`, or where stderr is no terminal (tqdm would show nothing there: a log, a pipe, a
    batch job), neither: importing tqdm alone costs a short pack a tenth of its start-up (with
    importlib.metadata for its version, and multiprocessing for its lock)."""
    if quiet or not _on_terminal(sys.stderr):
        return lambda p: None, lambda: None
    from tqdm import tqdm

    bar = probe = None  # the images' bar; a long probe's (bytes of one video read)

    def update(p: Any) -> None:
        nonlocal bar, probe
        if probe is not None and p.probing != probe.video:
            probe.close()
            probe = None
        if p.probing is not None:  # before the plan: a video whose probe takes long
            if probe is None:
                name = f"probing {shown(p.probing)}"
                probe = tqdm(desc=name, unit="B", unit_scale=True, disable=None, dynamic_ncols=True)
                probe.video = p.probing
            probe.update(p.probed - probe.n)
            return
        if bar is None:
            bar = tqdm(
                total=p.total,
                unit="img",
                disable=None,  # off when stderr is not a terminal
                dynamic_ncols=True,
                smoothing=0.1,
            )
        bar.update(p.done - bar.n)
        if p.uploaded is None:
            bar.set_postfix(skipped=p.skipped, refresh=False)
        else:  # into an object store: the images whose shard is uploaded
            bar.set_postfix(skipped=p.skipped, uploaded=p.uploaded, refresh=True)

    def close() -> None:
        for shown_bar in (probe, bar):
            if shown_bar is not None:
                shown_bar.close()

    return update, close


def _pack_summary(result: Any, out: str) -> None:
    m = result.manifest
    if result.already_complete:
        click.echo(f"{out} already holds a finished pack of {m.count} images; nothing to do.")
        return
    if m is None:  # a job-array part
        click.echo(
            f"Wrote {result.written_shards} shard(s) of this part ({result.reused_shards} were "
            f"already there) in {result.seconds:.1f} s: {out}; when every part is done, run "
            "the same command with --finish instead of --part"
        )
        return
    for s in m.skipped[:10]:
        # a decoder's reason may quote the file's own bytes (a name, a tag): all of it escaped
        click.echo(shown(f"skipped: {s['path']}: {s['reason']}"), err=True)
    if len(m.skipped) > 10:
        click.echo(f"skipped: ... and {len(m.skipped) - 10} more (see {out}/index.json)", err=True)
    if m.clips is not None:
        _clips_summary(result, out)
        return
    reused = f", {result.reused_shards} reused from earlier runs" if result.reused_shards else ""
    if result.rewritten_shards:
        reused += f", {result.rewritten_shards} rewritten (their source files changed)"
    click.echo(
        f"Packed {m.count} images ({len(m.skipped)} skipped) into {len(m.shards)} "
        f"shard{'s' if len(m.shards) != 1 else ''}{reused}, "
        f"{human_bytes(m.total_bytes)}, in {result.seconds:.1f} s: {out}; {_classes(m.classes)}"
    )


def _clips_summary(result: Any, out: str) -> None:
    m = result.manifest
    names = ", ".join(c.name for c in m.clips[:5]) + (", ..." if len(m.clips) > 5 else "")
    reused = f", {result.reused_shards} reused from earlier runs" if result.reused_shards else ""
    click.echo(
        f"Packed {len(m.clips)} clip{'s' if len(m.clips) != 1 else ''} ({shown(names)}), "
        f"{m.count} frames ({len(m.skipped)} skipped) into {len(m.shards)} "
        f"shard{'s' if len(m.shards) != 1 else ''}{reused}, {human_bytes(m.total_bytes)}, in "
        f"{result.seconds:.1f} s: {out}"
    )


def _classes(classes: tuple[str, ...]) -> str:
    """`3 classes (cat, dog, eel)` or `unlabeled (one set)`: a SRC one level too high shows."""
    if not classes:
        return "unlabeled (one set)"
    names = ", ".join(classes[:5]) + (", ..." if len(classes) > 5 else "")
    return f"{len(classes)} class{'es' if len(classes) != 1 else ''} ({shown(names)})"


@cli.command()
@click.argument("src", type=click.Path(path_type=str))
@click.argument("out", type=click.Path(path_type=str))
@pack_options
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Decode processes [default: the CPUs this process may use].",
)
@click.option("--strict", is_flag=True, help="Fail (exit 1) instead of skipping unreadable images.")
@click.option("--resume", is_flag=True, help="Finish an interrupted pack in OUT.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier pack in OUT.")
@click.option(
    "--part",
    type=PartType(),
    default=None,
    help="Write only part K of N (shards i with i % N == K): one job of a job array.",
)
@click.option(
    "--finish",
    is_flag=True,
    help="After every --part K/N has run: check their shards, write index.json.",
)
@click.option(
    "--ray",
    metavar="[ADDRESS]",
    is_flag=False,
    flag_value="default",
    default=None,
    help="One Ray task per shard: on ADDRESS (auto, ray://host:port), or without "
    "ADDRESS on a running cluster, else a local one.",
)
@click.option(
    "--within",
    metavar="PATH",
    default=None,
    help="With an archive SRC: the folder inside it to pack, as if extracted "
    "(places365_standard/train, val2017); '.' packs its root.",
)
@click.option(
    "--clips",
    is_flag=True,
    help="Pack video clips (SRC: video files or frame folders, one per clip): frames in "
    "play order, clip after clip, listed in index.json.",
)
@click.option(
    "--every",
    type=click.IntRange(min=1),
    default=None,
    help="With --clips: keep every K-th frame [default: every frame].",
)
@click.option(
    "--max-frames",
    type=click.IntRange(min=1),
    default=None,
    help="With --clips: keep at most N frames of each clip.",
)
@click.option(
    "--shuffle-clips",
    is_flag=True,
    help="With --clips: store the clips in a seeded random order (frames stay in order).",
)
@click.option(
    "--clip-list",
    metavar="NAME",
    type=click.Choice(values(ClipList)),
    default=None,
    help="With --clips: pack only the clips of a benchmark's list, in its order "
    f"({', '.join(values(ClipList))}); one missing is an error.",
)
@quiet_option
def pack(src: str, out: str, quiet: bool, **opts: Any) -> None:
    """Convert an image folder SRC into pre-resized uint8 shards in OUT.

    SRC is an ImageFolder tree (top-level subfolders are classes, images found
    recursively) or a flat folder of images such as COCO val2017/, or a .tar,
    .tar.gz or .zip archive of one, read in place (--within picks the folder).
    Unreadable images are skipped and listed in OUT/index.json.

    \b
    Examples:
      mixshard pack places365_standard/train data/places365_standard
      mixshard pack val2017 data/coco --size 84 --workers 8
      mixshard pack val2017.zip data/coco --within val2017
      mixshard pack places365.tar data/p365 --within places365_standard/train
      mixshard pack train data/p365_rrc --crop random --variants 4
      mixshard pack train data/places365_standard --resume
      mixshard pack train data/p365 --ray auto
      mixshard pack train data/p365 --part 3/16   # then: ... --finish
      mixshard pack video_hard data/video_hard --clips
      mixshard pack video_hard data/vh --clips --crop full --resample bilinear-no-antialias
      mixshard pack DAVIS.zip data/davis --clips --within DAVIS/JPEGImages/480p
    """
    from ..writing.packing import pack as run_pack
    from ..writing.sources.archive import check_within

    if os.path.exists(src):  # (a missing SRC is named by the pack itself)
        try:
            check_within(src, opts["within"])
        except ArgumentError as exc:
            raise click.UsageError(exc.worded(as_flag)) from None
    shuffle = not opts.pop("no_shuffle")
    opts["every"] = opts["every"] or 1  # unset: every frame
    update, close = _progress_bar(quiet)
    with CtrlC() as ctrl_c:  # a Ctrl-C Python drops, up to the summary's last line, is seen
        try:
            result = run_pack(src, out, shuffle=shuffle, progress=update, **opts)
        except ArgumentError as exc:  # the library's rules, worded with these flags
            raise click.UsageError(exc.worded(as_flag)) from None
        except LateInterrupt:  # while index.json was written: the pack is whole
            _interrupted_when_finished(out, part=False)
        except KeyboardInterrupt:
            _interrupted(out, opts["overwrite"])
        finally:
            close()
        try:
            _pack_summary(result, out)
            ctrl_c.check()
        except KeyboardInterrupt:
            _interrupted_when_finished(out, part=result.manifest is None)


def _interrupted(out: str, overwrite: bool) -> NoReturn:
    if overwrite and not is_store_url(out):  # a store's old pack is gone first
        click.echo(
            f"Interrupted. {out} still holds the earlier pack, unchanged; rerun the same "
            "command to continue the new one (its finished shards are kept).",
            err=True,
        )
    else:
        click.echo(f"Interrupted. Finished shards are kept: {resume_hint()}.", err=True)
    sys.exit(130)


def _interrupted_when_finished(out: str, part: bool) -> NoReturn:
    """A Ctrl-C that came once the pack was written: still exit 130, and say what is there."""
    done = "this part's shards are all written" if part else f"{out} holds the whole pack"
    click.echo(f"Interrupted as the pack finished: {done}; nothing is left to do.", err=True)
    sys.exit(130)

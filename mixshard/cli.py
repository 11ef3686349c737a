"""The `mixshard` command: thin wrappers that parse options, call one library function and print.

Every `MixshardError` becomes a one-line `Error: ...` on stderr and exit code 1.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .constants import (
    CROP_MODES,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_SEED,
    DEFAULT_SHARD_SIZE,
    DEFAULT_SIZE,
    LABEL_MODES,
)
from .errors import MixshardError


def human_bytes(n: float) -> str:
    """`21234567` -> `"21.2 MB"` (decimal units)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class _Group(click.Group):
    """Turns library errors into one clean line instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MixshardError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo(
                "Interrupted. Finished shards are kept: rerun the same command with "
                "--resume to continue.",
                err=True,
            )
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mixshard", prog_name="mixshard")
def cli() -> None:
    """Pack image folders into pre-resized uint8 shards and blend them into RL observations.

    \b
    Examples:
      mixshard pack places365_standard/train data/places365_standard
      mixshard pack val2017 data/coco --workers 8
      mixshard verify data/coco
      mixshard inspect data/coco --json
      mixshard preview data/coco -o coco.png
    """


@cli.command()
@click.argument("src", type=click.Path(path_type=str))
@click.argument("out", type=click.Path(path_type=str))
@click.option(
    "--size",
    type=click.IntRange(min=1),
    default=DEFAULT_SIZE,
    show_default=True,
    help="Side of the stored square images, in pixels.",
)
@click.option(
    "--crop",
    type=click.Choice(CROP_MODES),
    default="center",
    show_default=True,
    help="center: shorter side to SIZE, centre crop; random: RandomResizedCrop "
    "(scale 0.08-1, ratio 3/4-4/3) from the full-size image, seeded; "
    "full: squash the whole image.",
)
@click.option(
    "--variants",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --crop random: independent crops stored per source image.",
)
@click.option(
    "--shard-size",
    type=click.IntRange(min=1),
    default=DEFAULT_SHARD_SIZE,
    show_default=True,
    help="Images per shard file.",
)
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    default=DEFAULT_BLOCK_SIZE,
    show_default=True,
    help="Images per tar member (block).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Decode processes [default: all cores].",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=DEFAULT_SEED,
    show_default=True,
    help="Seed of the image order and of random crops.",
)
@click.option(
    "--no-shuffle",
    is_flag=True,
    help="Keep the sorted source order instead of a seeded global shuffle.",
)
@click.option(
    "--labels",
    type=click.Choice(LABEL_MODES),
    default="auto",
    show_default=True,
    help="folders: top-level subfolders are classes; none: one unlabeled set; "
    "auto: decide from the tree.",
)
@click.option("--strict", is_flag=True, help="Fail (exit 1) instead of skipping unreadable images.")
@click.option("--resume", is_flag=True, help="Finish an interrupted pack in OUT.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier pack in OUT.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def pack(
    src: str,
    out: str,
    size: int,
    crop: str,
    variants: int,
    shard_size: int,
    block_size: int,
    workers: int | None,
    seed: int,
    no_shuffle: bool,
    labels: str,
    strict: bool,
    resume: bool,
    overwrite: bool,
    quiet: bool,
) -> None:
    """Convert an image folder SRC into pre-resized uint8 shards in OUT.

    SRC is an ImageFolder tree (top-level subfolders are classes, images found
    recursively) or a flat folder of images such as COCO val2017/. Unreadable images
    are skipped and listed in OUT/index.json.

    \b
    Examples:
      mixshard pack places365_standard/train data/places365_standard
      mixshard pack val2017 data/coco --size 84 --workers 8
      mixshard pack train data/p365_rrc --crop random --variants 4
      mixshard pack train data/places365_standard --resume
    """
    from tqdm import tqdm

    from .pack import pack as run_pack

    bar = None

    def progress(p) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(
                total=p.total,
                unit="img",
                disable=True if quiet else None,
                dynamic_ncols=True,
                smoothing=0.1,
            )
            bar.update(p.done)
        else:
            bar.update(p.done - bar.n)
        bar.set_postfix(skipped=p.skipped, refresh=False)

    try:
        result = run_pack(
            src,
            out,
            size=size,
            crop=crop,
            variants=variants,
            shard_size=shard_size,
            block_size=block_size,
            workers=workers,
            seed=seed,
            shuffle=not no_shuffle,
            labels=labels,
            strict=strict,
            resume=resume,
            overwrite=overwrite,
            progress=progress,
        )
    finally:
        if bar is not None:
            bar.close()
    m = result.manifest
    if result.already_complete:
        click.echo(f"{out} already holds a finished pack of {m.count} images; nothing to do.")
        return
    for s in m.skipped[:10]:
        click.echo(f"skipped: {s['path']}: {s['reason']}", err=True)
    if len(m.skipped) > 10:
        click.echo(f"skipped: ... and {len(m.skipped) - 10} more (see {out}/index.json)", err=True)
    reused = (
        f", {result.reused_shards} reused from the interrupted run" if result.reused_shards else ""
    )
    click.echo(
        f"Packed {m.count} images ({len(m.skipped)} skipped) into {len(m.shards)} "
        f"shard{'s' if len(m.shards) != 1 else ''}{reused}, "
        f"{human_bytes(m.total_bytes)}, in {result.seconds:.1f} s: {out}"
    )


@cli.command()
@click.argument("out", type=click.Path(path_type=str))
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def verify(out: str, quiet: bool) -> None:
    """Re-hash every shard of OUT and check it against index.json.

    Exit code 0 when every shard is intact, 1 naming each bad one (missing,
    truncated, altered, extra).

    \b
    Example:
      mixshard verify data/places365_standard
    """
    from tqdm import tqdm

    from .format import Manifest
    from .verify import verify as run_verify

    manifest = Manifest.load(out)
    with tqdm(
        total=manifest.total_bytes, unit="B", unit_scale=True, disable=True if quiet else None
    ) as bar:
        report = run_verify(out, progress=bar.update, manifest=manifest)
    m = report.manifest
    if report.ok:
        click.echo(
            f"OK: {len(m.shards)} shard{'s' if len(m.shards) != 1 else ''}, {m.count} images, "
            f"{human_bytes(m.total_bytes)} match index.json"
        )
        return
    for name, problem in report.problems.items():
        click.echo(f"BAD {name}: {problem}")
    raise MixshardError(
        f"{len(report.problems)} bad shard file(s) in {out}; repack with `mixshard pack SRC "
        f"{out} --overwrite` (or restore the files)"
    )


@cli.command()
@click.argument("out", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def inspect(out: str, as_json: bool) -> None:
    """Summarise the pack in OUT: images, classes, size, crop, shards, bytes, skipped.

    \b
    Example:
      mixshard inspect data/coco --json
    """
    from .format import Manifest

    m = Manifest.load(out)
    summary = {
        "path": out,
        "count": m.count,
        "classes": len(m.classes),
        "class_names": list(m.classes),
        "size": m.size,
        "crop": m.options.get("crop"),
        "variants": m.options.get("variants"),
        "seed": m.options.get("seed"),
        "shuffle": m.options.get("shuffle"),
        "labels": m.options.get("labels"),
        "block_size": m.block_size,
        "shards": len(m.shards),
        "bytes": m.total_bytes,
        "skipped": len(m.skipped),
        "version": m.version,
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    names = ", ".join(m.classes[:8]) + (", ..." if len(m.classes) > 8 else "")
    click.echo(f"pack:     {out} (mixshard format v{m.version})")
    click.echo(f"images:   {m.count} ({m.size}x{m.size} RGB uint8, NCHW)")
    click.echo(f"classes:  {len(m.classes)}" + (f" ({names})" if m.classes else " (unlabeled)"))
    click.echo(
        f"crop:     {summary['crop']}, variants {summary['variants']}, seed "
        f"{summary['seed']}, shuffled {'yes' if summary['shuffle'] else 'no'}"
    )
    click.echo(
        f"shards:   {len(m.shards)} ({m.block_size} images per block), {human_bytes(m.total_bytes)}"
    )
    click.echo(f"skipped:  {len(m.skipped)}")


@cli.command()
@click.argument("out", type=click.Path(path_type=str))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=str),
    help="PNG file to write.",
)
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Images in the grid.",
)
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Which images."
)
@click.option(
    "--obs",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help="An observation image to blend every background over.",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Blend weight of the background (with --obs).",
)
def preview(out: str, output: str, count: int, seed: int, obs: str | None, alpha: float) -> None:
    """Write a PNG grid of images from the pack OUT (with class names when labelled).

    With --obs, each image is blended over that observation at --alpha: what the
    random overlay will show your agent.

    \b
    Examples:
      mixshard preview data/coco -o coco.png
      mixshard preview data/places365_standard -o grid.png -n 16 --seed 3
      mixshard preview data/coco -o blended.png --obs frame.png --alpha 0.5
    """
    from .preview import preview_grid

    grid, shown = preview_grid(out, count, seed=seed, obs=obs, alpha=alpha)
    try:
        grid.save(output, format="PNG")
    except OSError as exc:
        raise MixshardError(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(
        f"Wrote {output}: {shown} images from {out}"
        + (f" blended over {obs} at alpha {alpha}" if obs else "")
    )


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="mixshard")

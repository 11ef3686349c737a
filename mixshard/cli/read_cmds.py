"""The read-only commands: `verify`, `inspect` and `preview` of a PACK."""

from __future__ import annotations

import os
from typing import Any

import click

from ..core.errors import MixshardError
from ..core.packpath import pack_dir
from .base import cli, human_bytes, pack_argument, quiet_option, shown, shown_json


def _manifest(pack: str) -> tuple[Any, bool]:
    """The manifest of PACK (a folder, its index.json, or an object store URL), and whether
    PACK is a store (`reading/source.py` asks which)."""
    from ..core.manifest import Manifest
    from ..core.stores import load_manifest
    from ..reading.source import store_of

    store = store_of(pack)
    return (load_manifest(store), True) if store else (Manifest.load(pack), False)


@cli.command()
@pack_argument
@quiet_option
def verify(pack: str, quiet: bool) -> None:
    """Re-hash every shard of PACK and check it against index.json.

    Exit code 0 when every shard is intact, 1 naming each bad one (missing,
    truncated, altered, extra).

    \b
    Example:
      mixshard verify data/places365_standard
    """
    from tqdm import tqdm

    from ..reading.verifying import verify as run_verify

    manifest, in_store = _manifest(pack)
    disable = True if quiet else None
    with tqdm(total=manifest.total_bytes, unit="B", unit_scale=True, disable=disable) as bar:
        report = run_verify(pack, progress=bar.update, manifest=manifest)
    m = report.manifest
    if report.ok:
        click.echo(
            f"OK: {len(m.shards)} shard{'s' if len(m.shards) != 1 else ''}, {m.count} images, "
            f"{human_bytes(m.total_bytes)} match index.json"
        )
        return
    for name, problem in report.problems.items():
        click.echo(shown(f"BAD {name}: {problem}"))
    folder = pack if in_store else pack_dir(pack)
    raise MixshardError(
        f"{len(report.problems)} bad shard file(s) in {folder}; repack with `mixshard pack SRC "
        f"{folder} --overwrite` (or restore the files)"
    )


@cli.command()
@pack_argument
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--plan",
    "show_plan",
    is_flag=True,
    help="Also say how a default loader reads PACK here, and why.",
)
def inspect(pack: str, as_json: bool, show_plan: bool) -> None:
    """Summarise PACK: images, classes, size, crop, shards, bytes, skipped.

    \b
    Example:
      mixshard inspect data/coco --json
    """
    m, in_store = _manifest(pack)
    o = m.options
    summary = {
        "path": pack,
        "count": m.count,
        "classes": len(m.classes),
        "class_names": list(m.classes),
        "size": m.size,
        "crop": o.get("crop"),
        "variants": o.get("variants"),
        "seed": o.get("seed"),
        "resample": o.get("resample"),
        "grey": bool(o.get("grey")),
        "shuffle": o.get("shuffle"),
        "labels": o.get("labels"),
        "block_size": m.block_size,
        "shards": len(m.shards),
        "bytes": m.total_bytes,
        "skipped": len(m.skipped),
        "version": m.version,
    }
    if m.clips is not None:
        summary["clips"] = len(m.clips)
        summary["clip_names"] = [c.name for c in m.clips]
        summary["clip_frames"] = [c.count for c in m.clips]
        summary["fps"] = sorted({c.fps for c in m.clips})
    if as_json:
        click.echo(shown_json(summary))
        return
    names = ", ".join(m.classes[:8]) + (", ..." if len(m.classes) > 8 else "")
    shuffled = "yes" if o.get("shuffle") else "no"
    click.echo(f"pack:     {pack} (mixshard format v{m.version})")
    click.echo(f"images:   {m.count} ({m.size}x{m.size} RGB uint8, NCHW)")
    click.echo(
        f"classes:  {len(m.classes)}" + (f" ({shown(names)})" if m.classes else " (unlabeled)")
    )
    crop = f"{o.get('crop')}, variants {o.get('variants')}, seed {o.get('seed')}"
    resized = f"resized {o.get('resample')}" + (", grey" if o.get("grey") else "")
    click.echo(f"crop:     {crop}, shuffled {shuffled}; {resized}")
    click.echo(
        f"shards:   {len(m.shards)} ({m.block_size} images per block), {human_bytes(m.total_bytes)}"
    )
    click.echo(f"skipped:  {len(m.skipped)}")
    if m.clips is not None:
        click.echo(f"clips:    {_clips_line(m.clips)}")
    if show_plan:
        from ..reading.batches.plan import default_plan

        for line in default_plan(m, in_store).why:
            click.echo(f"reading:  {line}")


def _clips_line(clips: Any) -> str:
    """`3 (47 frames, 12-20 a clip, 10 fps): video1.mp4, video2.mp4, video10.mp4`."""
    counts = [c.count for c in clips]
    each = f"{min(counts)}-{max(counts)}" if min(counts) != max(counts) else str(counts[0])
    rates = sorted({c.fps for c in clips})
    fps = "/".join(f"{r:g}" for r in rates[:3]) + ("/..." if len(rates) > 3 else "")
    names = ", ".join(c.name for c in clips[:5]) + (", ..." if len(clips) > 5 else "")
    return f"{len(clips)} ({sum(counts)} frames, {each} a clip, {fps} fps): {shown(names)}"


_GRID_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}


@cli.command()
@pack_argument
@click.option(
    "-o",
    "--output",
    required=True,
    help="Image file to write: .png, .jpg/.jpeg or .webp (the suffix picks the format).",
    type=click.Path(dir_okay=False, path_type=str),
)
@click.option(
    "-n",
    "--count",
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
def preview(pack: str, output: str, count: int, seed: int, obs: str | None, alpha: float) -> None:
    """Write a grid of images from PACK (with class names when labelled).

    Of a clip pack: a strip of evenly spaced frames per clip (rows = clips, up to
    COUNT/8 of them, columns = 8 frames from first to last).

    With --obs, each image is blended over that observation at --alpha: what the
    random overlay will show your agent.

    \b
    Examples:
      mixshard preview data/coco -o coco.png
      mixshard preview data/places365_standard -o grid.png -n 16 --seed 3
      mixshard preview data/coco -o blended.png --obs frame.png --alpha 0.5
    """
    from .sheet import preview_grid

    suffix = os.path.splitext(output)[1].lower()
    if suffix not in _GRID_FORMATS:
        raise click.BadParameter(
            f"{output}: name the file .png, .jpg, .jpeg or .webp (the suffix picks the format)",
            param_hint="'-o' / '--output'",
        )
    grid, n = preview_grid(pack, count, seed=seed, obs=obs, alpha=alpha)
    try:
        grid.save(output, format=_GRID_FORMATS[suffix])
    except OSError as exc:
        raise MixshardError(f"cannot write {output}: {exc.strerror or exc}") from None
    blended = f" blended over {obs} at alpha {alpha}" if obs else ""
    click.echo(f"Wrote {output}: {n} images from {pack}{blended}")

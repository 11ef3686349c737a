"""How close mixshard's overlay images are to the reference's, on an image folder.

Draws N 84 px overlay images from the reference pipeline (torchvision ImageFolder +
RandomResizedCrop(84) + RandomHorizontalFlip, uint8 straight from the PIL image) and from each
mixshard configuration (SRC packed into a scratch folder, then `Overlay.sample` with the device
cache and random flips), and prints per configuration the mean and std of the pixels, the 10th,
50th and 90th percentiles of the detail (mean |Laplacian| of the grey image: how much fine
detail survives), their ratios to the reference, the colour-histogram distance to the reference
and the disk the pack takes. Definitions: scripts/imagestats.py. Everything is seeded.

    python scripts/bench_fidelity.py SRC [--draws 4000] [--plot]
    python scripts/bench_fidelity.py SRC --decode   # pack's JPEG decode vs a full decode
    python scripts/bench_fidelity.py --quick    # tiny procedural folder, few draws (the tests)

`--decode` compares the images `pack` stores (every image of SRC, 84 px, `--crop center` and
`--crop random`) as pack makes them (a JPEG decoded at the smallest DCT scale that keeps the
crop at least 84 px, resized by `writing/pixels/resample.py`) with the same images decoded in full
and resized by PIL (the reference), and with a full decode resized by pack: their mean, std
and detail percentiles, as ratios, and whether the median and p10 of the detail are within 3%.

Without SRC it makes a procedural folder; its detail statistics are nothing like photographs',
so only a folder of real photos says anything about fidelity.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import imagestats
import numpy as np
import torch
from benchlib import OUT, machine, table

import mixshard
from mixshard.testdata import make_image_folder

SIZE = 84
PLACES365_IMAGES = 1_803_460  # Places365-Standard train: what "per 1.8M images" scales to
# goals for the configurations the README calls reference-like: ratio to the reference
GOALS = {"p10": 0.15, "median": 0.10, "p90": 0.15, "mean": 0.03, "std": 0.03}


@dataclass(frozen=True)
class Config:
    label: str
    pack: tuple[int, str, int]  # size, crop, variants
    crop: tuple[float, float] | None  # Overlay(crop=...)
    reference_like: bool  # what the README recommends for reproducing the reference


CONFIGS = (
    Config("pack `--crop center` (default)", (84, "center", 1), None, False),
    Config("pack `--crop random --variants 4`", (84, "random", 4), None, True),
    Config("pack center, `Overlay(crop=(0.08, 1))`", (84, "center", 1), (0.08, 1.0), False),
    Config("pack `--variants 4`, `Overlay(crop=(0.08, 1))`", (84, "random", 4), (0.08, 1.0), False),
    Config(
        "pack `--size 168`, `Overlay(crop=(0.08, 1))` -> 84", (168, "center", 1), (0.08, 1.0), True
    ),
)


def reference_draws(src: Path, n: int, seed: int) -> np.ndarray:
    """n images as the reference makes them, `(n, 3, 84, 84)` uint8: epochs of a shuffled
    ImageFolder, a fresh RandomResizedCrop(84) + flip per draw, pixels straight from PIL."""
    import torchvision.datasets as datasets
    import torchvision.transforms as TF

    transform = TF.Compose([TF.RandomResizedCrop(SIZE), TF.RandomHorizontalFlip()])
    dataset = datasets.ImageFolder(str(src), transform)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    epochs = -(-n // len(dataset))
    order = np.concatenate([rng.permutation(len(dataset)) for _ in range(epochs)])[:n]
    return np.stack([np.asarray(dataset[int(i)][0]).transpose(2, 0, 1) for i in order])


def mixshard_draws(pack: Path, crop, n: int, seed: int) -> np.ndarray:
    """n images from `Overlay.sample` on `pack`, in calls of 256 like training steps."""
    overlay = mixshard.Overlay(pack, cache="device", flip=True, crop=crop, seed=seed)
    parts = [overlay.sample(min(256, n - k), "cpu", size=SIZE) for k in range(0, n, 256)]
    overlay.close()
    return torch.cat(parts).numpy()


def make_packs(src: Path, scratch: Path, seed: int, workers: int | None) -> dict:
    """Pack SRC once per distinct pack setting: setting -> (folder, bytes on disk, pixel bytes
    per source image)."""
    packs = {}
    for size, crop, variants in dict.fromkeys(c.pack for c in CONFIGS):
        out = scratch / f"pack-{size}-{crop}-{variants}"
        mixshard.pack(src, out, size=size, crop=crop, variants=variants, seed=seed, workers=workers)
        manifest = mixshard.Manifest.load(out)
        # the pixels of every stored image, per source image (tar headers aside)
        per_source = manifest.image_bytes * variants
        packs[(size, crop, variants)] = (out, manifest.total_bytes, per_source)
    return packs


def ratios(s: dict, ref: dict) -> dict:
    """Each goal statistic of `s` as a ratio to the reference's."""
    p10, med, p90 = (a / b for a, b in zip(s["detail_q"], ref["detail_q"]))
    return {
        "p10": p10,
        "median": med,
        "p90": p90,
        "mean": s["mean"] / ref["mean"],
        "std": s["std"] / ref["std"],
    }


def row(label: str, s: dict, ref: dict, disk: str, per_places: str) -> list:
    r = ratios(s, ref)
    return [
        label,
        f"{s['mean']:.1f}",
        f"{s['std']:.1f}",
        *(f"{q:.2f}" for q in s["detail_q"]),
        f"{r['p10']:.2f} / {r['median']:.2f} / {r['p90']:.2f}",
        f"{imagestats.histogram_distance(s['hist'], ref['hist']):.3f}",
        disk,
        per_places,
    ]


HEADERS = [
    "source of the 84 px images",
    "mean",
    "std",
    "detail p10",
    "detail median",
    "detail p90",
    "p10 / median / p90 vs reference",
    "colour hist. distance",
    "disk",
    "per 1.8M images",
]


def goal_lines(stats: dict, ref: dict) -> list[str]:
    """Whether each reference-like configuration meets the goals, with the numbers."""
    lines = []
    for c in CONFIGS:
        if not c.reference_like:
            continue
        r = ratios(stats[c.label], ref)
        parts = [
            f"{k} {r[k]:.3f} {'ok' if abs(r[k] - 1) <= tol else 'MISSED'} (+-{tol:.0%})"
            for k, tol in GOALS.items()
        ]
        held = all(abs(r[k] - 1) <= tol for k, tol in GOALS.items())
        lines.append(
            f"* {c.label}: {'goals hold' if held else 'goals missed'}: " + ", ".join(parts)
        )
    return lines


def measure(src: Path, draws: int, seed: int, scratch: Path, workers: int | None):
    """Draw from the reference and every configuration: label -> (images, summary), packs."""
    packs = make_packs(src, scratch, seed, workers)
    drawn = {"reference: `RandomResizedCrop(84)` per draw": reference_draws(src, draws, seed)}
    for c in CONFIGS:
        drawn[c.label] = mixshard_draws(packs[c.pack][0], c.crop, draws, seed)
    return {k: (v, imagestats.summary(v)) for k, v in drawn.items()}, packs


def report(results: dict, packs: dict, src_bytes: int) -> str:
    """The markdown table and the goal lines."""
    ref_label = next(iter(results))
    ref = results[ref_label][1]
    rows = [row(ref_label, ref, ref, f"{src_bytes / 1e6:.1f} MB (source)", "")]
    for c in CONFIGS:
        _, nbytes, per_source = packs[c.pack]
        per = f"{per_source * PLACES365_IMAGES / 1e9:.1f} GB"
        rows.append(row(c.label, results[c.label][1], ref, f"{nbytes / 1e6:.1f} MB", per))
    stats = {k: v[1] for k, v in results.items()}
    lines = goal_lines(stats, ref)
    return (
        table(HEADERS, rows)
        + "\n\nGoals for the reference-like configurations:\n"
        + "\n".join(lines)
    )


def plot(results: dict, path: Path) -> None:
    """Detail distributions, one curve per configuration (needs the `bench` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_pdf, ax_cdf) = plt.subplots(1, 2, figsize=(12, 4.5))
    edges = np.logspace(-1, 2.3, 36)
    for i, (label, (_, s)) in enumerate(results.items()):
        d = np.clip(s["detail"], edges[0], edges[-1])
        style = {"color": "black", "lw": 2.5} if i == 0 else {"lw": 1.4}
        density, _ = np.histogram(d, bins=edges, density=True)
        centres = np.sqrt(edges[:-1] * edges[1:])
        ax_pdf.plot(centres, density * centres, label=label.replace("`", ""), **style)
        ax_cdf.plot(np.sort(d), np.linspace(0, 1, len(d)), **style)
    for ax in (ax_pdf, ax_cdf):
        ax.set_xscale("log")
        ax.set_xlabel("detail: mean |Laplacian| of the grey 84 px image (log scale)")
        ax.grid(alpha=0.3)
    ax_pdf.set_ylabel("share of draws (density per log unit)")
    ax_cdf.set_ylabel("fraction of draws with less detail")
    ax_pdf.legend(fontsize=7, loc="upper left")
    fig.suptitle("Detail of the overlay images: reference (black) vs mixshard configurations")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def sample_rows(results: dict, path: Path, per_row: int = 10) -> None:
    """One row of drawn images per configuration, labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(per_row * 0.8, len(results) * 1.05))
    for ax, (label, (imgs, _)) in zip(axes, results.items()):
        pad = ((0, 0), (0, 4), (0, 0))  # a white gap after each image
        tiles = [np.pad(i.transpose(1, 2, 0), pad, constant_values=255) for i in imgs[:per_row]]
        strip = np.concatenate(tiles, axis=1)
        ax.imshow(strip)
        ax.set_axis_off()
        ax.set_title(label.replace("`", ""), fontsize=8, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


DECODE_GOAL = 0.03  # detail median and p10 of pack's decode within 3% of a full decode


DECODES = {  # label -> how `stored_images` decodes and resizes
    "full decode, PIL's resize (reference)": "pil",
    "full decode, pack's resize": "full",
    "pack's decode (DCT-scaled) and resize": "pack",
}


def stored_images(src: Path, crop: str, mode: str) -> np.ndarray:
    """Every image of `src` as `pack --size 84 --crop CROP` stores it, `(n, 3, 84, 84)`.
    `mode`: "pack" (as pack does), "full" (decoded without DCT scaling, pack's resize) or
    "pil" (PIL decodes in full and resizes, as the naive loop and the old pack did)."""
    from mixshard.writing.pixels import image

    keys = [p for p, _ in mixshard.scan(src).items]
    saved = image._draft_scale, image._dct_eighths, image.simplejpeg
    if mode != "pack":
        image._draft_scale, image._dct_eighths = (lambda boxes, size: 1), (lambda b, s: 8)
    if mode == "pil":
        image.simplejpeg = None
    try:
        return np.concatenate([image.load_image(src / k, SIZE, crop, key=k) for k in keys])
    finally:
        image._draft_scale, image._dct_eighths, image.simplejpeg = saved


def decode_report(src: Path) -> str:
    """The decode comparison table and its verdict lines: each way of making the stored
    images against a full decode resized by PIL."""
    rows, lines = [], []
    for crop in ("center", "random"):
        stats = {label: imagestats.summary(stored_images(src, crop, mode))
                 for label, mode in DECODES.items()}  # fmt: skip
        ref = next(iter(stats.values()))
        for label, s in stats.items():
            r = ratios(s, ref)
            rows.append(
                [f"`--crop {crop}`", label, f"{s['mean']:.1f}", f"{s['std']:.1f}",
                 *(f"{q:.2f}" for q in s["detail_q"]),
                 f"{r['p10']:.3f} / {r['median']:.3f} / {r['p90']:.3f}"]
            )  # fmt: skip
        for label in list(stats)[1:]:
            r = ratios(stats[label], ref)
            held = all(abs(r[k] - 1) <= DECODE_GOAL for k in ("p10", "median"))
            lines.append(
                f"* `--crop {crop}`, {label}: detail p10 {r['p10']:.3f}, median "
                f"{r['median']:.3f} of the reference: {'within' if held else 'NOT within'} "
                f"{DECODE_GOAL:.0%}"
            )
    headers = ["pack", "decode", "mean", "std", "detail p10", "detail median", "detail p90",
               "p10 / median / p90 vs reference"]  # fmt: skip
    return table(headers, rows) + "\n\n" + "\n".join(lines)


def source_folder(args, scratch: Path) -> Path:
    if args.src is not None:
        return args.src
    per_class = 8 if args.quick else 100
    make_image_folder(scratch / "src", classes=3, per_class=per_class, min_side=96)
    return scratch / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", nargs="?", type=Path, help="image folder (default: procedural)")
    parser.add_argument("--draws", type=int, default=None, help="draws each (default 4000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="few draws, procedural, no plot")
    parser.add_argument("--plot", action="store_true", help="also write fidelity*.png")
    parser.add_argument("--out", type=Path, default=OUT, help="for fidelity.md (bench-out/)")
    parser.add_argument("--decode", action="store_true", help="pack's decode vs a full decode")
    args = parser.parse_args()
    if args.decode:
        scratch = Path(tempfile.mkdtemp(prefix="bench-fidelity-"))
        try:
            src = source_folder(args, scratch)
            print(f"Command: python scripts/bench_fidelity.py {' '.join(sys.argv[1:])}")
            print(f"Source: {src}\n\n" + decode_report(src))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    draws = args.draws or (64 if args.quick else 4000)
    scratch = Path(tempfile.mkdtemp(prefix="bench-fidelity-"))
    try:
        src = source_folder(args, scratch)
        src_bytes = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
        workers = 1 if args.quick else None
        results, packs = measure(src, draws, args.seed, scratch, workers)
        text = report(results, packs, src_bytes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    where = str(args.src) if args.src else "a procedural folder (not photographs)"
    header = (
        f"Command: python scripts/bench_fidelity.py {' '.join(sys.argv[1:])}\n"
        f"Machine: {machine()}, torch {torch.__version__}\n"
        f"Source: {where}; {draws} draws per row, seed {args.seed}\n"
    )
    print(header + "\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fidelity.md").write_text(header + "\n" + text + "\n")
    if args.plot and not args.quick:
        plot(results, args.out / "fidelity.png")
        sample_rows(results, args.out / "fidelity_samples.png")
        print(f"\nplots: {args.out / 'fidelity.png'}, {args.out / 'fidelity_samples.png'}")


if __name__ == "__main__":
    main()

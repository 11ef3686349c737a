"""Benchmark mixshard against its peers on the same images: FFCV, LitData, Mosaic streaming,
webdataset (whichever of them import; this script installs nothing).

One set of N 84x84 RGB uint8 images (random crops of the real frames in
/work/shared/real-frames resized to 84 px, or procedural images with `--procedural`) is written
once per library with that library's own writer, pixels stored raw (no codec) by all of them:
  mixshard   the images as PNG files -> `mixshard.pack` (84 px in, 84 px out: no resampling)
  ffcv       `DatasetWriter` with `RGBImageField(write_mode="raw")`
  litdata    `litdata.optimize`, one numpy array per sample
  streaming  `MDSWriter`, column `ndarray:uint8:84,84,3`
  webdataset `ShardWriter`, the raw bytes of each image, 1000 images per tar
Each is then read in a random order, batches of 256, each library's native batch (mixshard:
uint8 tensors (256, 3, 84, 84); the peers: their (256, 84, 84, 3) arrays or tensors):
  mixshard   `mixshard.loader(pack, 256, num_workers=w, order=--order)`, threads
  ffcv       `Loader(order=OrderOption.RANDOM, num_workers=max(w, 1))`, its own threads
  litdata    `StreamingDataset(shuffle=True)` in a `StreamingDataLoader(num_workers=w)`
  streaming  `StreamingDataset(shuffle=True)` in a torch `DataLoader(num_workers=w)`
  webdataset shards shuffled, `.shuffle(5000)` buffer, `.batched(256)`, `WebLoader(num_workers=w)`
(webdataset and Mosaic streaming have no per-image permutation: theirs is what they offer.)
Worker processes are kept between epochs (`persistent_workers`) where a loader allows it.

Cells, each in a fresh process:
  warm1  the files read into the page cache just before the process starts, one process (w=0;
         FFCV: one worker thread): one untimed epoch, then whole epochs timed, at least
         `--epochs` and `--min-seconds`
  warm2  the same with 2 workers
  cold   the files evicted from the page cache (posix_fadvise DONTNEED) just before the process
         starts, `--cold-workers` workers: the first epoch timed from `iter()`, so worker start
         and FFCV's compilation are in it (each warm cell reports its own first epoch's seconds:
         that cost with the files in the cache). Not evicted again inside the process: pages a
         loader has mapped stay (mixshard maps the shards its warm job has read)
`--rounds` rounds, libraries alternated in each cell (a rotation, then the same reversed:
`round_order`, so that over any even number of rounds each library runs before each other one
as often as after; a cold cell's rate moves with its place in the round); each figure is the
median of the rounds' images/s, and mixshard/peer is the median of the per-round ratios.
`--baseline DIR` adds another checkout of mixshard (a worktree of an older commit, its C modules
built) as one more library, "base", reading the same pack in the same rounds: whether a lead over
a peer held since then, measured in one run (the peers' own figures move with the machine).
Writes bench-out/bench_peers.json and bench-out/bench_peers.md.

    python scripts/bench_peers.py [--images 50000] [--rounds 3] [--only ffcv,litdata]
        [--procedural] [--profile] [--baseline ../wt/base]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from benchlib import OUT, evict, fmt_rate, machine, run_json, table

BATCH = 256
SIZE = 84
FRAMES = Path("/work/shared/real-frames")
PEERS = ("ffcv", "litdata", "streaming", "webdataset")
MODULE = {"mixshard": "mixshard", **{p: p for p in PEERS}}
CELLS = ("warm1", "warm2", "cold")
CELL_NAMES = {
    "warm1": "warm, one process",
    "warm2": "warm, 2 workers",
    "cold": "cold (evicted), {} workers",
}


# ---------------------------------------------------------------------------------- the images
def make_images(count: int, procedural: bool, seed: int = 0) -> Path:
    """`count` images (N, 84, 84, 3) uint8 in one .npy file (made once)."""
    kind = "procedural" if procedural else "real"
    path = OUT / "peers" / f"images-{kind}-{count}.npy"
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    print(f"making {count} {kind} 84 px images ...", file=sys.stderr)
    images = procedural_images(count, rng) if procedural else real_images(count, rng)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path.with_suffix(".tmp.npy"), images)
    path.with_suffix(".tmp.npy").rename(path)
    return path


def real_images(count: int, rng: np.random.Generator) -> np.ndarray:
    """Random square crops (a tenth to all of the frame's area) of the real frames, resized."""
    from PIL import Image

    frames = sorted(FRAMES.glob("*/*.jpg"))
    if not frames:
        raise SystemExit(f"no frames in {FRAMES}: pass --procedural")
    opened = [Image.open(p).convert("RGB") for p in frames]
    out = np.empty((count, SIZE, SIZE, 3), np.uint8)
    for i in range(count):
        img = opened[rng.integers(len(opened))]
        w, h = img.size
        side = int(min(w, h) * np.sqrt(rng.uniform(0.1, 1.0)))
        x, y = rng.integers(w - side + 1), rng.integers(h - side + 1)
        crop = img.resize((SIZE, SIZE), Image.BILINEAR, box=(x, y, x + side, y + side))
        if rng.integers(2):
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        out[i] = np.asarray(crop)
    return out


def procedural_images(count: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth random colour fields (a 6x6 grid upsampled) plus pixel noise."""
    from PIL import Image

    out = np.empty((count, SIZE, SIZE, 3), np.uint8)
    for i in range(count):
        grid = Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8))
        field = np.asarray(grid.resize((SIZE, SIZE), Image.BICUBIC), np.int16)
        noise = rng.integers(-12, 13, (SIZE, SIZE, 3), dtype=np.int16)
        out[i] = np.clip(field + noise, 0, 255).astype(np.uint8)
    return out


# ----------------------------------------------------------------------------------- writers
def write_mixshard(images: np.ndarray, folder: Path, path: Path) -> None:
    from PIL import Image

    import mixshard

    src = folder.with_name(folder.name + "-png")
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for i, img in enumerate(images):
        Image.fromarray(img).save(src / f"{i:07d}.png", compress_level=1)
    mixshard.pack(src, folder, size=SIZE, crop="center", labels="none", overwrite=True)
    shutil.rmtree(src)


def write_ffcv(images: np.ndarray, folder: Path, path: Path) -> None:
    from ffcv.fields import RGBImageField
    from ffcv.writer import DatasetWriter

    class Images:
        def __len__(self) -> int:
            return len(images)

        def __getitem__(self, i: int) -> tuple[np.ndarray]:
            return (images[i],)

    folder.mkdir(parents=True)
    fields = {"image": RGBImageField(write_mode="raw", max_resolution=SIZE)}
    DatasetWriter(str(folder / "images.beton"), fields, num_workers=2).from_indexed_dataset(
        Images()
    )


class LitdataSample:
    """`litdata.optimize`'s function: sample `i` of the .npy (its workers are spawned, so the
    images are opened there, not inherited)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.images: np.ndarray | None = None

    def __call__(self, i: int) -> dict[str, Any]:
        if self.images is None:
            self.images = np.load(self.path, mmap_mode="r")
        return {"image": np.array(self.images[i])}


def write_litdata(images: np.ndarray, folder: Path, path: Path) -> None:
    import litdata

    litdata.optimize(
        fn=LitdataSample(path),
        inputs=list(range(len(images))),
        output_dir=str(folder),
        chunk_bytes="64MB",
        num_workers=1,
    )


def write_streaming(images: np.ndarray, folder: Path, path: Path) -> None:
    from streaming import MDSWriter

    columns = {"image": f"ndarray:uint8:{SIZE},{SIZE},3"}
    with MDSWriter(out=str(folder), columns=columns, size_limit="64mb") as out:
        for img in images:
            out.write({"image": img})


def write_webdataset(images: np.ndarray, folder: Path, path: Path) -> None:
    import webdataset as wds

    folder.mkdir(parents=True)
    with wds.ShardWriter(str(folder / "images-%05d.tar"), maxcount=1000, verbose=0) as sink:
        for i, img in enumerate(images):
            sink.write({"__key__": f"{i:08d}", "u8": img.tobytes()})


# (the images, the folder to write, the .npy they come from)
WRITERS: dict[str, Callable[[np.ndarray, Path, Path], None]] = {
    "mixshard": write_mixshard,
    "ffcv": write_ffcv,
    "litdata": write_litdata,
    "streaming": write_streaming,
    "webdataset": write_webdataset,
}


def dataset(lib: str, images_path: Path) -> Path:
    """The library's copy of the images (written once, next to the .npy)."""
    folder = images_path.parent / f"{lib}-{images_path.stem.removeprefix('images-')}"
    if not (folder / ".complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        print(f"writing the {lib} dataset in {folder} ...", file=sys.stderr)
        t0 = time.perf_counter()
        WRITERS[lib](np.load(images_path), folder, images_path)
        print(f"  {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        (folder / ".complete").touch()
    return folder


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def fill(paths: list[Path]) -> None:
    """Read these files whole, so they are in the page cache when a warm cell's process opens
    them (a cold cell of the round before evicted them; mixshard decides how to read at open)."""
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(16 << 20):
                pass


# ----------------------------------------------------------------------------------- readers
def read_mixshard(folder: Path, workers: int, order: str) -> Iterable[Any]:
    import mixshard

    return mixshard.loader(folder, BATCH, num_workers=workers, pin_memory=False, order=order)


def read_ffcv(folder: Path, workers: int, order: str) -> Iterable[Any]:
    from ffcv.fields.decoders import SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption

    return Loader(
        str(folder / "images.beton"),
        batch_size=BATCH,
        num_workers=max(workers, 1),
        order=OrderOption.RANDOM,
        pipelines={"image": [SimpleRGBImageDecoder()]},
        drop_last=True,
    )


def read_litdata(folder: Path, workers: int, order: str) -> Iterable[Any]:
    import litdata

    ds = litdata.StreamingDataset(str(folder), shuffle=True, drop_last=True)
    return litdata.StreamingDataLoader(
        ds, batch_size=BATCH, num_workers=workers, drop_last=True, persistent_workers=workers > 0
    )


def read_streaming(folder: Path, workers: int, order: str) -> Iterable[Any]:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    clean_stale_shared_memory()
    ds = StreamingDataset(local=str(folder), shuffle=True, batch_size=BATCH)
    return DataLoader(
        ds, batch_size=BATCH, num_workers=workers, drop_last=True, persistent_workers=workers > 0
    )


def read_webdataset(folder: Path, workers: int, order: str) -> Iterable[Any]:
    import webdataset as wds

    urls = [str(p) for p in sorted(folder.glob("images-*.tar"))]

    def pixels(data: bytes) -> np.ndarray:
        return np.frombuffer(data, np.uint8).reshape(SIZE, SIZE, 3)

    ds = (
        wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
        .shuffle(5000)
        .to_tuple("u8")
        .map_tuple(pixels)
        .batched(BATCH, partial=False)
    )
    return wds.WebLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0)


READERS: dict[str, Callable[[Path, int, str], Iterable[Any]]] = {
    "mixshard": read_mixshard,
    "ffcv": read_ffcv,
    "litdata": read_litdata,
    "streaming": read_streaming,
    "webdataset": read_webdataset,
    "base": read_mixshard,  # `--baseline`: the same reader, imported from another checkout
}


def images_in(batch: Any) -> int:
    """Images in one batch of any of the loaders (a tensor or array, a tuple, or a dict)."""
    if isinstance(batch, dict):
        batch = batch["image"]
    if isinstance(batch, (tuple, list)):
        batch = batch[0]
    return int(batch.shape[0])


def epoch(loader: Iterable[Any]) -> int:
    return sum(images_in(b) for b in loader)


def cell(
    lib: str, folder: Path, kind: str, workers: int, epochs: int, min_seconds: float, order: str
) -> dict:
    """One cell in this (fresh) process: images/s of the timed epochs, and the seconds of the
    first epoch (worker start, FFCV's compilation; for a warm cell untimed otherwise).

    warm: one untimed epoch (fills the page cache, starts the workers, compiles FFCV's
    pipeline), then whole epochs until both `epochs` and `min_seconds` are reached.
    cold: the first epoch, the files evicted before this process started."""
    loader = READERS[lib](folder, workers, order)
    t0 = time.perf_counter()
    n = epoch(loader)
    first = time.perf_counter() - t0
    done = 1
    if kind != "cold":
        t0 = time.perf_counter()
        n = done = 0
        while done < epochs or time.perf_counter() - t0 < min_seconds:
            n += epoch(loader)
            done += 1
    seconds = time.perf_counter() - t0
    return {"images": n, "seconds": seconds, "rate": n / seconds, "epochs": done, "first": first}


def profile_mixshard(folder: Path, epochs: int, order: str) -> None:
    """cProfile of mixshard's warm one-process loop (after an untimed epoch)."""
    import cProfile
    import pstats

    loader = read_mixshard(folder, 0, order)
    epoch(loader)
    prof = cProfile.Profile()
    prof.enable()
    n = sum(epoch(loader) for _ in range(epochs))
    prof.disable()
    print(f"mixshard warm, one process, {n} images:", file=sys.stderr)
    stats = pstats.Stats(prof, stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(20)


# ------------------------------------------------------------------------------------- main
def available(only: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """The peers to run and, for each left out, why."""
    peers, skipped = [], {}
    for peer in PEERS:
        if only is not None and peer not in only:
            continue
        if importlib.util.find_spec(MODULE[peer]) is None:
            skipped[peer] = "not installed"
            continue
        peers.append(peer)
    return peers, skipped


def version(lib: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    if lib == "base":
        return "(--baseline)"
    dist = {"streaming": "mosaicml-streaming"}.get(lib, lib)
    try:
        return dist_version(dist)
    except PackageNotFoundError:
        return "?"


def round_order(libs: list[str], r: int) -> list[str]:
    """The libraries' order in round `r`: rotation `r // 2` of them, reversed in odd rounds.
    Over any even number of rounds each library runs before each other one as often as after
    (a cold cell's rate moved 0.7-2x with which of two ran first: reversing only every other
    cycle of rotations left 9 rounds of three libraries at 5 to 4), and no library always runs
    right after the same one (a cold cell reads the page cache its predecessor left)."""
    k = (r // 2) % len(libs)
    turn = libs[k:] + libs[:k]
    return turn[::-1] if r % 2 else turn


def run_rounds(
    args: argparse.Namespace, libs: list[str], folders: dict[str, Path]
) -> tuple[dict, dict]:
    """rates[cell][lib]: the images/s of each round; firsts[cell][lib]: the seconds of each
    round's first epoch."""
    rates: dict[str, dict[str, list[float]]] = {c: {lib: [] for lib in libs} for c in CELLS}
    firsts: dict[str, dict[str, list[float]]] = {c: {lib: [] for lib in libs} for c in CELLS}
    for r in range(args.rounds):
        turn = round_order(libs, r)
        for kind in CELLS:
            workers = {"warm1": 0, "warm2": 2, "cold": args.cold_workers}[kind]
            for lib in turn:
                if kind == "cold":
                    evict(files_of(folders[lib]))
                else:
                    fill(files_of(folders[lib]))
                cmd = [__file__, "--cell", lib, "--kind", kind, "--workers", str(workers)]
                cmd += ["--epochs", str(args.epochs), "--min-seconds", str(args.min_seconds)]
                cmd += ["--order", args.order, str(folders[lib])]
                cmd += ["--baseline", str(args.baseline)] if lib == "base" else []
                got = run_json(cmd, timeout=args.timeout)
                rates[kind][lib].append(got["rate"])
                firsts[kind][lib].append(got["first"])
                print(
                    f"  round {r + 1} {kind:5} {lib:10} {fmt_rate(got['rate'])} img/s "
                    f"({got['images']} in {got['seconds']:.2f} s, {got['epochs']} epochs; "
                    f"first epoch {got['first']:.2f} s)",
                    file=sys.stderr,
                )
    return rates, firsts


def summary(rates: dict, peers: list[str], ours: str = "mixshard") -> list[list[object]]:
    """A row per cell and peer: medians and the per-round ratios of `ours` over the peer."""
    rows: list[list[object]] = []
    for kind in CELLS:
        mine = rates[kind][ours]
        for peer in peers:
            theirs = rates[kind][peer]
            ratios = [a / b for a, b in zip(mine, theirs)]
            rows.append(
                [
                    kind,
                    peer,
                    fmt_rate(statistics.median(theirs)),
                    fmt_rate(statistics.median(mine)),
                    f"{statistics.median(ratios):.2f}x",
                    ", ".join(f"{x:.2f}" for x in ratios),
                ]
            )
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=50_000, help="images in the dataset")
    parser.add_argument("--procedural", action="store_true", help="procedural, not real frames")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs of a warm cell")
    parser.add_argument(
        "--min-seconds", type=float, default=2.0, help="a warm cell times at least this long"
    )
    parser.add_argument("--cold-workers", type=int, default=2)
    parser.add_argument(
        "--order",
        default="global",
        help="mixshard's order (global: a full per-image permutation, as FFCV's RANDOM)",
    )
    parser.add_argument("--only", help="comma-separated peers to run (default: all installed)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per cell at most")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile mixshard's warm one-process loop (to stderr)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another mixshard checkout (its C modules built) to run beside this one",
    )
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("folder", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1:  # (the figures are medians of the rounds)
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def report(args, libs, peers, folders, rates, firsts, skipped) -> str:  # noqa: ANN001
    """The printed table and its notes."""
    kind = "procedural" if args.procedural else "real-frame crops"
    sizes = {lib: sum(p.stat().st_size for p in files_of(folders[lib])) for lib in libs}
    head = (
        f"Peers: {args.images:,} 84x84 RGB uint8 images ({kind}), each library's own format "
        f"(MB on disk: {', '.join(f'{lib} {sizes[lib] / 1e6:.0f}' for lib in libs)}), random "
        f"order, batches of {BATCH}; mixshard order={args.order}; warm: >= {args.epochs} timed "
        f"epochs and >= {args.min_seconds:g} s after an untimed one; cold: the first epoch after "
        f"eviction, worker start included, {args.cold_workers} workers; "
        f"median of {args.rounds} alternated rounds; {machine()}; "
        + ", ".join(f"{lib} {version(lib)}" for lib in libs)
    )
    headers = ["cell", "peer", "peer img/s", "mixshard img/s", "mixshard/peer", "per round"]
    text = head + "\n\n" + table(headers, summary(rates, peers))
    if "base" in libs:
        text += f"\n\nThe baseline ({args.baseline}) in the same rounds:\n\n"
        base_headers = ["cell", "peer", "peer img/s", "base img/s", "base/peer", "per round"]
        text += table(base_headers, summary(rates, [*peers, "mixshard"], ours="base"))
    text += "\n\nFirst epoch of a warm cell (untimed above; worker start, FFCV's compilation), " + (
        "median seconds, one process / 2 workers: "
    )
    text += ", ".join(
        f"{lib} {statistics.median(firsts['warm1'][lib]):.2f} / "
        f"{statistics.median(firsts['warm2'][lib]):.2f}"
        for lib in libs
    )
    if skipped:
        text += "\n\nNot run: " + ", ".join(f"{p} ({w})" for p, w in skipped.items())
    return text


def run_cell(args: argparse.Namespace) -> None:
    """`--cell`: one cell in this process; its JSON on the last line."""
    if args.cell == "base":  # import mixshard from the baseline's checkout
        sys.path.insert(0, str(args.baseline.resolve()))
    got = cell(
        args.cell, args.folder, args.kind, args.workers, args.epochs, args.min_seconds, args.order
    )
    where = sys.modules["mixshard"].__file__ if "mixshard" in sys.modules else None
    if args.cell == "base" and not str(where).startswith(str(args.baseline.resolve())):
        raise SystemExit(f"the baseline's mixshard came from {where}")
    print(json.dumps(got))


def main() -> None:
    args = parse_args()
    if args.cell:
        run_cell(args)
        return
    peers, skipped = available(args.only.split(",") if args.only else None)
    for peer, why in skipped.items():
        print(f"skipping {peer}: {why}", file=sys.stderr)
    if not peers:
        asked = args.only or ", ".join(PEERS)
        raise SystemExit(f"none of {asked} is installed here: nothing to compare with")
    libs = ["mixshard", *peers]
    images = make_images(args.images, args.procedural)
    folders = {lib: dataset(lib, images) for lib in libs}
    if args.baseline is not None:
        libs.append("base")
        folders["base"] = folders["mixshard"]
    if args.profile:
        profile_mixshard(folders["mixshard"], args.epochs, args.order)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    rates, firsts = run_rounds(args, libs, folders)
    text = report(args, libs, peers, folders, rates, firsts, skipped)
    print(text)
    kind = "procedural" if args.procedural else "real-frame crops"
    sizes = {lib: sum(p.stat().st_size for p in files_of(folders[lib])) for lib in libs}
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_peers.md").write_text(text + "\n")
    result = {
        "machine": machine(),
        "images": args.images,
        "kind": kind,
        "rounds": args.rounds,
        "epochs": args.epochs,
        "min_seconds": args.min_seconds,
        "cold_workers": args.cold_workers,
        "order": args.order,
        "versions": {lib: version(lib) for lib in libs},
        "bytes": sizes,
        "rates": rates,
        "first_epoch_seconds": firsts,
        "skipped": skipped,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    (OUT / "bench_peers.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

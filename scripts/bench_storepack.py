"""Packing into an object store against packing into a folder, in one run.

The same SRC is packed, in this process, into a new local folder and into a new prefix of a
bucket on moto's S3 server (`moto[server]`, started here on 127.0.0.1): the store run stages
each shard, uploads it when it is finished and deletes it. The runs alternate (local, store,
local, ...) so a busy neighbour slows both alike; the table gives the medians of `--runs`
runs, images/s, the ratio to the local pack, and whether every object in the bucket has the
bytes of the local file of the same name. moto keeps objects in memory: the figure is the cost
of the staging and the upload path, not of a real network.

    python scripts/bench_storepack.py [SRC] [--runs 3] [--shard-size 100] [--workers 2]

SRC defaults to ../shared/real-frames (500 photographs) beside the repository.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import free_port, use_local_s3  # noqa: E402

DEFAULT_SRC = Path(__file__).resolve().parents[2] / "shared" / "real-frames"


def _server() -> tuple[object, str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, use_local_s3(port)


def _same(url: str, folder: Path) -> bool:
    from mixshard.core.stores import Store

    store = Store(url)
    names = sorted(store.listing())
    local = sorted(p.name for p in folder.iterdir())
    return names == local and all(store.read(n) == (folder / n).read_bytes() for n in names)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", nargs="?", default=str(DEFAULT_SRC))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shard-size", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import s3fs

    from mixshard import pack

    server, _ = _server()
    s3fs.S3FileSystem().mkdir("bench")
    opts = dict(size=84, shard_size=args.shard_size, workers=args.workers)
    times: dict[str, list[float]] = {"local folder": [], "s3:// (moto)": []}
    same = True
    count = 0
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MIXSHARD_STAGING"] = str(Path(tmp) / "staging")
        for run in range(args.runs):
            folder, url = Path(tmp) / f"local-{run}", f"s3://bench/run-{run}"
            t0 = time.perf_counter()
            result = pack(args.src, folder, **opts)
            times["local folder"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            pack(args.src, url, **opts)
            times["s3:// (moto)"].append(time.perf_counter() - t0)
            assert result.manifest is not None
            count = result.manifest.count
            same = same and _same(url, folder)
    server.stop()  # type: ignore[attr-defined]
    base = statistics.median(times["local folder"])
    print(f"{count} images from {args.src}, {args.runs} runs, workers {args.workers}")
    print(f"{'into':<14} {'median s':>9} {'img/s':>8} {'vs local':>9}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<14} {med:>9.2f} {count / med:>8.0f} {base / med:>8.2f}x")
    print(f"every object byte-identical to the local file: {'yes' if same else 'NO'}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()

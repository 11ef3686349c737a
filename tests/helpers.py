"""What the tests share: tiny procedural images and trees, a pack reader that uses plain
webdataset (an independent check of the format), a CLI runner, a local HTTP server.

Torch-free, so the packing tests run without it.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import os
import shutil
import socket
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from click.testing import CliRunner, Result
from PIL import Image

from mixshard.cli import cli
from mixshard.core.manifest import Manifest


@contextlib.contextmanager
def alarm(seconds: float, what: str) -> Iterator[None]:
    """Fail the test naming `what` when the block (in the main thread) runs past `seconds`:
    SIGALRM interrupts any wait that returns to Python; the previous handler and timer are
    restored after."""
    import signal

    import pytest

    def expired(signum, frame):
        pytest.fail(f"{what} did not finish within {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    left, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, left)
        signal.signal(signal.SIGALRM, previous)


def solid(path: Path, color, size=(40, 30), mode="RGB", **save) -> Path:
    """Write one image filled with `color` (any PIL mode), creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color).save(path, **save)
    return path


def noise(path: Path, size=(48, 36), seed=0, **save) -> Path:
    """Write one RGB image of seeded random pixels (distinct per seed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(arr).save(path, **save)
    return path


def make_tree(root: Path, classes=("cat", "dog", "eel"), per_class=6, ext=".png") -> list[str]:
    """An ImageFolder tree of distinct noise images; returns relative paths."""
    rels = []
    for c, name in enumerate(classes):
        for i in range(per_class):
            rel = f"{name}/img{i}{ext}"
            noise(root / rel, size=(40 + 4 * i, 30 + 2 * c), seed=100 * c + i)
            rels.append(rel)
    return rels


def small_pack(
    root: Path, per_class: int, shard_size: int, block_size: int, classes=("a", "b")
) -> Path:
    """`root/pack`: 8 px pixels of `make_tree`'s distinct images in `classes` (`root/src`,
    `per_class` each), one worker."""
    from mixshard import pack

    make_tree(root / "src", classes=classes, per_class=per_class)
    pack(
        root / "src", root / "pack", size=8, shard_size=shard_size, block_size=block_size, workers=1
    )
    return root / "pack"


def make_flat(root: Path, n=10, ext=".jpg") -> list[str]:
    """A flat folder (COCO val2017 style) of distinct noise images."""
    rels = []
    for i in range(n):
        rel = f"{i:012d}{ext}"
        noise(root / rel, size=(64, 48), seed=i)
        rels.append(rel)
    return rels


def png_header_only(path: Path, width: int, height: int) -> None:
    """A PNG that claims `width x height` pixels (an image bomb) with almost no data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def read_pack(out: Path):
    """(images (N,3,S,S) uint8, labels (N,), keys) of a pack, read with plain webdataset."""
    import webdataset as wds

    m = Manifest.load(out)
    images, labels, keys = [], [], []
    for shard in m.shards:
        ds = wds.WebDataset(str(out / shard.name), shardshuffle=False)
        for sample in ds:
            images.append(np.load(io.BytesIO(sample["images.npy"])))
            labels.append(np.load(io.BytesIO(sample["labels.npy"])))
            keys.extend(json.loads(sample["keys.json"]))
    if not images:
        return np.zeros((0, 3, m.size, m.size), np.uint8), np.zeros(0, np.int32), []
    return np.concatenate(images), np.concatenate(labels), keys


def files(folder: Path) -> dict[str, bytes]:
    """Every file of a folder (not recursive): name -> bytes; of `index.json`, all but the
    `source` it records (where the pack was made from: a folder and its archive differ)."""
    return {
        p.name: sourceless(p.name, p.read_bytes()) for p in sorted(folder.iterdir()) if p.is_file()
    }


def sourceless(name: str, data: bytes) -> bytes:
    """A pack file's bytes as `files` compares them: `index.json` without its `source`."""
    if name != "index.json":
        return data
    doc = json.loads(data)
    doc.pop("source", None)
    return json.dumps(doc).encode()


def run(*args: object) -> Result:
    """Run the `mixshard` command in-process; an unexpected exception fails the test."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def copy_pack(pack_dir: Path, dst: Path) -> Path:
    shutil.copytree(pack_dir, dst)
    return dst


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1 in a thread; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def ranged_reply(handler: http.server.BaseHTTPRequestHandler, data: bytes) -> None:
    """Answer `handler`'s GET with `data`, or the part its `Range: bytes=a-b` header asks for
    (206), as a web server that serves byte ranges does."""
    asked = handler.headers.get("Range", "")
    if asked.startswith("bytes="):
        first, _, last = asked[6:].partition("-")
        start, end = int(first), min(len(data), int(last) + 1 if last else len(data))
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        data = data[start:end]
    else:
        handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def serve_folder(folder: Path) -> contextlib.AbstractContextManager[str]:
    """A quiet static file server for `folder` that serves byte ranges."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - the http.server API
            path = Path(self.translate_path(self.path))
            if not path.is_file():
                return super().do_GET()
            ranged_reply(self, path.read_bytes())

    return serve(functools.partial(Quiet, directory=str(folder)))  # type: ignore[arg-type]


def crash_chunk(*args, **kwargs):
    """Stands in for a decode task in a worker process and kills that process."""
    os._exit(3)


def bad_images(root: Path) -> None:
    """Bad images a pack skips, in class folders `a` and `b`: empty, text, cut short, a bomb."""
    (root / "a").mkdir(parents=True, exist_ok=True)
    (root / "a" / "empty.jpg").write_bytes(b"")
    (root / "a" / "notes.png").write_text("I am text")
    good = noise(root / "b" / "tmp.jpg", size=(64, 64)).read_bytes()
    (root / "b" / "tmp.jpg").unlink()
    (root / "b" / "cut.jpg").write_bytes(good[: len(good) // 3])
    png_header_only(root / "b" / "bomb.png", 30000, 30000)


def clip_pack(
    root: Path,
    lengths: list[int],
    size: int = 8,
    block_size: int = 4,
    names: list[str] | None = None,
    resample: str | None = None,
) -> Path:
    """`root/clips`: a clip pack (format version 2) of `len(lengths)` clips of those frame
    counts, `size` px. Frame `f` of clip `c` is red `c % 256`, green `f`, blue `30 * x` in
    column `x` (so a flip shows), packed exactly (solid rows survive the resize) with the image
    packer in play order, then its index.json rewritten as the clip packer writes it (the clips
    named `names`, default `clip0` ...; its filter recorded as `resample`, when given)."""
    from mixshard import pack

    src = root / "clip-frames"
    src.mkdir(parents=True)
    for c, count in enumerate(lengths):
        for f in range(count):
            frame = np.zeros((size, size, 3), np.uint8)
            frame[..., 0], frame[..., 1] = c % 256, f
            frame[..., 2] = (np.arange(size) * 30) % 256
            Image.fromarray(frame).save(src / f"c{c:03d}_f{f:04d}.png")
    out = root / "clips"
    pack(src, out, size=size, shuffle=False, labels="none", workers=1, block_size=block_size)
    data = json.loads((out / "index.json").read_text())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    data["version"] = 2
    names = names or [f"clip{c}" for c in range(len(lengths))]
    data["classes"] = list(names)
    data["clips"] = [
        {"name": name, "start": int(s), "count": n, "fps": 25.0}
        for name, s, n in zip(names, starts, lengths)
    ]
    if resample is not None:
        data["options"]["resample"] = resample
    Manifest.from_dict(data, "clip_pack").save(out)
    return out


def on_terminal(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None, check: bool = False
) -> str:
    """What `cmd` draws on its standard error when that is a terminal (a pseudo-terminal of
    100 columns: a new one has 0), its standard output discarded; `check`: it must exit 0."""
    import fcntl
    import pty
    import subprocess
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    subprocess.run(
        cmd, stdout=subprocess.DEVNULL, stderr=follower, timeout=timeout, env=env, check=check
    )
    os.close(follower)
    chunks = []
    try:
        while chunk := os.read(leader, 1 << 16):
            chunks.append(chunk)
    except OSError:  # EIO: all read, the other end closed
        pass
    finally:
        os.close(leader)
    return b"".join(chunks).decode()

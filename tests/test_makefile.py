"""The Makefile's dataset targets (the README's `make places365` / `make coco`)."""

from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from helpers import files, serve

from mixshard import Manifest
from mixshard.testdata import make_image_folder

ROOT = Path(__file__).resolve().parent.parent


def make(*args: str) -> subprocess.CompletedProcess:
    # PY/STAMP point make at this interpreter instead of building .venv
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), *args, f"PY={sys.executable}", "STAMP=", "RUNTIME="],
        capture_output=True,
        text=True,
    )


def test_places365_and_coco_targets(tmp_path):
    src = tmp_path / "places365_standard"
    make_image_folder(src / "train", classes=2, per_class=4, max_side=64)
    make_image_folder(src / "val", classes=2, per_class=2, max_side=64)
    make_image_folder(tmp_path / "val2017", classes=1, per_class=5, flat=True, max_side=64)
    data = tmp_path / "data"
    res = make("places365", f"SRC={src}", f"DATA={data}")
    assert res.returncode == 0, res.stderr
    assert Manifest.load(data / "places365_standard").count == 8
    assert Manifest.load(data / "places365_standard_val").count == 4
    res = make("coco", f"SRC={tmp_path / 'val2017'}", f"DATA={data}")
    assert res.returncode == 0, res.stderr
    assert Manifest.load(data / "coco").count == 5
    assert res.stdout.rstrip().endswith(f"Use it: export MIXSHARD_DATA={data.resolve()}")
    again = make("coco", f"SRC={tmp_path / 'val2017'}", f"DATA={data}")
    assert "already holds a finished pack of 5 images; nothing to do" in again.stdout


def test_missing_source_says_where_the_data_comes_from(tmp_path):
    res = make("places365", f"SRC={tmp_path / 'nope'}", f"DATA={tmp_path}")
    assert res.returncode != 0
    assert res.stderr.startswith(f"make places365: SRC={tmp_path / 'nope'} does not exist (from ")
    assert "places2.csail.mit.edu" in res.stderr and "train/<class>/*.jpg" in res.stderr
    res = make("coco", f"SRC={tmp_path / 'val2017'}", f"DATA={tmp_path}")
    assert res.returncode != 0
    assert f"SRC={tmp_path / 'val2017'} does not exist" in res.stderr
    assert "COCO's val2017 folder or val2017.zip" in res.stderr
    (tmp_path / "p365").mkdir()  # a folder without train/: the target says what SRC must be
    res = make("places365", f"SRC={tmp_path / 'p365'}", f"DATA={tmp_path / 'data'}")
    assert res.returncode != 0
    assert "places2.csail.mit.edu" in res.stdout and "train/<class>/*.jpg" in res.stdout
    # SRC one level too high: the folder the target packs is named
    make_image_folder(tmp_path / "coco" / "val2017", classes=1, per_class=2, flat=True)
    make_image_folder(tmp_path / "coco" / "train2017", classes=1, per_class=2, flat=True)
    res = make("coco", f"SRC={tmp_path / 'coco'}", f"DATA={tmp_path / 'data'}")
    assert res.returncode != 0
    assert res.stderr.startswith(
        f"make coco: SRC={tmp_path / 'coco'} holds val2017/: pass that folder, "
        f"SRC={tmp_path / 'coco' / 'val2017'}\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["coco", "p365"]


def test_size_writes_a_pack_for_that_obs_size_beside_the_default(tmp_path):
    src = tmp_path / "places365_standard"
    make_image_folder(src / "train", classes=2, per_class=3, max_side=64)
    make_image_folder(tmp_path / "val2017", classes=1, per_class=2, flat=True, max_side=64)
    data = tmp_path / "data"
    res = make("places365", f"SRC={src}", f"DATA={data}", "SIZE=16")
    assert res.returncode == 0, res.stderr
    assert Manifest.load(data / "places365_standard-16").size == 16
    assert not (data / "places365_standard").exists()
    res = make("coco", f"SRC={tmp_path / 'val2017'}", f"DATA={data}", "SIZE=20")
    assert res.returncode == 0, res.stderr
    assert Manifest.load(data / "coco-20").size == 20
    # the reference-like recipe for 16 px obs: a 2x pack where compat looks for 16 px packs
    res = make(
        "coco", f"SRC={tmp_path / 'val2017'}", f"DATA={data}", "SIZE=16", "PACK_ARGS=--size 32"
    )
    assert res.returncode == 0, res.stderr
    assert Manifest.load(data / "coco-16").size == 32


class Dataset(http.server.BaseHTTPRequestHandler):
    """Serves one file with Range support; the first transfer stops half-way (the connection
    is closed after half the announced bytes), as a dropped download does."""

    body = b""
    requests: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        ranged = self.headers.get("Range")
        type(self).requests.append(ranged)
        start = int(ranged.split("=")[1].rstrip("-")) if ranged else 0
        data = self.body[start:]
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(len(data)))
        if ranged:
            self.send_header(
                "Content-Range", f"bytes {start}-{len(self.body) - 1}/{len(self.body)}"
            )
        self.end_headers()
        if len(type(self).requests) == 1:
            data = data[: len(data) // 2]
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


def coco_zip(tmp_path: Path) -> bytes:
    make_image_folder(tmp_path / "val2017", classes=1, per_class=5, flat=True, max_side=64)
    with zipfile.ZipFile(tmp_path / "val2017.zip", "w") as zf:
        for p in sorted((tmp_path / "val2017").iterdir()):
            zf.write(p, f"val2017/{p.name}")
    return (tmp_path / "val2017.zip").read_bytes()


def test_coco_downloads_resumes_a_dropped_transfer_and_packs_from_the_zip(tmp_path):
    body = coco_zip(tmp_path)
    Dataset.body, Dataset.requests = body, []
    data = tmp_path / "data"
    md5 = hashlib.md5(body).hexdigest()
    with serve(Dataset) as url:
        res = make("coco", f"DATA={data}", f"COCO_URL={url}/zips/val2017.zip", f"COCO_MD5={md5}")
    assert res.returncode == 0, res.stderr
    assert Dataset.requests == [None, f"bytes={len(body) // 2}-"]  # resumed, not restarted
    assert (data / "downloads" / "val2017.zip").read_bytes() == body
    assert Manifest.load(data / "coco").count == 5
    ref = tmp_path / "ref"
    assert make("coco", f"SRC={tmp_path / 'val2017'}", f"DATA={ref}").returncode == 0
    assert files(data / "coco") == files(ref / "coco")


def test_a_wrong_checksum_packs_nothing_and_keeps_the_file_aside(tmp_path):
    body = coco_zip(tmp_path)
    Dataset.body, Dataset.requests = body, []
    data = tmp_path / "data"
    with serve(Dataset) as url:
        res = make("coco", f"DATA={data}", f"COCO_URL={url}/val2017.zip", f"COCO_MD5={'0' * 32}")
    assert res.returncode != 0
    bad = data / "downloads" / "val2017.zip.bad"
    assert res.stderr.splitlines()[-2] == (
        f"Error: {url}/val2017.zip: MD5 of the download is {hashlib.md5(body).hexdigest()}, "
        f"expected {'0' * 32}; nothing was packed; the file is kept at {bad} (remove it to "
        "download again)"
    )
    assert bad.read_bytes() == body
    assert sorted(os.listdir(data)) == ["downloads"]
    assert sorted(os.listdir(data / "downloads")) == ["val2017.zip.bad"]


def test_places365_packs_train_and_val_from_its_tar(tmp_path):
    src = tmp_path / "places365_standard"
    make_image_folder(src / "train", classes=2, per_class=4, max_side=64)
    make_image_folder(src / "val", classes=2, per_class=2, max_side=64)
    tar = tmp_path / "places365standard_easyformat.tar"
    with tarfile.open(tar, "w") as tf:
        tf.add(src, arcname="places365_standard")
    res = make("places365", f"SRC={tar}", f"DATA={tmp_path / 'data'}")
    assert res.returncode == 0, res.stderr
    assert Manifest.load(tmp_path / "data" / "places365_standard").count == 8
    assert Manifest.load(tmp_path / "data" / "places365_standard_val").count == 4

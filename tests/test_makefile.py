"""The Makefile's dataset targets (the README's `make places365` / `make coco`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mixshard import Manifest
from mixshard.testdata import make_image_folder

ROOT = Path(__file__).resolve().parent.parent


def make(*args: str) -> subprocess.CompletedProcess:
    # PY/STAMP point make at this interpreter instead of building .venv
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), *args, f"PY={sys.executable}", "STAMP="],
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
    assert res.stdout.rstrip().endswith(f"Use it: export MIXSHARD_DATA={data}")
    again = make("coco", f"SRC={tmp_path / 'val2017'}", f"DATA={data}")
    assert "already holds a finished pack of 5 images; nothing to do" in again.stdout


def test_missing_source_says_where_the_data_comes_from(tmp_path):
    res = make("places365", f"SRC={tmp_path / 'nope'}", f"DATA={tmp_path}")
    assert res.returncode != 0
    assert "places2.csail.mit.edu" in res.stdout and "train/<class>/*.jpg" in res.stdout
    res = make("coco", f"DATA={tmp_path}")
    assert res.returncode != 0
    assert "val2017.zip" in res.stdout and "SRC must be COCO's val2017 folder" in res.stdout
    assert not os.listdir(tmp_path)


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

"""Shared fixtures: tiny procedural image trees made in tmp_path, and a pack reader that uses
plain webdataset (an independent check of the format)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mixshard.format import Manifest


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


def make_flat(root: Path, n=10, ext=".jpg") -> list[str]:
    """A flat folder (COCO val2017 style) of distinct noise images."""
    rels = []
    for i in range(n):
        rel = f"{i:012d}{ext}"
        noise(root / rel, size=(64, 48), seed=i)
        rels.append(rel)
    return rels


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


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A 3-class ImageFolder of 18 distinct PNGs."""
    src = tmp_path / "src"
    make_tree(src)
    return src


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def crash_chunk(*args, **kwargs):
    """Stands in for a decode task in a worker process and kills that process."""
    os._exit(3)

"""Fixtures and the CUDA skip. Torch is imported only when a CUDA-marked test is collected, so
the packing tests run without it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helpers module

from helpers import make_tree, small_pack  # noqa: E402


@pytest.fixture(scope="module")
def pack96(tmp_path_factory) -> Path:
    """96 distinct 8 px images in 4 shards of 24, blocks of 8 (one per test module)."""
    return small_pack(tmp_path_factory.mktemp("pack96"), 48, shard_size=24, block_size=8)


@pytest.fixture
def block_feed(monkeypatch) -> None:
    """The block order reads whole blocks ahead (`blockfeed.py`) even from a pack in the page
    cache, which it would otherwise copy out of mappings (`MIXSHARD_MMAP=0`: none)."""
    monkeypatch.setenv("MIXSHARD_MMAP", "0")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A 3-class ImageFolder of 18 distinct PNGs."""
    src = tmp_path / "src"
    make_tree(src)
    return src


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if "cuda" in item.keywords]
    if not marked:
        return
    try:
        import torch

        available = torch.cuda.is_available()
    except ImportError:
        available = False
    if available:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in marked:
        item.add_marker(skip)


from stores import gcs_bucket, gcs_endpoint, s3_bucket, s3_endpoint  # noqa: E402,F401

"""Fixtures and the CUDA skip. Torch is imported only when a CUDA-marked test is collected, so
the packing tests run without it."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helpers module

from helpers import alarm, make_tree, small_pack  # noqa: E402

RAY_START_BOUND = 120  # seconds a local Ray instance may take to start (a loaded CI machine)


@pytest.fixture(scope="session")
def _ray_temp():
    """A folder of its own for the session's Ray instances (short: Ray puts sockets in it),
    removed with what Ray wrote there once the suite ends."""
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    # every file Ray writes goes there (not /tmp/ray); no token in ~/.ray for a local test
    # cluster on this machine; no usage-stats files
    env = {"RAY_TMPDIR": temp, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    yield temp
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        with alarm(RAY_START_BOUND, "ray.shutdown"):
            ray.shutdown()
    # a Ray process still exiting may write its session folder again after a first removal
    # (seen once in three fresh-clone runs): remove it until it stays gone, for 5 s at most
    for _ in range(20):
        shutil.rmtree(temp, ignore_errors=True)
        time.sleep(0.25)
        if not os.path.exists(temp):
            break
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def local_ray(_ray_temp):
    """One local Ray instance for the whole session (started on first use; again only if a
    test shut it down), in the session's own temp folder. Ray must start in the main thread
    (a driver started on another thread ended the process when a task ran), so the wait is
    bounded by an alarm here, and every test using this fixture runs under pytest-timeout's
    thread method (`pytest_collection_modifyitems`): a start stuck where no signal reaches
    still ends, with the stacks."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        with alarm(RAY_START_BOUND, "starting a local Ray instance (ray.init)"):
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                logging_level="ERROR",
            )
    return ray


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
    for item in items:
        if {"local_ray", "_ray_temp"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.timeout(2 * RAY_START_BOUND + 60, method="thread"))
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


@pytest.fixture(params=["fused", "torch"])
def lerp_path(request, monkeypatch) -> str:
    """Each test run twice: through a CPU's one-pass blend (`augment/_lerp.c`) and through the
    torch ops every other device runs (what a CPU runs where the module is not built)."""
    from mixshard.augment.kernels import fused

    if request.param == "torch":
        monkeypatch.setattr(fused, "_lerp", None)
    elif fused._lerp is None:
        pytest.skip("mixshard.augment.kernels._lerp is not built")
    return request.param

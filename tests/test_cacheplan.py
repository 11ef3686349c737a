"""`CachePlan`: each branch of the one rule that picks device, pool or stream and sizes the
pool, its explanation, and `Overlay` and `Backgrounds` choosing alike from the same inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import make_flat

import mixshard
from mixshard.augment.caches import plan as plans
from mixshard.augment.caches.plan import plan_cache

CPU = torch.device("cpu")


def plan(cache="auto", **kw):
    kw = {"need": 1000, "item_bytes": 100, "free": 4000, **kw}
    return plan_cache(cache, CPU, kw.pop("fraction", 0.5), **kw)


def test_auto_takes_the_device_when_the_whole_pack_fits_in_the_budget():
    p = plan(need=2000)  # the budget: 0.5 x 4000
    assert (p.mode, p.budget, p.size, p.asked) == ("device", 2000, 0, "auto")
    assert p.explain() == (
        "device cache on cpu: cache='auto' takes the device when the whole pack fits, else a "
        "pool; the pack needs 2,000 bytes and fits in the budget, 0.5 of the free memory "
        "(2,000 bytes)."
    )


def test_auto_takes_a_pool_the_budget_holds_when_the_pack_does_not_fit():
    p = plan(need=2001)
    assert (p.mode, p.size, p.size_asked, p.item) == ("pool", 20, False, "images")
    assert p.explain().endswith(
        "does not fit in the budget, 0.5 of the free memory (2,000 bytes). The pool holds 20 "
        "images of 100 bytes each (as many as the budget holds)."
    )


def test_an_asked_cache_is_taken_whatever_fits():
    assert plan("device", need=10**9).mode == "device"
    stream = plan("stream", need=10**9)
    assert (stream.mode, stream.size) == ("stream", 0)
    assert stream.explain().startswith("stream cache on cpu: cache='stream' was asked;")
    pool = plan("pool", need=10)  # (fits, but a pool was asked)
    assert (pool.mode, pool.size) == ("pool", 20)


def test_an_asked_pool_size_is_kept_and_capped_at_what_the_pack_holds():
    p = plan("pool", pool=7)
    assert (p.size, p.size_asked) == (7, True)
    assert "The pool holds 7 images of 100 bytes each (as pool= asked)." in p.explain()
    assert plan("pool", pool=70, most=9, item="clips").size == 9
    assert plan("pool", most=9, item="clips").size == 9  # (the budget holds 20)


def test_a_pool_without_room_says_how_to_make_room():
    with pytest.raises(mixshard.MixshardError) as err:
        plan("pool", free=100)
    assert str(err.value) == (
        "no room for a pool: 50 bytes free for it, one image takes 100; free memory, raise "
        "cache_fraction or pass pool=N"
    )
    with pytest.raises(mixshard.MixshardError) as err:
        plan("pool", pool=3, item="clips", least=4)
    assert str(err.value) == (
        "no room for a pool of clips: it holds 3 clips of 100 bytes, and 4 may play at once "
        "(one an environment); free memory, raise cache_fraction or pass pool=N (N >= 4)"
    )


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("plan")
    make_flat(root / "src", n=12, ext=".png")
    mixshard.pack(root / "src", root / "pack", size=8, workers=1, labels="none")
    return root / "pack"


@pytest.mark.parametrize("free", [10**9, 8 * 8 * 3 * 5])
def test_overlay_and_backgrounds_choose_the_same_for_the_same_pack_and_memory(
    images, monkeypatch, free
):
    """An image pack's images are one-frame clips: both objects ask the one rule the same
    question, so they keep the same cache, of the same size."""
    monkeypatch.setattr(plans, "free_memory", lambda device: free)
    overlay = mixshard.Overlay(images, cache_fraction=0.5)
    overlay(torch.zeros(1, 3, 8, 8))
    bg = mixshard.Backgrounds(images, 1, frames=1, cache_fraction=0.5)
    try:
        fields = ("asked", "mode", "device", "need", "budget", "item_bytes", "size")
        assert [getattr(overlay.plans["cpu"], f) for f in fields] == [
            getattr(bg.plan, f) for f in fields
        ]
        assert bg.plan.mode == ("device" if free == 10**9 else "pool")
        assert bg.plan.size == (0 if free == 10**9 else 2)  # (960 / 2) // 192
        assert overlay.stats()["cpu"]["mode"] == bg.stats()["mode"]
    finally:
        overlay.close()
        bg.close()

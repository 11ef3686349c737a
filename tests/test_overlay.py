"""mixshard.Overlay and mixshard.compat.random_overlay."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_tree, read_pack

import mixshard
from mixshard import ManifestError, MixshardError, Overlay
from mixshard.compat import random_overlay

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
M = 40  # images in the pack


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("overlay")
    make_tree(root / "src", classes=("a", "b"), per_class=M // 2)
    mixshard.pack(root / "src", root / "coco", size=12, shard_size=16, block_size=4, workers=1)
    return root / "coco"


@pytest.fixture(scope="module")
def pack_images(pack_dir) -> torch.Tensor:
    return torch.from_numpy(read_pack(pack_dir)[0])


def as_set(imgs: torch.Tensor) -> list[bytes]:
    return sorted(bytes(i.cpu().numpy()) for i in imgs)


def obs_batch(n: int, k: int = 3, size: int = 12, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3 * k, size, size, generator=g) * 255


@pytest.mark.parametrize("cache", ["device", "pool", "stream"])
def test_backgrounds_are_pack_images_and_blend_is_the_reference(pack_dir, pack_images, cache):
    ov = Overlay(pack_dir, cache=cache, flip=False, num_workers=0, seed=1, pool=16)
    obs = obs_batch(10)
    out = ov(obs)
    assert out.shape == obs.shape and out.dtype == torch.float32
    assert ov.modes == {"cpu": cache}
    imgs = (2 * out[:, :3] - obs[:, :3]).round()  # alpha 0.5: background = 2 out - obs
    assert ((2 * out - obs).round() == imgs.repeat(1, 3, 1, 1)).all()  # same on all frames
    pack = set(as_set(pack_images))
    assert set(as_set(imgs.to(torch.uint8))) <= pack
    ov.close()


@pytest.mark.parametrize("cache", ["device", "pool", "stream"])
def test_every_cache_has_the_declared_interface(pack_dir, pack_images, cache):
    """Each of Overlay's caches is a `BackgroundCache` (take, stats, close): its own images
    as asked, its mode and draws counted, closed twice without harm."""
    from mixshard.augment.caches.cache import BackgroundCache

    ov = Overlay(pack_dir, cache=cache, flip=False, num_workers=0, seed=2, pool=16)
    ov.sample(6)
    (state,) = ov._states.values()
    assert isinstance(state.cache, BackgroundCache)
    imgs = state.cache.take(5)
    assert imgs.shape == (5, 3, 12, 12) and imgs.dtype == torch.uint8
    assert set(as_set(imgs)) <= set(as_set(pack_images))
    stats = state.cache.stats()
    assert (stats["mode"], stats["draws"]) == (cache, 11)
    assert ov.stats() == {"cpu": stats}
    state.cache.close()
    ov.close()
    assert ov.modes == {}


def test_flips_are_per_image(pack_dir, pack_images):
    pack = set(as_set(pack_images))
    flipped = set(as_set(pack_images.flip(-1)))
    got = Overlay(pack_dir, cache="device", flip=True, seed=3).sample(400)
    kinds = [(b in pack, b in flipped) for b in (bytes(i.numpy()) for i in got)]
    assert all(a or b for a, b in kinds)
    n_flipped = sum(1 for a, b in kinds if b and not a)
    assert 120 < n_flipped < 280  # about half


def test_crop_one_one_without_flip_is_the_identity(pack_dir, pack_images):
    ov = Overlay(pack_dir, cache="device", flip=False, crop=(1.0, 1.0))
    assert as_set(ov.sample(M)) == as_set(pack_images)
    cropped = Overlay(pack_dir, cache="device", crop=(0.1, 0.3), seed=2).sample(8)
    assert cropped.shape == (8, 3, 12, 12) and cropped.dtype == torch.uint8
    assert not set(as_set(cropped)) & set(as_set(pack_images))


@pytest.mark.parametrize("cache", ["device", "stream"])
def test_variable_batch_sizes_lose_and_repeat_nothing(pack_dir, pack_images, cache):
    ov = Overlay(pack_dir, cache=cache, flip=False, num_workers=2, batch_size=8, seed=5)
    sizes = [3, 8, 1, 13, 5, 10]  # 40 = one pass over the pack
    drawn = torch.cat([ov.sample(n) for n in sizes])
    assert as_set(drawn) == as_set(pack_images)
    if cache == "stream":
        ref = mixshard.loader(pack_dir, 8, num_workers=0, infinite=True, seed=5)
        it = iter(ref)
        assert torch.equal(drawn, torch.cat([next(it) for _ in range(5)]))
    for n in (7, 40, 2):
        assert ov(obs_batch(n)).shape == (n, 9, 12, 12)
    ov.close()


def test_device_cache_covers_the_pack_evenly(pack_dir, pack_images):
    ov = Overlay(pack_dir, cache="device", flip=False, seed=0)
    index = {b: i for i, b in enumerate(as_set(pack_images))}
    counts = torch.zeros(M)
    for _ in range(30):
        for b in (bytes(i.numpy()) for i in ov.sample(17)):
            counts[index[b]] += 1
    # 510 draws over 40 images in permutations of the pack: every count is 12 or 13
    assert counts.min() >= 12 and counts.max() <= 13
    expected = counts.sum() / M
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 20  # df 39: anything under ~55 is sane; permutation draws are far below


def test_seeded(pack_dir):
    obs = obs_batch(6)
    a = Overlay(pack_dir, seed=7, alpha=(0.2, 0.8), crop=(0.5, 1.0))(obs)
    b = Overlay(pack_dir, seed=7, alpha=(0.2, 0.8), crop=(0.5, 1.0))(obs)
    c = Overlay(pack_dir, seed=8, alpha=(0.2, 0.8), crop=(0.5, 1.0))(obs)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_ranks_draw_different_backgrounds(pack_dir, monkeypatch):
    import torch.distributed as dist

    draws = []
    for rank in (0, 1, 0):
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_rank", lambda r=rank: r)
        monkeypatch.setattr(dist, "get_world_size", lambda: 2)
        draws.append(Overlay(pack_dir, cache="device", seed=4).sample(8))
    assert torch.equal(draws[0], draws[2]) and not torch.equal(draws[0], draws[1])


def test_alpha_forms(pack_dir):
    obs = torch.zeros(50, 3, 12, 12)
    # the same seed draws the same backgrounds (alpha is drawn after them): out = alpha * img
    imgs = Overlay(pack_dir, cache="device", flip=False, alpha=1.0, seed=1)(obs)
    out = Overlay(pack_dir, cache="device", flip=False, alpha=(0.2, 0.4), seed=1)(obs)
    drawn = out.sum(dim=(1, 2, 3)) / imgs.sum(dim=(1, 2, 3))
    assert drawn.min() >= 0.2 and drawn.max() <= 0.4 and drawn.std() > 0.02
    alpha = torch.linspace(0, 1, 50)
    out = Overlay(pack_dir, cache="device", flip=False, alpha=alpha)(obs)
    assert (out[0] == 0).all()  # alpha 0 keeps obs
    full = Overlay(pack_dir, cache="device", flip=False, alpha=1.0)
    imgs = full(obs)
    assert (imgs == imgs.round()).all()  # alpha 1: the background itself


def test_uint8_obs_and_other_sizes(pack_dir):
    ov = Overlay(pack_dir, cache="device")
    out = ov(obs_batch(4).to(torch.uint8))
    assert out.dtype == torch.uint8
    with pytest.warns(UserWarning, match="pack images are 12x12 but 20x20 were asked for"):
        big = ov(obs_batch(4, size=20))
    assert big.shape == (4, 9, 20, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once only
        ov(obs_batch(4, size=20))


def test_errors(pack_dir, tmp_path):
    with pytest.raises(ManifestError) as err:
        Overlay(tmp_path / "nothing")
    assert str(err.value) == (
        f"pack folder not found: {tmp_path}/nothing; make it with "
        f"`mixshard pack SRC {tmp_path}/nothing`"
    )
    with pytest.raises(
        ValueError, match="cache must be one of auto, device, pool, stream, got 'gpu'"
    ):
        Overlay(pack_dir, cache="gpu")
    with pytest.raises(ValueError, match="crop must be"):
        Overlay(pack_dir, crop=(0.5, 0.2))
    with pytest.raises(ValueError, match=r"obs must be \(N, 3k, H, W\)"):
        Overlay(pack_dir)(torch.zeros(2, 4, 12, 12))


def test_a_file_url_source(pack_dir, pack_images):
    ov = Overlay(pack_dir.as_uri(), cache="device", flip=False)
    assert as_set(ov.sample(M)) == as_set(pack_images)


def test_compat_random_overlay(pack_dir, pack_images, monkeypatch):
    monkeypatch.setenv("MIXSHARD_DATA", str(pack_dir.parent))
    x = obs_batch(8)
    out = random_overlay(x, dataset="coco")
    assert out.dtype == torch.float32 and out.shape == x.shape
    imgs = (2 * out[:, :3] - x[:, :3]).round().to(torch.uint8)
    allowed = set(as_set(pack_images)) | set(as_set(pack_images.flip(-1)))
    assert set(as_set(imgs)) <= allowed
    assert random_overlay(x.round().to(torch.uint8), "coco").dtype == torch.float32
    with pytest.raises(MixshardError) as err:
        random_overlay(obs_batch(2, size=84))  # places365_standard is not packed there
    assert str(err.value) == (
        f"no packed dataset 'places365_standard': {pack_dir.parent}/places365_standard/"
        f"index.json does not exist; the packs in {pack_dir.parent}: coco. Make it from the "
        f"mixshard checkout with `make places365 SRC=<...>/places365_standard "
        f"DATA={pack_dir.parent}`, and set MIXSHARD_DATA to an absolute path"
    )
    with pytest.raises(MixshardError) as err:
        random_overlay(x)  # 12 px obs: a places365_standard-12 would do too
    root = pack_dir.parent
    assert str(err.value) == (
        f"no packed dataset 'places365_standard': neither {root}/places365_standard-12/"
        f"index.json (for 12x12 observations) nor {root}/places365_standard/index.json exists; "
        f"the packs in {root}: coco. Make it from the mixshard checkout with `make places365 "
        f"SRC=<...>/places365_standard DATA={root} SIZE=12`, and set MIXSHARD_DATA to an "
        "absolute path"
    )
    other = pack_dir.parent / "elsewhere"
    mixshard.pack(pack_dir.parent / "src", other / "coco", size=8, workers=1)
    monkeypatch.setenv("MIXSHARD_DATA", str(other))
    assert random_overlay(obs_batch(2, size=8), "coco").shape == (2, 9, 8, 8)  # not the old pack
    monkeypatch.delenv("MIXSHARD_DATA")
    with pytest.raises(MixshardError, match="set MIXSHARD_DATA to the folder that holds"):
        random_overlay(x, dataset="other")


@pytest.mark.cuda
def test_cuda_overlay_device_cache(pack_dir, pack_images):
    ov = Overlay(pack_dir, cache="device", flip=False)
    obs = obs_batch(16).cuda()
    out = ov(obs)
    assert out.is_cuda and ov.modes == {"cuda:0": "device"}
    imgs = (2 * out[:, :3] - obs[:, :3]).round().to(torch.uint8).cpu()
    assert set(as_set(imgs)) <= set(as_set(pack_images))
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = ov(obs)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base <= obs.nbytes + obs.nbytes // 2


@pytest.mark.cuda
def test_cuda_overlay_stream(pack_dir, pack_images):
    ov = Overlay(pack_dir, cache="stream", flip=False, num_workers=2, batch_size=8)
    drawn = torch.cat([ov.sample(n, "cuda") for n in (3, 8, 13, 16)])
    assert drawn.is_cuda and as_set(drawn) == as_set(pack_images)
    ov.close()


@pytest.fixture(scope="module")
def ramp_pack(tmp_path_factory) -> Path:
    """A 24 px pack (2x the 12 px obs) of ramps: red = 10 x, green = 10 y at pixel (x, y)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("ramp")
    yy, xx = np.mgrid[0:24, 0:24]
    for i in range(4):
        arr = np.stack([10 * xx, 10 * yy, np.full_like(xx, 50 * i)], axis=-1).astype(np.uint8)
        (root / "src").mkdir(exist_ok=True)
        Image.fromarray(arr).save(root / "src" / f"ramp{i}.png")
    mixshard.pack(root / "src", root / "pack", size=24, workers=1)
    return root / "pack"


def window_areas(imgs: torch.Tensor) -> torch.Tensor:
    """The area fraction of the 24 px window each 12 px ramp image was resampled from.

    Away from the image borders the resampling filter is symmetric and reproduces a ramp, so
    output pixel j holds the ramp at its centre, x0 + (j + 0.5) * w / 12 - 0.5: the slope
    between columns 2 and 9 gives w (rows: h). abs() because a flip reverses the slope."""
    x = imgs.double()
    w = (x[:, 0, 6, 9] - x[:, 0, 6, 2]).abs() / 10 / 7 * 12
    h = (x[:, 1, 9, 6] - x[:, 1, 2, 6]).abs() / 10 / 7 * 12
    return w * h / 24**2


@pytest.mark.parametrize("scale", [(0.08, 1.0), (0.3, 0.5)])
def test_crop_from_a_2x_pack_gives_obs_size_without_warning(ramp_pack, scale):
    ov = Overlay(ramp_pack, cache="device", crop=scale, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        imgs = ov.sample(600, size=12)
        out = ov(obs_batch(5))
    assert imgs.shape == (600, 3, 12, 12) and imgs.dtype == torch.uint8
    assert out.shape == (5, 9, 12, 12)
    area = window_areas(imgs)
    # the windows cover the range asked for (up to rounding boxes to whole pixels)
    assert area.min() >= scale[0] - 0.03 and area.max() <= scale[1] + 0.03
    assert area.min() <= scale[0] + 0.03 and area.max() >= scale[1] - 0.06
    flipped = imgs[:, 0, 6, 9] < imgs[:, 0, 6, 2]
    assert 200 < flipped.sum() < 400


def test_a_larger_pack_without_crop_still_warns(ramp_pack):
    ov = Overlay(ramp_pack, cache="device")
    with pytest.warns(UserWarning, match="pack images are 24x24 but 12x12 were asked for"):
        assert ov.sample(3, size=12).shape == (3, 3, 12, 12)
    up = Overlay(ramp_pack, cache="device", crop=(0.5, 1.0))
    with pytest.warns(UserWarning, match="pack images are 24x24 but 30x30 were asked for"):
        assert up.sample(3, size=30).shape == (3, 3, 30, 30)


@pytest.mark.parametrize("cache", ["stream", "pool", "device"])
def test_a_pack_over_http_has_its_manifest_fetched_once(
    pack_dir, pack_images, cache, tmp_path, monkeypatch
):
    """Overlay reads index.json once; its stream or pool does not fetch it again (a pack
    replaced on the server between two fetches would mix two manifests)."""
    import http.server

    from helpers import ranged_reply, serve

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the block cache's folder
    asked: list[str] = []

    class Counting(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            if self.headers.get("Range") != "bytes=0-0":  # not the size probe
                asked.append(self.path)
            ranged_reply(self, (pack_dir / self.path.lstrip("/")).read_bytes())

        def log_message(self, *args):
            pass

    with serve(Counting) as base:
        ov = Overlay(base, cache=cache, pool=8, num_workers=0, flip=False, alpha=1.0)
        out = ov(torch.zeros(6, 3, 12, 12)).round().to(torch.uint8)
        ov.close()
    assert set(as_set(out)) <= set(as_set(pack_images))
    assert asked.count("/index.json") == 1, asked

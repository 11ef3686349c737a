"""mixshard.compat against the reference semantics of each code base it replaces: DMC-GB's
random_overlay, MaDi's alpha and `splice`, SGQN's attribution augmentations, DMC-GB2's module."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_tree, read_pack
from PIL import Image

import mixshard
from mixshard import compat, datasets
from mixshard.augment.masks.builders import hsv_above
from mixshard.compat import (
    RandomOverlay,
    attribution_augmentation,
    attribution_random_patch_augmentation,
    random_overlay,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """places365_standard (12 px), places365_standard-16 and coco (a 24 px ramp pack)."""
    root = tmp_path_factory.mktemp("compat")
    make_tree(root / "src", classes=("a", "b"), per_class=10)
    kw = dict(shard_size=16, block_size=4, workers=1)
    mixshard.pack(root / "src", root / "data" / "places365_standard", size=12, **kw)
    mixshard.pack(root / "src", root / "data" / "places365_standard-16", size=16, **kw)
    yy, xx = np.mgrid[0:24, 0:24]
    for i in range(4):
        arr = np.stack([10 * xx, 10 * yy, np.full_like(xx, 50 * i)], axis=-1).astype(np.uint8)
        (root / "ramps").mkdir(exist_ok=True)
        Image.fromarray(arr).save(root / "ramps" / f"ramp{i}.png")
    mixshard.pack(root / "ramps", root / "data" / "coco", size=24, workers=1)
    return root / "data"


@pytest.fixture(autouse=True)
def env(data, monkeypatch):
    monkeypatch.setenv("MIXSHARD_DATA", str(data))
    compat._overlays.clear()
    datasets._found.clear()
    RandomOverlay.places_dirs = None
    yield
    RandomOverlay.places_dirs = None


def images_of(folder: Path) -> torch.Tensor:
    imgs = torch.from_numpy(read_pack(folder)[0])
    return torch.cat([imgs, imgs.flip(-1)]).float()  # a pack image or its flip


def obs(n=6, k=3, size=12, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3 * k, size, size, generator=g) * 255


def assert_backgrounds(out, x, keep, candidates, weight=1.0):
    """Pixels `keep` (bool, like x) are x exactly; every other pixel of a sample is the same
    candidate image on every frame (out = (1 - weight) x + weight img there)."""
    assert torch.equal(out[keep], x[keep])
    n, c, h, w = x.shape
    for s in range(n):
        show = ~keep[s].view(c // 3, 3, h, w)
        img = ((out[s] - (1 - weight) * x[s]) / weight).view(c // 3, 3, h, w)
        hits = [
            bool((img[show] - cand.expand(c // 3, 3, h, w)[show]).abs().max() < 0.01)
            for cand in candidates
        ]
        assert any(hits), f"sample {s}: not one pack image"


def test_random_overlay_alpha_as_given(data):
    x = obs()
    cands = images_of(data / "places365_standard")
    none = torch.zeros_like(x, dtype=torch.bool)
    assert_backgrounds(random_overlay(x), x, none, cands, 0.5)
    assert_backgrounds(random_overlay(x, alpha=0.3), x, none, cands, 0.3)  # TLDA's
    assert_backgrounds(
        random_overlay(x.to(torch.uint8)), x.to(torch.uint8).float(), none, cands, 0.5
    )


def kornia_splice_mask(x, hue, sat, val):
    """MaDi's splice mask, computed as MaDi does (kornia on chunks of 3 channels)."""
    kornia = pytest.importorskip("kornia")
    n, c, h, w = x.shape
    thresholds = torch.FloatTensor([hue, sat, val]).view(1, 3, 1, 1).repeat(n, 3, h, w) * 255.0
    hsv = torch.cat([kornia.color.rgb_to_hsv(chunk) for chunk in torch.chunk(x, 3, dim=1)], 1)
    mask = (hsv > thresholds).view(n, 3, 3, h, w).all(dim=2, keepdim=True).repeat(1, 1, 3, 1, 1)
    return mask.view(n, c, h, w)


def awkward_pixels(n=6, size=12, seed=0) -> torch.Tensor:
    """Random pixels plus greys, black, white, ties of the maximum and pure red."""
    x = obs(n, size=size, seed=seed).round()
    x[:, 0:3, 0, :] = 128.0  # grey
    x[:, 0:3, 1, :] = 0.0
    x[:, 0:3, 2, :] = 255.0
    x[:, 3, 0, :], x[:, 4, 0, :], x[:, 5, 0, :] = 200.0, 200.0, 10.0  # R = G max
    x[:, 3, 1, :], x[:, 4, 1, :], x[:, 5, 1, :] = 200.0, 10.0, 10.0  # pure red: hue 0
    x[:, 6, 0, :], x[:, 7, 0, :], x[:, 8, 0, :] = 200.0, 100.0, 100.00001  # hue -1e-8: 0
    return x


@pytest.mark.parametrize("hue,sat,val", [(0.0, 0.0, 0.6), (0.01, 0.0, 0.3), (0.0, 0.002, 0.0)])
def test_splice_mask_is_the_one_kornia_gives(hue, sat, val):
    x = awkward_pixels()
    thresholds = torch.tensor([hue, sat, val]) * 255.0
    mine = hsv_above(x, thresholds).expand(6, 3, 3, 12, 12).reshape(6, 9, 12, 12)
    assert torch.equal(mine, kornia_splice_mask(x, hue, sat, val))


def test_splice_mask_by_hand():
    # (R, G, B) -> H (radians), S, V; kept with the defaults when H > 0, S > 0 and V > 153
    x = torch.tensor([[200, 100, 100], [100, 200, 100], [160, 160, 160], [150, 10, 200]])
    x = x.float().T.reshape(1, 3, 1, 4)
    keep = hsv_above(x, torch.tensor([0.0, 0.0, 153.0]))
    # red with G = B has hue 0 (dropped); green, H = 2 pi / 3; grey S = 0; V = 200 > 153
    assert keep.flatten().tolist() == [False, True, False, True]
    keep = hsv_above(x, torch.tensor([2.0, 0.0, 0.0]))  # H > 2 rad: green (2.09), violet
    assert keep.flatten().tolist() == [False, True, False, True]
    keep = hsv_above(x, torch.tensor([2.1, 0.5, 0.0]))  # violet: H 4.94, S 0.95
    assert keep.flatten().tolist() == [False, False, False, True]


def test_splice_pastes_the_kept_pixels_on_one_image(data):
    x = awkward_pixels()
    out = random_overlay(x, method="splice")
    keep = hsv_above(x, torch.tensor([0.0, 0.0, 0.6]) * 255).expand(6, 3, 3, 12, 12)
    keep = keep.reshape(6, 9, 12, 12)
    assert 0 < keep.float().mean() < 1
    assert_backgrounds(out, x, keep, images_of(data / "places365_standard"))
    assert out.min() >= 0 and out.max() <= 255  # clamped, as MaDi's
    with pytest.raises(TypeError) as err:
        random_overlay(x, "splice")  # MaDi's second argument is the method
    assert str(err.value) == (
        "random_overlay's second argument is the dataset (as in DMC-GB), got 'splice': "
        "pass method='splice'"
    )
    with pytest.raises(ValueError, match="method must be one of default, splice, got 'x'"):
        random_overlay(x, method="x")


def test_attribution_augmentation_shows_the_image_where_the_mask_is_zero(data):
    x = obs()
    g = torch.Generator().manual_seed(1)
    keep = torch.rand(6, 9, 12, 12, generator=g) < 0.4  # per channel, as SGQN's mask
    cands = images_of(data / "places365_standard")
    assert_backgrounds(attribution_augmentation(x, keep.float()), x, keep, cands)
    assert_backgrounds(attribution_augmentation(x, keep), x, keep, cands)
    half = torch.full((6, 9, 12, 12), 0.5)  # fractional: x * m + img * (1 - m)
    none = torch.zeros_like(x, dtype=torch.bool)
    assert_backgrounds(attribution_augmentation(x, half), x, none, cands, 0.5)


def test_random_patches_keep_salient_patches(data):
    x = obs(n=4)
    cam = torch.zeros(4, 12, 12)
    cam[:, :6, :6] = 1.0  # the top-left 2x2 of the 4x4 patches (3 px each) is salient
    cands = images_of(data / "places365_standard")
    out = attribution_random_patch_augmentation(x, cam, image_size=12, patch_proba=1.0)
    keep = torch.zeros(4, 9, 12, 12, dtype=torch.bool)
    keep[:, :, :6, :6] = True
    assert_backgrounds(out, x, keep, cands)
    torch.manual_seed(0)
    out = attribution_random_patch_augmentation(x, cam, image_size=12, patch_proba=0.0)
    for s in range(4):  # exactly one salient patch kept: 9 of its pixels are x, per channel
        same = (out[s] == x[s]).all(0)
        assert same[:6, :6].sum() == 9 and same[6:].sum() + same[:, 6:].sum() < 3
    with pytest.raises(ValueError, match=r"cam must be \(N, H, W\) or \(N, 1, H, W\)"):
        attribution_random_patch_augmentation(x, torch.zeros(4, 2, 12, 12), image_size=12)


def test_random_overlay_module_in_sequential_and_on_subsets(data):
    aug = RandomOverlay(max_batch_size=256, alpha=0.5)
    assert isinstance(aug, torch.nn.Module)
    x = obs(n=8)
    net = torch.nn.Sequential(aug, torch.nn.Flatten())
    assert net(x).shape == (8, 9 * 144)
    cands = images_of(data / "places365_standard")
    sel = torch.tensor([True, False, True, True, False, False, True, False])
    y = x.clone()
    y[sel] = aug(y[sel])  # DMC-GB2's compose_augs
    assert torch.equal(y[~sel], x[~sel])
    none = torch.zeros_like(x[sel], dtype=torch.bool)
    assert_backgrounds(y[sel], x[sel], none, cands, 0.5)
    assert_backgrounds(
        RandomOverlay(alpha=0.2)(x), x, torch.zeros_like(x, dtype=torch.bool), cands, 0.2
    )
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\], got 1.5"):
        RandomOverlay(alpha=1.5)
    for alpha in ("0.5", True, None):  # at 5e33428: a raw TypeError, or taken until forward
        with pytest.raises(
            TypeError, match=f"alpha must be a float in \\[0, 1\\], got .*{alpha!r}"
        ):
            RandomOverlay(alpha=alpha)


def test_places_dirs_are_used_when_mixshard_data_is_unset(data, tmp_path, monkeypatch):
    monkeypatch.delenv("MIXSHARD_DATA")
    RandomOverlay.places_dirs = [str(tmp_path / "absent"), str(data)]  # add_aug_directory
    assert RandomOverlay()(obs(n=2)).shape == (2, 9, 12, 12)
    RandomOverlay.places_dirs = [str(tmp_path)]
    datasets._found.clear()
    with pytest.raises(mixshard.MixshardError) as err:
        RandomOverlay()(obs(n=2, size=84))
    assert str(err.value) == (
        f"no packed dataset 'places365_standard': MIXSHARD_DATA is unset and, of places_dirs "
        f"['{tmp_path}'], {tmp_path}/places365_standard/index.json does not exist; {tmp_path} "
        "holds no pack. Make it from the mixshard checkout with `make places365 "
        f"SRC=<...>/places365_standard DATA={tmp_path}`, and set MIXSHARD_DATA to an absolute path"
    )


def test_one_cache_per_pack_for_every_function_and_alpha(data):
    x = obs()
    random_overlay(x)
    random_overlay(x, alpha=0.3)
    random_overlay(x, method="splice")
    attribution_augmentation(x, torch.ones_like(x))
    RandomOverlay(alpha=0.2)(x)
    (overlay,) = compat._overlays.values()
    assert overlay.modes == {"cpu": "device"}  # one cache on the one device
    assert overlay.stats()["cpu"]["draws"] == 5 * 6


def test_a_pack_per_obs_size(data):
    out = random_overlay(obs(n=3, size=16), alpha=1.0)  # places365_standard-16
    assert set(compat._overlays) == {str((data / "places365_standard-16").resolve())}
    assert_backgrounds(
        out, out, torch.zeros_like(out, dtype=torch.bool), images_of(data / "places365_standard-16")
    )
    random_overlay(obs(n=3), alpha=1.0)  # 12 px: places365_standard
    assert len(compat._overlays) == 2


def test_a_larger_pack_is_cropped_afresh_per_draw_without_warning(data):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = random_overlay(torch.full((300, 3, 12, 12), 0.0), "coco", alpha=1.0)
    # ramp pack: red = 10 x at column x of 24, so the slope gives each window's width
    width = (out[:, 0, 6, 9] - out[:, 0, 6, 2]).abs() / 10 / 7 * 12
    assert width.min() < 10 and width.max() > 20  # RandomResizedCrop's range, not one resize


def test_compat_on_a_larger_pack_is_the_readmes_reference_like_overlay(data):
    x = obs(n=8)
    mine = random_overlay(x, "coco")
    recipe = mixshard.Overlay(data / "coco", crop=(0.08, 1.0))  # README: --size 168 + crop
    assert torch.equal(mine, recipe(x))  # the same draws: seed 0, flips, crops


def test_bad_inputs_are_errors_and_warnings(data):
    with pytest.raises(ValueError, match=r"look channels-last .* pass obs.permute\(0, 3, 1, 2\)"):
        random_overlay(torch.zeros(2, 84, 84, 9))
    with pytest.raises(TypeError, match="obs must be a torch.Tensor"):
        random_overlay(np.zeros((2, 9, 12, 12)))  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="lie within 0..1 .* takes float 0..255") as said:
        random_overlay(obs() / 255)
    assert said[0].filename == __file__  # the warning names the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        random_overlay(obs() / 255)  # checked on the first call only


def test_a_size_mismatch_warns_once_per_size(data):
    overlay = mixshard.Overlay(data / "places365_standard", cache="device")
    for size, warns in ((20, True), (20, False), (24, True), (20, False), (24, False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            overlay(obs(n=2, size=size))
        said = [w for w in caught if "were asked for" in str(w.message)]
        assert len(said) == warns, (size, said)
        assert all(w.filename == __file__ for w in said)
    with pytest.warns(UserWarning, match="84x252 were asked for; .*packs are square"):
        overlay(obs(n=1, size=84)[..., :1].expand(1, 9, 84, 252))


@pytest.mark.parametrize("name", ["../data/coco", "ABS/coco", "coco/", "..", "", "a\\b"])
def test_a_dataset_that_is_not_a_plain_name_is_refused(data, name):
    """`../x` or an absolute path would read a pack outside MIXSHARD_DATA (here the pack
    reached that way exists: without the check it would be blended)."""
    name = name.replace("ABS", str(data))
    x = obs()
    with pytest.raises(ValueError) as err:
        random_overlay(x, dataset=name)
    assert str(err.value) == (
        "dataset must be the name of a pack folder in MIXSHARD_DATA (such as "
        f"'places365_standard' or 'coco'), without '/' or '..'; got {name!r}. To blend a "
        "pack from another place, give its folder to mixshard.Overlay"
    )
    with pytest.raises(ValueError, match="dataset must be the name of a pack folder"):
        RandomOverlay(dataset=name)(x)
    with pytest.raises(TypeError, match="dataset must be a str"):
        random_overlay(x, dataset=data / "coco")  # type: ignore[arg-type]
    assert not compat._overlays  # nothing was opened

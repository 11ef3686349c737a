"""Channels-last observations (issue 47 §1): `composite`, `Backgrounds.composite` and
`Backgrounds.images` take `layout="NHWC"` obs `(N, H, W, C*k)`, RGB or RGBA, give the caller's
layout, dtype and device back, and make no permuted copy of the obs; both take the same masks
with the same errors (§4), and bad input is one clear error (§5)."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from helpers import clip_pack
from torch.utils._python_dispatch import TorchDispatchMode

import mixshard
from mixshard import composite

# every test through a CPU's one-pass blend and through the torch ops other devices run
pytestmark = pytest.mark.usefixtures("lerp_path")

N, K, H, W = 3, 2, 5, 7


def last(t: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) -> (N, H, W, C), in memory too."""
    return t.permute(0, 2, 3, 1).contiguous()


def first(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2).contiguous()


def data(c=3, k=K, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = (torch.rand(N, H, W, c * k, generator=g) * 255).to(dtype)
    imgs = torch.randint(0, 256, (N, H, W, 3 * k), generator=g, dtype=torch.uint8)
    return obs, imgs, g


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_channels_last_gives_the_channels_first_pixels_in_its_own_layout(dtype):
    obs, imgs, g = data(dtype=dtype)
    one = imgs[..., :3].contiguous()
    masks = [
        None,
        torch.rand(N, H, W, generator=g) < 0.5,  # (N, H, W): one for every frame
        torch.rand(N, H, W, 1, generator=g) < 0.5,  # per pixel
        torch.rand(N, H, W, K, generator=g) < 0.5,  # per frame (what the builders give)
        torch.rand(N, H, W, K, generator=g),  # fractional
        torch.rand(1, H, W, 1, generator=g) < 0.5,  # one for every sample
    ]
    for mask, background, alpha in itertools.product(masks, (imgs, one), (1.0, 0.3)):
        got = composite(obs, background, mask, alpha, layout="NHWC")
        assert got.shape == obs.shape and got.dtype == dtype and got.is_contiguous()
        m = None if mask is None else mask.unsqueeze(1) if mask.dim() == 3 else first(mask)
        want = composite(first(obs), first(background), m, alpha)
        assert torch.equal(got, last(want)), (None if mask is None else mask.shape, alpha)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_rgba_keeps_its_alpha_and_blends_its_colours_as_rgb(dtype):
    obs, imgs, g = data(c=4, dtype=dtype)
    mask = torch.rand(N, H, W, K, generator=g) < 0.5
    for alpha in (1.0, 0.4, torch.rand(N, generator=g)):
        got = composite(obs, imgs, mask, alpha, layout="NHWC")
        four = got.view(N, H, W, K, 4)
        assert torch.equal(four[..., 3], obs.view(N, H, W, K, 4)[..., 3])  # alpha unchanged
        rgb = obs.view(N, H, W, K, 4)[..., :3].reshape(N, H, W, 3 * K)
        assert torch.equal(
            four[..., :3].reshape(N, H, W, 3 * K), composite(rgb, imgs, mask, alpha, layout="NHWC")
        )
    inplace = obs.clone()
    composite(inplace, imgs, mask, layout="NHWC", out=inplace)
    assert torch.equal(inplace, composite(obs, imgs, mask, layout="NHWC"))


def test_frames_of_channels_last_obs_are_told_never_guessed():
    g = torch.Generator().manual_seed(1)
    obs = torch.rand(N, H, W, 12, generator=g) * 255  # 4 RGB frames or 3 RGBA ones
    one = torch.zeros(N, H, W, 3, dtype=torch.uint8)
    with pytest.raises(ValueError) as err:
        composite(obs, one, None, layout="NHWC")
    assert str(err.value) == (
        "obs with 12 channels-last channels hold 4 RGB frames or 3 RGBA frames: say which "
        "with backgrounds per frame (N, H, W, 3k) or a mask per frame (N, H, W, k), or use "
        "Backgrounds(frames=k)"
    )
    rgb = composite(obs, torch.zeros(N, H, W, 12, dtype=torch.uint8), None, layout="NHWC")
    assert torch.equal(rgb, torch.zeros_like(obs))  # 4 RGB frames: every channel pasted
    keep = torch.zeros(N, H, W, 3, dtype=torch.bool)  # a mask of 3 frames: RGBA
    rgba = composite(obs, one, keep, layout="NHWC").view(N, H, W, 3, 4)
    assert torch.equal(rgba[..., 3], obs.view(N, H, W, 3, 4)[..., 3])
    assert not rgba[..., :3].any()
    with pytest.raises(ValueError, match=r"hold 10 channels-last channels, but no whole RGB"):
        composite(torch.zeros(N, H, W, 10), one, layout="NHWC")


def test_a_layout_is_checked_and_each_layout_refuses_the_others_obs():
    obs, imgs, _ = data()
    with pytest.raises(ValueError) as err:
        composite(obs, imgs, layout="nhwc")
    assert str(err.value) == (
        "layout must be 'NCHW' (channels-first, the default) or 'NHWC' (channels-last), got 'nhwc'"
    )
    with pytest.raises(ValueError) as err:
        composite(torch.zeros(2, 84, 84, 9), torch.zeros(2, 84, 84, 3, dtype=torch.uint8))
    assert str(err.value) == (
        "obs (2, 84, 84, 9) look channels-last (N, H, W, C*k) but layout='NCHW' (the default) "
        "takes (N, 3k, H, W): pass layout='NHWC'"
    )
    with pytest.raises(ValueError, match=r"look channels-first .* pass layout='NCHW'"):
        composite(torch.zeros(2, 9, 84, 84), torch.zeros(2, 3, 84, 84), layout="NHWC")
    with pytest.raises(ValueError, match=r"channels-first frames are RGB \(RGBA frames are"):
        composite(torch.zeros(2, 8, 5, 5), torch.zeros(2, 3, 5, 5))  # RGBA declared NCHW
    with pytest.raises(ValueError) as err:
        composite(obs, imgs.permute(0, 3, 1, 2), layout="NHWC")  # channels-first backgrounds
    assert str(err.value).startswith(
        "imgs (3, 6, 5, 7) do not fit obs (3, 5, 7, 6) (layout='NHWC'): give (3, 5, 7, 3) "
    )


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return clip_pack(tmp_path_factory.mktemp("layouts"), [3, 5, 2, 4])


def entry_points(clips):
    """`composite` and `Backgrounds.composite` over the same backgrounds: (name, call)."""
    bg = mixshard.Backgrounds(clips, N, frames=K)
    imgs = bg.images()

    def free(obs, mask, layout="NCHW"):
        backgrounds = imgs if layout == "NCHW" else imgs.permute(0, 2, 3, 1)
        return composite(obs, backgrounds, mask, layout=layout)

    return [
        ("composite", free),
        ("Backgrounds.composite", lambda o, m, layout="NCHW": bg.composite(o, m, layout=layout)),
    ]


def test_both_entry_points_take_the_same_masks_and_give_the_same_errors(clips):
    g = torch.Generator().manual_seed(2)
    obs = torch.rand(N, 3 * K, 8, 8, generator=g) * 255
    nhwc = last(obs)
    results = {}
    good = (
        torch.rand(N, 3 * K, 8, 8, generator=g) < 0.5,  # per channel: Backgrounds refused it
        torch.rand(N, K, 1, 8, 8, generator=g) < 0.5,  # 5-D: Backgrounds refused it
        torch.rand(N, 8, 8, generator=g) < 0.5,  # (N, H, W)
    )
    for _, call in entry_points(clips):
        for mask in good:
            results.setdefault(tuple(mask.shape), []).append(call(obs, mask))
        bad = {
            "a uint8 mask": torch.ones(N, 1, 8, 8, dtype=torch.uint8),
            "another size": torch.ones(N, 1, 4, 8, dtype=torch.bool),
            "channels-last with channels-first obs": torch.ones(N, 8, 8, K, dtype=torch.bool),
            "a list": [[True]],
        }
        for what, mask in bad.items():
            with pytest.raises((TypeError, ValueError)) as err:
                call(obs, mask)
            results.setdefault(what, []).append((type(err.value), str(err.value)))
        with pytest.raises(ValueError) as err:
            call(nhwc, torch.ones(N, K, 8, 8, dtype=torch.bool), layout="NHWC")
        results.setdefault("channels-first with channels-last obs", []).append(str(err.value))
    for what, (a, b) in results.items():
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, what
    assert results["a uint8 mask"][0][0] is TypeError
    assert results["channels-last with channels-first obs"][0][1] == (
        "mask (3, 8, 8, 2) is channels-last (N, H, W, k) but obs (3, 6, 8, 8) are "
        "channels-first (layout='NCHW'): pass it as (N, k, H, W) (mask.permute(0, 3, 1, 2)), or "
        "layout='NHWC' with channels-last obs"
    )
    assert results["channels-first with channels-last obs"][0] == (
        "mask (3, 2, 8, 8) is channels-first (N, k, H, W) but obs (3, 8, 8, 6) are "
        "channels-last (layout='NHWC'): pass it as (N, H, W, k) (mask.permute(0, 2, 3, 1))"
    )
    assert results["another size"][0][1].startswith(
        "mask (3, 1, 4, 8) does not broadcast to obs (3, 6, 8, 8): give (N, H, W) or"
    )


@pytest.mark.parametrize("flip", [False, True])
def test_backgrounds_take_and_give_channels_last(clips, flip):
    bg = mixshard.Backgrounds(clips, N, frames=K, flip=flip, seed=3, playback="random")
    bg.step()
    images = bg.images(layout="NHWC")
    assert images.shape == (N, 8, 8, 3 * K) and torch.equal(images, bg.images().permute(0, 2, 3, 1))
    assert images.data_ptr() != 0 and not images.is_contiguous()  # a view of the NCHW gather
    g = torch.Generator().manual_seed(4)
    for c, dtype in itertools.product((3, 4), (torch.uint8, torch.float32)):
        obs = (torch.rand(N, 8, 8, c * K, generator=g) * 255).to(dtype)
        mask = torch.rand(N, 8, 8, K, generator=g) < 0.5
        for alpha in (1.0, 0.5):
            got = bg.composite(obs, mask, alpha, layout="NHWC")
            assert got.shape == obs.shape and got.dtype == dtype
            rgb = obs.view(N, 8, 8, K, c)[..., :3].reshape(N, 8, 8, 3 * K)
            want = bg.composite(first(rgb), first(mask), alpha)
            assert torch.equal(got.view(N, 8, 8, K, c)[..., :3].reshape(N, 8, 8, 3 * K), last(want))
            assert torch.equal(got.view(N, 8, 8, K, c)[..., 3:], obs.view(N, 8, 8, K, c)[..., 3:])
    with pytest.raises(ValueError) as err:
        bg.composite(torch.zeros(N, 8, 8, 5 * K), layout="NHWC")
    assert str(err.value) == (
        "obs (3, 8, 8, 10) hold 10 channels-last channels, but Backgrounds has frames=2: 6 "
        "(RGB) or 8 (RGBA) channels; channels-last obs are (N, H, W, 3k) or (N, H, W, 4k)"
    )
    bg.close()


def test_backgrounds_resize_channels_last_obs_of_another_size(clips):
    bg = mixshard.Backgrounds(clips, N, frames=1)
    obs = torch.zeros(N, 16, 16, 3)
    with pytest.warns(UserWarning, match="pack frames are 8x8 but the obs 16x16"):
        got = bg.composite(obs, layout="NHWC")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(got, last(bg.composite(first(obs))))


class Copies(TorchDispatchMode):
    """Every obs-sized tensor an aten op makes in channels-first order ((N, C*k, H, W) or
    (N, k, C, H, W), contiguous), as it is when made."""

    def __init__(self, obs: torch.Tensor, k: int, c: int):
        super().__init__()
        n, h, w, _ = obs.shape
        self.shapes = {(n, c * k, h, w), (n, k, c, h, w)}
        self.made: list[tuple[str, torch.Tensor]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and tuple(t.shape) in self.shapes and t.is_contiguous():
                self.made.append((str(func), t.detach().clone()))  # (the mode is off in here)
        return out


def permuted_copies(seen: Copies, obs: torch.Tensor, k: int, c: int) -> list[str]:
    """The ops of `seen` that made a channels-first copy of channels-last `obs` (its values,
    in any dtype: a float copy of uint8 obs too)."""
    n, h, w, _ = obs.shape
    five = obs.view(n, h, w, k, c).permute(0, 3, 4, 1, 2).double()
    return [op for op, t in seen.made if torch.equal(t.reshape(five.shape).double(), five)]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_no_permuted_copy_of_channels_last_obs_is_made(clips, dtype):
    """Every op under a dispatch mode: none makes a channels-first copy of the obs (the
    check finds the one a permute and `.contiguous()` make)."""
    g = torch.Generator().manual_seed(5)
    k = 3
    bg = mixshard.Backgrounds(clips, N, frames=k)
    imgs = bg.images(layout="NHWC").contiguous()
    masks = (None, torch.rand(N, 8, 8, k, generator=g) < 0.5, mixshard.keys.green_screen())
    for c, mask, alpha in itertools.product((3, 4), masks, (1.0, 0.5)):
        obs = (torch.rand(N, 8, 8, c * k, generator=g) * 255).to(dtype)
        soft = mask.float() if isinstance(mask, torch.Tensor) else mask
        for call, args in (
            (composite, (obs, imgs, mask, alpha)),
            (bg.composite, (obs, mask, alpha)),
            (bg.composite, (obs, soft, alpha)),
        ):
            with Copies(obs, k, c) as seen:
                call(*args, layout="NHWC")
            assert not permuted_copies(seen, obs, k, c), (c, mask, alpha)
    with Copies(obs, k, 4) as seen:  # the check sees one
        obs.permute(0, 3, 1, 2).contiguous()
    assert permuted_copies(seen, obs, k, 4) == ["aten.clone.default"]


def test_float_obs_in_0_1_are_named_once_per_calling_line(clips, monkeypatch):
    from mixshard.augment.inputs import checks as inputs

    monkeypatch.setattr(inputs, "_CHECKED_SITES", set())  # (this test's lines: unchecked)
    obs = torch.rand(N, 6, 8, 8)
    imgs = torch.zeros(N, 6, 8, 8, dtype=torch.uint8)
    bg = mixshard.Backgrounds(clips, N, frames=2)
    for call in (
        lambda: composite(obs, imgs),
        lambda: mixshard.blend(obs, imgs),
        lambda: bg.composite(obs),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                call()  # one line: one check, one warning
        said = [w for w in caught if "lie within 0..1" in str(w.message)]
        assert len(said) == 1 and said[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        composite(obs * 255, imgs)  # 0..255 on a new line: nothing to say

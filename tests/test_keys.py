"""mixshard.keys: a keep mask made inside the composite's pass (issue 47 §4, the whole step).
Each key gives, through either path (the compiled pass; the torch ops: its `masks` builder, then
the composite), the bytes of its builder's mask composited."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from helpers import clip_pack

import mixshard
from mixshard import composite, keys, masks
from mixshard.augment.kernels import fused
from mixshard.augment.masks.greenscreen import keep_table

pytestmark = pytest.mark.usefixtures("lerp_path")

N, K, H, W = 3, 2, 6, 9


def obs_of(layout: str, c: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random colours with rows of DMC-GB's green, a colour on its hue bound and one on its
    saturation bound (where rounding decides)."""
    g = torch.Generator().manual_seed(seed)
    five = torch.rand(N, K, c, H, W, generator=g) * 255
    five[:, :, :3, 0] = torch.tensor([20.0, 200.0, 20.0]).view(3, 1)  # green
    five[:, :, :3, 1, :3] = torch.tensor([24.0, 70.0, 1.0]).view(3, 1)  # hue 99.999...: kept
    five[:, :, :3, 1, 3:6] = torch.tensor([2.0, 80.0, 0.0]).view(3, 1)  # hue 100: replaced
    five[:, :, :3, 2, :4] = torch.tensor([13.0, 70.0, 50.0]).view(3, 1)
    obs = five.reshape(N, c * K, H, W)
    obs = obs if layout == "NCHW" else obs.permute(0, 2, 3, 1).contiguous()
    return obs.round().to(dtype) if dtype == torch.uint8 else obs.to(dtype)


def rgb_nchw(obs: torch.Tensor, layout: str, c: int) -> torch.Tensor:
    """The obs's RGB as (N, 3k, H, W), for the builders (a copy: fine in a test)."""
    five = (
        obs.unflatten(1, (K, c))
        if layout == "NCHW"
        else obs.unflatten(3, (K, c)).permute(0, 3, 4, 1, 2)
    )
    return five[:, :, :3].reshape(N, 3 * K, H, W)


def as_layout(mask_nchw: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "NCHW" or mask_nchw.dim() == 3:  # (N, H, W): the same in either layout
        return mask_nchw
    return mask_nchw.permute(0, 2, 3, 1)


CASES = [("NCHW", 3), ("NHWC", 3), ("NHWC", 4)]


@pytest.mark.parametrize("layout,c", CASES)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_colour_keys_are_their_builders_masks(layout, c, dtype):
    obs = obs_of(layout, c, dtype)
    imgs = torch.randint(0, 256, (N, 3 * K, H, W), dtype=torch.uint8)
    imgs = imgs if layout == "NCHW" else imgs.permute(0, 2, 3, 1).contiguous()
    rgb = rgb_nchw(obs, layout, c)
    built = {
        keys.green_screen(): masks.green_screen(rgb),
        keys.color_key((20, 200, 20), 10): masks.color_key(rgb, (20, 200, 20), 10),
        keys.color_key((100.5, 120.25, 30), 40.5): masks.color_key(rgb, (100.5, 120.25, 30), 40.5),
        keys.color_key((0, 0, 0), 0): masks.color_key(rgb, (0, 0, 0), 0),  # no value is off
        keys.green_screen(margin=1): masks.green_screen(rgb, margin=1),
    }
    for (key, mask), alpha in itertools.product(built.items(), (1.0, 0.3, torch.rand(N))):
        want = composite(obs, imgs, as_layout(mask, layout), alpha, layout=layout)
        assert torch.equal(composite(obs, imgs, key, alpha, layout=layout), want), (key, alpha)
        assert torch.equal(key.mask(obs, layout), as_layout(mask, layout))


@pytest.mark.parametrize("layout,c", CASES)
@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64, torch.uint8])
def test_segmentation_keys_keep_listed_ids_or_show_the_background_ones(layout, c, dtype):
    g = torch.Generator().manual_seed(1)
    obs = obs_of(layout, c, torch.uint8)
    imgs = torch.zeros_like(obs[..., : 3 * K] if layout == "NHWC" else obs[:, : 3 * K])
    low = 0 if dtype == torch.uint8 else -1  # MJWarp's -1 for the background
    for shape in ((N, H, W), (N, K, H, W) if layout == "NCHW" else (N, H, W, K)):
        seg = torch.randint(low, 5, shape, generator=g).to(dtype)
        nchw = seg if seg.dim() == 3 or layout == "NCHW" else seg.permute(0, 3, 1, 2)
        for ids, background in (([1, 3], None), (None, [low, 0]), (list(range(-3, 40)), None)):
            listed = masks.from_segmentation(nchw, ids if background is None else background)
            keep = listed if background is None else ~listed
            key = keys.from_segmentation(seg, ids, background=background)
            want = composite(obs, imgs, as_layout(keep, layout), layout=layout)
            assert torch.equal(composite(obs, imgs, key, layout=layout), want), (shape, ids)


@pytest.mark.parametrize("layout,c", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_depth_keys_show_the_background_far_away_where_nothing_was_hit_or_not_finite(
    layout, c, dtype
):
    g = torch.Generator().manual_seed(2)
    obs = obs_of(layout, c, torch.float32)
    imgs = torch.zeros(
        obs.shape[:-1] + (3 * K,) if layout == "NHWC" else (N, 3 * K, H, W), dtype=torch.uint8
    )
    shape = (N, K, H, W) if layout == "NCHW" else (N, H, W, K)
    depth = (torch.rand(shape, generator=g) * 4).to(dtype)
    depth.view(-1)[:6] = torch.tensor(
        [0.0, float("inf"), float("nan"), -float("inf"), 2.0, -1.0], dtype=dtype
    )
    got = composite(obs, imgs, keys.from_depth(depth, 2.0), layout=layout)
    keep = (depth > 0) & (depth < 2.0)  # masks.from_depth's rule
    assert torch.equal(keep, masks.from_depth(depth, 2.0, layout=layout))
    assert torch.equal(got, composite(obs, imgs, keep, layout=layout))
    flat = got.reshape(-1, c)[:, :3] if layout == "NHWC" else None
    if flat is not None:  # the first six pixels: 0, inf, nan, -inf, 2.0 and -1 (no hit) and
        # show the background, the seventh (in 0..2) the obs where it is below 2
        assert not flat[:6].any()


def test_the_compiled_green_screen_is_dmcgbs_on_every_colour():
    """All 2**24 colours through the compiled pass against the table (DMC-GB's rule evaluated
    in float64): the byte arithmetic off the bounds, the rule itself on them."""
    if fused._lerp is None:
        pytest.skip("the torch path is the table itself")
    code = torch.arange(1 << 24, dtype=torch.int32)
    rgb = torch.stack([code >> 16, (code >> 8) & 255, code & 255]).to(torch.uint8)
    obs = rgb.view(1, 3, 4096, 4096)
    out = composite(obs, torch.zeros_like(obs), keys.green_screen())
    black = ~obs.bool().any(1)  # (its background is black too: kept or not, the same bytes)
    kept = (out == obs).all(1) & ~black
    table = keep_table("dmcgb", torch.device("cpu")).view(1, 4096, 4096)
    assert torch.equal(kept, table & ~black)
    # channels-last: the interleaved loops' key, AVX-512's (where the CPU has it) and AVX2's
    nhwc = obs.permute(0, 2, 3, 1).contiguous()
    before = fused._lerp.wide()
    try:
        for wide in (True, False):
            fused._lerp.wide(wide)
            out = composite(nhwc, torch.zeros_like(nhwc), keys.green_screen(), layout="NHWC")
            assert torch.equal((out == nhwc).all(3) & ~black, table & ~black), wide
    finally:
        fused._lerp.wide(before)


def test_key_arguments_are_checked_and_maps_must_fit_the_obs(tmp_path):
    with pytest.raises(ValueError, match="preset must be one of"):
        keys.green_screen("bluescreen")
    with pytest.raises(ValueError, match="rgb must be three finite numbers"):
        keys.color_key((0, float("nan"), 0))
    with pytest.raises(ValueError, match="margin must be an int >= 0"):
        keys.green_screen(margin=-1)
    with pytest.raises(TypeError, match="seg must hold integer ids, got torch.float32"):
        keys.from_segmentation(torch.zeros(2, 4, 4), [0])
    with pytest.raises(ValueError) as err:
        keys.from_segmentation(torch.zeros(2, 4, 4, dtype=torch.int16))
    assert (
        str(err.value) == "from_segmentation: pass the ids to keep or background=, one of the two"
    )
    with pytest.raises(TypeError, match="ids must be integers, got a numpy array of bool"):
        keys.from_segmentation(torch.zeros(2, 4, 4, dtype=torch.int16), np.array([True]))
    with pytest.raises(TypeError, match="depth must be a float torch.Tensor, got torch.int32"):
        keys.from_depth(torch.zeros(2, 4, 4, dtype=torch.int32), 1.0)
    with pytest.raises(ValueError, match="far must be a number"):
        keys.from_depth(torch.zeros(2, 4, 4), float("nan"))
    obs = torch.zeros(2, 8, 8, 3, dtype=torch.uint8)
    imgs = torch.zeros_like(obs)
    small = keys.from_segmentation(torch.zeros(2, 4, 4, 1, dtype=torch.int16), [0])
    with pytest.raises(
        ValueError, match=r"seg \(2, 4, 4, 1\) does not broadcast to channels-last obs"
    ):
        composite(obs, imgs, small, layout="NHWC")
    first = keys.from_depth(torch.zeros(2, 1, 8, 8), 1.0)
    with pytest.raises(
        ValueError, match=r"depth \(2, 1, 8, 8\) is channels-first .* channels-last"
    ):
        composite(obs, imgs, first, layout="NHWC")
    bg = mixshard.Backgrounds(clip_pack(tmp_path, [3]), 2, frames=1)
    with pytest.raises(ValueError, match=r"seg \(2, 4, 4, 1\) does not broadcast"):
        bg.composite(obs, small, layout="NHWC")
    assert mixshard.keys.Key is keys.Key and "keys" in mixshard.__all__

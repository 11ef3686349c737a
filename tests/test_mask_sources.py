"""Every mask source of issue 47: segmentation ids (kept or background, any integer dtype,
negative ids), depth (Isaac Lab's three ways of marking a miss), GreenAug's soft chroma key
(its matte on hand-computed values, its composite, the `mixshard.compat` drop-in), each in
both layouts, with the errors for bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mixshard import compat, masks

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

# GreenAug's key colour #439f82 is (67, 159, 130): floor(Cb), floor(Cr) = (129, 84), from
# Y = 0.299 * 67 + 0.587 * 159 + 0.114 * 130 = 128.186, Cb = (130 - Y) * 0.564 + 128 = 129.02,
# Cr = (67 - Y) * 0.713 + 128 = 84.37. Each colour below floors to (129 + dcb, 84 + dcr), its
# Cb and Cr at least 0.1 from an integer (so float32 floors them as float64 does): the
# distance is sqrt(dcb^2 + dcr^2), e.g. (0, 54, 62): Y = 38.75, Cb = 141.10, Cr = 100.36,
# (12, 16), distance 20.
KEY = (67, 159, 130)
COLOURS = [
    ((1, 93, 65), 0.0),  # (0, 0)
    ((2, 84, 65), 5.0),  # (3, 4)
    ((0, 72, 62), 10.0),  # (6, 8)
    ((0, 54, 62), 20.0),  # (12, 16)
    ((1, 45, 63), 25.0),  # (15, 20)
    ((1, 36, 63), 30.0),  # (18, 24)
    ((3, 0, 64), 50.0),  # (30, 40)
    ((0, 81, 40), 10.0),  # (-8, 6)
]
# the keep matte at tola=10, tolb=30: 0 up to 10, (d - 10) / 20 between, 1 from 30
KEEP_10_30 = [0.0, 0.0, 0.0, 0.5, 0.75, 1.0, 1.0, 0.0]


def colour_obs(layout: str = "NCHW") -> torch.Tensor:
    """COLOURS as uint8 obs, one row of 8 pixels: `(1, 3, 1, 8)` or `(1, 1, 8, 3)`."""
    rgb = torch.tensor([c for c, _ in COLOURS], dtype=torch.uint8).view(1, 1, 8, 3)
    return rgb.permute(0, 3, 1, 2).contiguous() if layout == "NCHW" else rgb


# -- segmentation -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64, torch.uint8])
def test_from_segmentation_keeps_or_replaces_ids_of_every_integer_dtype(dtype):
    signed = dtype != torch.uint8
    ids = [[-1, 0, 3, 7], [5, -1, 0, 200]] if signed else [[255, 0, 3, 7], [5, 255, 0, 200]]
    seg = torch.tensor([ids], dtype=dtype)  # (1, 2, 4): one env, 2 x 4 pixels
    bg = -1 if signed else 255
    # MuJoCo's -1 (uint8: 255) as background: everything else kept
    expected = [[[False, True, True, True], [True, False, True, True]]]
    assert masks.from_segmentation(seg, background=bg).tolist() == expected
    assert masks.from_segmentation(seg, background=[bg]).tolist() == expected
    # ManiSkill's 0 as background
    assert masks.from_segmentation(seg, background=0).tolist() == [
        [[True, False, True, True], [True, True, False, True]]
    ]
    # kept ids, negative among them; one id outside the dtype's range matches nothing
    assert masks.from_segmentation(seg, [bg, 7, 70000]).tolist() == [
        [[True, False, False, True], [False, True, False, False]]
    ]
    for n in (1, 2, 4, 9):  # few ids (compared one by one) and many (a table)
        chosen = [3, 5, 7, 200, 0, 1, 2, 4, 6][:n]
        got = masks.from_segmentation(seg, chosen)
        assert torch.equal(got, torch.isin(seg.long(), torch.tensor(chosen))), n
        inverse = masks.from_segmentation(seg, background=chosen)
        assert torch.equal(inverse, ~got), n


def test_from_segmentation_takes_ids_as_tensors_numpy_and_scalars():
    seg = torch.tensor([[[-1, 2], [3, 40000]]], dtype=torch.int32)
    expected = [[[False, True], [False, True]]]
    for ids in ([2, 40000], torch.tensor([2, 40000]), np.array([2, 40000], np.int64)):
        assert masks.from_segmentation(seg, ids).tolist() == expected, ids
    for bg in (-1, np.int16(-1), torch.tensor(-1), torch.tensor([[-1]], dtype=torch.int16)):
        assert masks.from_segmentation(seg, background=bg).tolist() == [
            [[False, True], [True, True]]
        ], bg
    # an int16 table with ids over a wide range goes through isin: the same answer
    wide = torch.tensor([[[-30000, 0, 30000, 5]]], dtype=torch.int16)
    assert masks.from_segmentation(wide, [-30000, 1, 2, 30000]).tolist() == [
        [[True, False, True, False]]
    ]


def test_from_segmentation_gives_the_maps_shape_in_either_layout():
    g = torch.Generator().manual_seed(0)
    nhwc = torch.randint(-1, 4, (3, 6, 5, 1), generator=g, dtype=torch.int16)  # ManiSkill
    got = masks.from_segmentation(nhwc, background=0, layout="NHWC")
    assert got.shape == (3, 6, 5, 1) and torch.equal(got, nhwc != 0)
    nchw = nhwc.permute(0, 3, 1, 2).contiguous()
    assert torch.equal(masks.from_segmentation(nchw, background=0), nchw != 0)
    flat = nhwc[..., 0]
    for layout in ("NCHW", "NHWC"):
        assert torch.equal(
            masks.from_segmentation(flat, [1, 2], layout=layout), (flat == 1) | (flat == 2)
        )
    # dm_control's (H, W, 2) per env (geom id, object type): the geom ids are a slice
    two = torch.stack([flat.int(), torch.full_like(flat.int(), 5)], dim=-1)
    assert torch.equal(masks.from_segmentation(two[..., 0], background=-1), flat != -1)
    many = [0, 1, 2, 3, 9, 11]  # through the table, from a slice with no flat view
    expected = torch.isin(flat, torch.tensor(many, dtype=torch.int16))
    assert torch.equal(masks.from_segmentation(two[..., 0], many), expected)
    assert torch.equal(masks.from_segmentation(nchw.permute(0, 2, 3, 1)[..., 0], many), expected)


def test_a_margin_grows_channels_last_and_flat_masks_like_channels_first():
    seg = torch.zeros(2, 7, 7, dtype=torch.int32)
    seg[0, 3, 3] = 1
    seg[1, 0, 6] = 1
    flat = masks.from_segmentation(seg, 1, margin=1)
    assert flat.shape == (2, 7, 7)
    assert flat[0].nonzero().tolist() == [[y, x] for y in (2, 3, 4) for x in (2, 3, 4)]
    assert flat[1].nonzero().tolist() == [[0, 5], [0, 6], [1, 5], [1, 6]]
    last = masks.from_segmentation(seg.unsqueeze(-1), 1, margin=1, layout="NHWC")
    assert last.shape == (2, 7, 7, 1) and torch.equal(last[..., 0], flat)
    first = masks.from_segmentation(seg.unsqueeze(1), 1, margin=1)
    assert torch.equal(first[:, 0], flat)
    with pytest.raises(ValueError, match=r"margin must be at most the frame's larger side \(7"):
        masks.from_segmentation(seg.unsqueeze(-1), 1, margin=8, layout="NHWC")


# -- depth ------------------------------------------------------------------------------------


def test_from_depth_replaces_far_missing_and_zero_depth():
    inf, nan = math.inf, math.nan
    # Isaac Lab marks a miss as inf ("none"), the far clipping distance ("max") or 0 ("zero")
    depth = torch.tensor([[[0.5, 2.0, 2.5, inf], [0.0, nan, -inf, 1.999]]])
    assert masks.from_depth(depth, 2.0).tolist() == [
        [[True, False, False, False], [False, False, False, True]]
    ]
    # math.inf: only the misses go
    assert masks.from_depth(depth, math.inf).tolist() == [
        [[True, True, True, False], [False, False, False, True]]
    ]
    nhwc = depth.unsqueeze(-1).to(torch.float16)  # Isaac Lab's (N, H, W, 1)
    got = masks.from_depth(nhwc, 2.0, layout="NHWC")
    assert got.shape == (1, 2, 4, 1) and torch.equal(got[..., 0], masks.from_depth(depth, 2.0))
    # MuJoCo's raw z-buffer (gymnasium's depth_array): 1.0 where nothing is hit
    zbuf = torch.tensor([[[0.9862, 1.0], [0.99, 0.0]]])
    assert masks.from_depth(zbuf, 1.0).tolist() == [[[True, False], [True, False]]]
    grown = masks.from_depth(
        torch.full((1, 3, 3), inf).index_put_((torch.tensor([0]),) * 3, torch.tensor(1.0)),
        2,
        margin=1,
    )
    assert grown[0, :2, :2].all() and not grown[0, 2].any()


# -- chroma key -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_chroma_key_matte_is_greenaugs_on_hand_computed_values(device):
    obs = colour_obs().to(device)
    keep = masks.chroma_key(obs, "#439f82")  # tola=10, tolb=30: GreenAug's defaults
    assert keep.dtype == torch.float32 and keep.shape == (1, 1, 1, 8)
    assert keep.flatten().cpu().tolist() == pytest.approx(KEEP_10_30, abs=1e-6)
    dist = [d for _, d in COLOURS]
    wide = masks.chroma_key(obs.float(), KEY, 0, 50)  # a float obs, the key as numbers
    assert wide.flatten().cpu().tolist() == pytest.approx([d / 50 for d in dist], abs=1e-6)
    hard = masks.chroma_key(obs, torch.tensor(KEY), 20, 20)  # tola == tolb: a hard key
    assert hard.flatten().cpu().tolist() == [float(d >= 20) for d in dist]
    last = masks.chroma_key(colour_obs("NHWC").to(device), "#439f82", layout="NHWC")
    assert last.shape == (1, 1, 8, 1) and torch.equal(last.flatten(), keep.flatten())


def test_chroma_key_takes_rgba_frame_stacks_and_per_sample_keys():
    obs = colour_obs("NHWC")
    rgba = torch.cat([obs, torch.full((1, 1, 8, 1), 7, dtype=torch.uint8)], dim=-1)
    assert torch.equal(
        masks.chroma_key(rgba, "#439f82", layout="NHWC"),
        masks.chroma_key(obs, "#439f82", layout="NHWC"),
    )
    stack = torch.cat([colour_obs(), colour_obs().flip(-1)], dim=1)  # (1, 6, 1, 8): 2 frames
    keep = masks.chroma_key(stack, "#439f82")
    assert keep.shape == (1, 2, 1, 8)
    assert keep[0, 1, 0].tolist() == pytest.approx(KEEP_10_30[::-1], abs=1e-6)
    # a key and tolerances per sample: sample 1 keyed on black, with a hard edge
    two = torch.cat([colour_obs(), torch.zeros(1, 3, 1, 8, dtype=torch.uint8)])
    keys = torch.tensor([KEY, (0, 0, 0)])
    got = masks.chroma_key(two, keys, torch.tensor([10.0, 5.0]), torch.tensor([30.0, 5.0]))
    assert got[0].flatten().tolist() == pytest.approx(KEEP_10_30, abs=1e-6)
    assert not got[1].any()
    assert masks.chroma_key(two, keys, margin=1)[0, 0, 0].tolist() == pytest.approx(
        [0, 0, 0.5, 0.75, 1, 1, 1, 1], abs=1e-6
    )


def test_chroma_composite_removes_the_spill_as_greenaug_does():
    obs = colour_obs()
    bg = torch.tensor([200, 100, 50], dtype=torch.uint8).view(1, 3, 1, 1).expand(1, 3, 1, 8)
    out = masks.chroma_composite(obs, bg, "#439f82")
    assert out.dtype == torch.uint8 and out.shape == obs.shape
    # (0, 54, 62), a = 0.5: (0, 54, 62) - 0.5 * (67, 159, 130) + 0.5 * (200, 100, 50) =
    # (66.5, 24.5, 22), rounded half up
    assert out[0, :, 0, 3].tolist() == [67, 25, 22]
    # (1, 93, 65), a = 1: (1 - 67 + 200, 93 - 159 + 100, 65 - 130 + 50) = (134, 34, -15 -> 0)
    assert out[0, :, 0, 0].tolist() == [134, 34, 0]
    assert out[0, :, 0, 5].tolist() == [1, 36, 63]  # a = 0: the observation exactly
    floats = masks.chroma_composite(obs.float(), bg.float(), "#439f82")
    assert floats[0, :, 0, 3].tolist() == pytest.approx([66.5, 24.5, 22.0], abs=1e-4)
    rgba = torch.cat([colour_obs("NHWC"), torch.full((1, 1, 8, 1), 9, dtype=torch.uint8)], -1)
    last = masks.chroma_composite(rgba, bg.permute(0, 2, 3, 1), "#439f82", layout="NHWC")
    assert torch.equal(last[..., :3], out.permute(0, 2, 3, 1)) and (last[..., 3] == 9).all()


def test_compat_chroma_key_is_greenaugs_drop_in():
    image = colour_obs().float() / 255
    background = torch.tensor([200, 100, 50], dtype=torch.float32).view(1, 3, 1, 1) / 255
    background = background.expand(1, 3, 1, 8).contiguous()
    out, mask = compat.chroma_key(image, ["#439f82"], 10, 30, background)
    assert mask.shape == (1, 1, 8) and mask.dtype == torch.float32
    assert mask.flatten().tolist() == pytest.approx([1 - k for k in KEEP_10_30], abs=1e-6)
    assert out[0, :, 0, 3].tolist() == pytest.approx([66.5 / 255, 24.5 / 255, 22 / 255], abs=1e-6)
    assert out[0, :, 0, 0].tolist() == pytest.approx([134 / 255, 34 / 255, 0.0], abs=1e-6)
    # without a background the key colour is taken out: (1, 93, 65) - (67, 159, 130) < 0
    alone, _ = compat.chroma_key(image, "#439f82")
    assert alone[0, :, 0, 0].tolist() == [0.0, 0.0, 0.0]
    assert alone[0, :, 0, 6].tolist() == pytest.approx([3 / 255, 0, 64 / 255], abs=1e-6)


# -- bad input --------------------------------------------------------------------------------


def test_layouts_are_named_never_guessed():
    obs = torch.zeros(2, 84, 84, 3, dtype=torch.uint8)
    for layout in ("nhwc", "NHW", None):
        with pytest.raises(
            ValueError, match=f"layout must be 'NCHW' .* or 'NHWC' .*got {layout!r}"
        ):
            masks.green_screen(obs, layout=layout)  # type: ignore[arg-type]
    assert masks.green_screen(obs, layout="NHWC").shape == (2, 84, 84, 1)
    with pytest.raises(
        ValueError, match=r"obs \(2, 3, 84, 84\) look channels-first .* pass layout='NCHW'"
    ):
        masks.blue_dominant(torch.zeros(2, 3, 84, 84), layout="NHWC")
    with pytest.raises(ValueError, match=r"obs must be \(N, H, W, 3k\) or RGBA \(N, H, W, 4\)"):
        masks.color_key(torch.zeros(2, 84, 84, 5), (0, 0, 0), layout="NHWC")
    seg = torch.zeros(2, 64, 64, 1, dtype=torch.int16)  # ManiSkill's, layout forgotten
    with pytest.raises(
        ValueError, match=r"seg \(2, 64, 64, 1\) looks channels-last .* pass layout='NHWC'"
    ):
        masks.from_segmentation(seg, background=0)
    with pytest.raises(
        ValueError, match=r"depth \(2, 1, 64, 64\) looks channels-first .* pass layout='NCHW'"
    ):
        masks.from_depth(torch.zeros(2, 1, 64, 64), 1.0, layout="NHWC")


def test_a_map_that_does_not_fit_its_obs_is_refused_by_shape():
    obs = torch.zeros(2, 84, 84, 3, dtype=torch.uint8)
    seg = torch.zeros(2, 84, 84, 1, dtype=torch.int32)
    assert masks.from_segmentation(seg, background=0, layout="NHWC", obs=obs).shape == (
        2,
        84,
        84,
        1,
    )
    with pytest.raises(ValueError) as err:
        masks.from_segmentation(
            torch.zeros(2, 64, 64, 1, dtype=torch.int32), background=0, layout="NHWC", obs=obs
        )
    assert str(err.value) == (
        "seg (2, 64, 64, 1) does not fit obs (2, 84, 84, 3) (layout='NHWC'): expected "
        "(2, 84, 84) or (2, 84, 84, 1), the images' size"
    )
    # a channels-last map with channels-first observations
    with pytest.raises(ValueError, match=r"depth \(2, 84, 84, 1\) looks channels-last"):
        masks.from_depth(torch.zeros(2, 84, 84, 1), 1.0, obs=torch.zeros(2, 9, 84, 84))
    with pytest.raises(ValueError, match=r"expected \(2, 84, 84\) or \(2, 1 or 3, 84, 84\)"):
        masks.from_depth(torch.zeros(2, 2, 84, 84), 1.0, obs=torch.zeros(2, 9, 84, 84))


def test_bad_ids_depth_and_tolerances_are_refused_with_one_clear_error():
    seg = torch.zeros(1, 4, 4, dtype=torch.int16)
    with pytest.raises(
        TypeError, match="takes exactly one of ids .* and background .*, got neither"
    ):
        masks.from_segmentation(seg)
    with pytest.raises(TypeError, match="takes exactly one of ids .* and background .*, got both"):
        masks.from_segmentation(seg, [1], background=0)
    with pytest.raises(TypeError, match="background must be integers, got a torch.float32 tensor"):
        masks.from_segmentation(seg, background=torch.tensor([0.0]))
    with pytest.raises(TypeError, match="ids must be an int, a sequence of ints or a tensor"):
        masks.from_segmentation(seg, [0.5])
    with pytest.raises(TypeError, match="depth must be a float tensor in metres, got torch.int16"):
        masks.from_depth(seg, 1000)  # ManiSkill's millimetres
    for far in (0, -1.0, math.nan, "2", True):
        with pytest.raises(ValueError, match=r"far must be a number > 0 \(math.inf allowed\)"):
            masks.from_depth(torch.ones(1, 2, 2), far)  # type: ignore[arg-type]
    obs = colour_obs()
    for tola, tolb in ((math.nan, 30), (10, math.inf), (-1, 30)):
        with pytest.raises(ValueError, match="must be a finite number >= 0, got"):
            masks.chroma_key(obs, "#439f82", tola, tolb)
    with pytest.raises(ValueError, match="tola must be at most tolb, got tola=30, tolb=10"):
        masks.chroma_key(obs, "#439f82", 30, 10)
    with pytest.raises(ValueError, match=r"tola must hold finite numbers >= 0, got \[nan\]"):
        masks.chroma_key(obs, "#439f82", torch.tensor([math.nan]), 30)
    with pytest.raises(ValueError, match=r"key must be '#rrggbb' \(or '#rgb'\), got 'green'"):
        masks.chroma_key(obs, "green")
    with pytest.raises(
        ValueError, match=r"key must be '#rrggbb', three numbers \(R, G, B\) on 0..255"
    ):
        masks.chroma_key(obs, (0, 300, 0))
    with pytest.raises(ValueError, match=r"imgs must be \(1, 3, 1, 8\) for these obs"):
        masks.chroma_composite(obs, torch.zeros(1, 3, 2, 8), "#439f82")
    with pytest.raises(
        TypeError, match=r"image must be a float tensor \(B, 3, H, W\) in \[0, 1\], got torch.uint8"
    ):
        compat.chroma_key(obs, ["#439f82"])
    with pytest.raises(
        ValueError, match="keycolor must hold RGB colour strings like '#439f82', got 'nope'"
    ):
        compat.chroma_key(obs.float(), ["nope"])
    with pytest.raises(ValueError, match="keycolor must be one colour string or a list of 1 or 1"):
        compat.chroma_key(obs.float(), ["#439f82"] * 2)


def test_color_key_on_uint8_compares_in_integers_as_the_float_rule_does():
    # uint8 obs now compare against integer bounds (ceil(c - tol), floor(c + tol)): the same
    # mask as |x - c| <= tol in float64, for fractional keys, tolerances and keys off 0..255
    g = torch.Generator().manual_seed(5)
    obs = torch.randint(0, 256, (8, 6, 12, 12), generator=g, dtype=torch.uint8)
    cases = [((10, 200, 30), 0), ((0.5, 255, 3.2), 7.7), ((-20, 300, 5), 30), ((300, 0, 0), 10)]
    for rgb, tol in cases + [((128, 128, 128), 127.5), ((12, 7, 99), 0.49)]:
        x = obs.double().view(8, 2, 3, 12, 12)
        key = torch.tensor(rgb, dtype=torch.float64).view(1, 1, 3, 1, 1)
        expected = ((x - key).abs() > tol).any(2)
        assert torch.equal(masks.color_key(obs, rgb, tol), expected), (rgb, tol)
        last = obs.view(8, 2, 3, 12, 12).permute(0, 3, 4, 1, 2).reshape(8, 12, 12, 6)
        got = masks.color_key(last, rgb, tol, layout="NHWC")
        assert torch.equal(got, expected.permute(0, 2, 3, 1)), (rgb, tol)
    assert masks.color_key(obs, (300, 0, 0), 10).all()  # red beyond 255: nothing keyed
    assert not masks.color_key(obs, (128, 128, 128), 128).any()  # every colour keyed


def test_every_obs_builder_gives_in_nhwc_what_it_gives_in_nchw():
    g = torch.Generator().manual_seed(6)
    first = torch.randint(0, 256, (3, 6, 9, 11), generator=g, dtype=torch.uint8)  # 2 frames
    first[:, 1::3] = torch.randint(150, 256, (3, 2, 9, 11), generator=g, dtype=torch.uint8)
    last = first.view(3, 2, 3, 9, 11).permute(0, 3, 4, 1, 2).reshape(3, 9, 11, 6)
    builders = [
        lambda x, **kw: masks.green_screen(x, **kw),
        lambda x, **kw: masks.color_key(x, (40, 200, 40), 60, **kw),
        lambda x, **kw: masks.blue_dominant(x, **kw),
        lambda x, **kw: masks.chroma_key(x, "#28c828", 20, 60, **kw),
    ]
    for build in builders:
        for margin in (0, 1):
            nchw = build(first, margin=margin)
            nhwc = build(last, margin=margin, layout="NHWC")
            assert nchw.shape == (3, 2, 9, 11) and nhwc.shape == (3, 9, 11, 2)
            assert torch.equal(nhwc, nchw.permute(0, 2, 3, 1)), (build, margin)
        # RGBA: keyed on its RGB, one frame
        rgba = torch.cat([last[..., :3], torch.full((3, 9, 11, 1), 255, dtype=torch.uint8)], -1)
        assert torch.equal(build(rgba, layout="NHWC")[..., 0], build(first[:, :3])[:, 0])


def test_chroma_key_reads_uint8_as_its_float_values():
    # uint8 planes go into the float32 arithmetic without converted copies: the same matte
    g = torch.Generator().manual_seed(7)
    obs = torch.randint(0, 256, (4, 6, 16, 16), generator=g, dtype=torch.uint8)
    obs[:2, 1::3] = torch.randint(120, 200, (2, 2, 16, 16), generator=g, dtype=torch.uint8)
    for tola, tolb in ((10, 30), (0, 60), (25.5, 25.5)):
        keep = masks.chroma_key(obs, "#439f82", tola, tolb)
        assert torch.equal(keep, masks.chroma_key(obs.float(), "#439f82", tola, tolb))
        assert torch.equal(keep, masks.chroma_key(obs.double(), "#439f82", tola, tolb))
    assert (keep == 0).any() and (keep == 1).any()

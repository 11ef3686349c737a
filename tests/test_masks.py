"""mixshard.masks: keep masks in composite's convention, each pinned pixel for pixel against the
rule it reproduces (DMC-GB's green screen against a per-pixel Python reference, edge values
included), their shapes, margins, and the errors for bad input."""

from __future__ import annotations

import colorsys
import subprocess
import sys

import numpy as np
import pytest
import torch

import mixshard
from mixshard import composite, masks

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def dmcgb_replaces(r: int, g: int, b: int) -> bool:
    """DMC-GB's `do_green_screen` test for one uint8 pixel, from its definition: HSV of
    (r/255, g/255, b/255) in Python floats (V the largest channel; grey: hue and saturation 0;
    S = (V - min) / V; the hue's sextant from the first largest channel, R before G before
    B, divided by 6 and taken modulo 1), scaled to degrees and to 0..255, then kept in the box
    h 100..185, s 80..255, v 70..255, bounds included."""
    x, y, z = r / 255.0, g / 255.0, b / 255.0
    top, low = max(x, y, z), min(x, y, z)
    if top == low:
        hue = sat = 0.0
    else:
        span = top - low
        sat = span / top
        dx, dy, dz = (top - x) / span, (top - y) / span, (top - z) / span
        if x == top:
            sextant = dz - dy
        elif y == top:
            sextant = 2.0 + dx - dz
        else:
            sextant = 4.0 + dy - dx
        hue = (sextant / 6.0) % 1.0
    h, s, v = hue * 360, sat * 255, top * 255
    return 100 <= h <= 185 and 80 <= s <= 255 and 70 <= v <= 255


def as_obs(colours: list[tuple[int, int, int]], width: int = 16) -> torch.Tensor:
    """The colours as one-frame uint8 obs `(N, 3, 1, width)`, padded with black."""
    colours = colours + [(0, 0, 0)] * (-len(colours) % width)
    t = torch.tensor(colours, dtype=torch.uint8).view(-1, 1, width, 3)
    return t.permute(0, 3, 1, 2).contiguous()


def reference_keep(obs: torch.Tensor) -> torch.Tensor:
    """The keep mask `(N, 1, H, W)` of one-frame obs, by the per-pixel loop above."""
    pixels = obs.permute(0, 2, 3, 1).tolist()  # (N, H, W, 3) as lists: fast to walk
    keep = [[[not dmcgb_replaces(*rgb) for rgb in row] for row in img] for img in pixels]
    return torch.tensor(keep, dtype=torch.bool).unsqueeze(1)


def tie_colours() -> list[tuple[int, int, int]]:
    """Every colour whose exact hue is 100 or 185 degrees or whose exact saturation is 80/255,
    where the float rounding decides (derived in integers: hue 100 with G largest is
    g = 3r - 2b, b <= r; hue 185 with B largest is (r, r + 11t, r + 12t); s = 80 is
    max - min = 16 max / 51), and the value bounds 69, 70, 71."""
    out = []
    for b in range(256):
        for r in range(b, 256):
            g = 3 * r - 2 * b
            if r < g <= 255:
                out.append((r, g, b))
    for r in range(256):
        out += [(r, r + 11 * t, r + 12 * t) for t in range(1, (255 - r) // 12 + 1)]
    for top in (51, 102, 153, 204, 255):
        low = top - 16 * top // 51
        for mid in range(low, top + 1, 3):
            out += [(top, mid, low), (low, top, mid), (mid, low, top), (low, mid, top)]
    for v in (69, 70, 71):
        out += [(0, v, 0), (10, v, 40), (v // 3, v, v), (0, v // 2, v)]
    return out


def test_the_reference_is_pythons_hsv():
    """The loop's HSV is colorsys's (which DMC-GB's rgb_to_hsv reproduces)."""
    g = torch.Generator().manual_seed(3)
    for r, gg, b in torch.randint(0, 256, (500, 3), generator=g).tolist():
        h, s, v = colorsys.rgb_to_hsv(r / 255.0, gg / 255.0, b / 255.0)
        box = 100 <= h * 360 <= 185 and 80 <= s * 255 <= 255 and 70 <= v * 255 <= 255
        assert dmcgb_replaces(r, gg, b) == box


@pytest.mark.parametrize("device", DEVICES)
def test_green_screen_is_dmcgbs_rule_on_random_pixels(device):
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (6, 3, 20, 30), generator=g, dtype=torch.uint8)
    # and pixels near DMC-GB's rendered green (0.2, 0.8, 0.2), where the key matters
    obs[:3, 0] = torch.randint(20, 90, (3, 20, 30), generator=g, dtype=torch.uint8)
    obs[:3, 1] = torch.randint(150, 256, (3, 20, 30), generator=g, dtype=torch.uint8)
    keep = masks.green_screen(obs.to(device))
    assert keep.dtype == torch.bool and keep.shape == (6, 1, 20, 30)
    assert keep.device.type == device
    expected = reference_keep(obs)
    assert torch.equal(keep.cpu(), expected)
    assert 0.2 < (~expected[:3]).float().mean() < 1.0  # the green half: mostly replaced


def test_green_screen_matches_on_the_edge_values():
    edges = tie_colours() + [(51, 204, 51), (0, 255, 0), (255, 0, 255), (0, 70, 0), (0, 69, 0)]
    obs = as_obs(edges, width=64)
    keep, expected = masks.green_screen(obs), reference_keep(obs)
    assert torch.equal(keep, expected)
    # the float rounding decides both ways on the bounds: no integer rewrite would pass
    assert not dmcgb_replaces(24, 70, 1) and dmcgb_replaces(2, 80, 0)  # both hue 100 exactly
    assert not dmcgb_replaces(10, 65, 70) and dmcgb_replaces(0, 66, 72)  # both hue 185
    greys = as_obs([(v, v, v) for v in range(256)])  # black and white among them
    assert masks.green_screen(greys).all() and reference_keep(greys).all()


def test_green_screen_on_float_obs_and_frame_stacks():
    g = torch.Generator().manual_seed(1)
    obs = torch.randint(0, 256, (3, 9, 7, 8), generator=g, dtype=torch.uint8)
    keep = masks.green_screen(obs)
    assert keep.shape == (3, 3, 7, 8)
    for f in range(3):  # each frame on its own
        assert torch.equal(keep[:, f : f + 1], reference_keep(obs[:, 3 * f : 3 * f + 3]))
    assert torch.equal(masks.green_screen(obs.float()), keep)
    jitter = torch.rand(obs.shape, generator=g) * 0.8 - 0.4  # rounds back to the same colour
    assert torch.equal(masks.green_screen(obs.float() + jitter), keep)
    assert torch.equal(masks.green_screen(obs.half()), keep)


def test_green_screen_goes_straight_into_composite_as_dmcgb_replaces():
    g = torch.Generator().manual_seed(2)
    obs = torch.randint(0, 256, (2, 9, 6, 7), generator=g, dtype=torch.uint8)
    obs[:, 1::3] = 204  # much of it green
    bg = torch.randint(0, 256, (2, 3, 6, 7), generator=g, dtype=torch.uint8)
    out = composite(obs, bg, masks.green_screen(obs))
    for f in range(3):
        frame = obs[:, 3 * f : 3 * f + 3]
        replaced = ~reference_keep(frame)
        assert torch.equal(out[:, 3 * f : 3 * f + 3], torch.where(replaced, bg, frame))
    assert not torch.equal(out, obs)


def test_color_key_blue_dominant_and_segmentation_exact():
    obs = as_obs([(10, 200, 30), (20, 190, 40), (21, 190, 40), (0, 0, 0), (10, 200, 30)], 5)
    assert masks.color_key(obs, (10, 200, 30)).flatten().tolist() == [0, 1, 1, 1, 0]
    # within 10 on every channel: (20, 190, 40) is exactly 10 off, (21, ...) 11
    assert masks.color_key(obs, (10, 200, 30), 10).flatten().tolist() == [0, 0, 1, 1, 0]
    assert masks.color_key(obs.float(), [10, 200, 30], 11.0).flatten().tolist() == [0, 0, 0, 1, 0]
    blues = as_obs([(1, 2, 3), (3, 2, 3), (2, 3, 3), (0, 0, 1), (9, 9, 0), (5, 4, 4)], 6)
    assert masks.blue_dominant(blues).flatten().tolist() == [0, 1, 1, 0, 1, 1]
    seg = torch.tensor([[[[0, 1, 2], [3, 4, 1]]]], dtype=torch.int16)  # (1, 1, 2, 3)
    assert masks.from_segmentation(seg, [1, 4]).flatten().tolist() == [0, 1, 0, 0, 1, 1]
    assert masks.from_segmentation(seg[:, 0], 3).shape == (1, 2, 3)  # the map's own shape
    assert masks.from_segmentation(seg, torch.tensor([0])).flatten().tolist() == [1, 0, 0, 0, 0, 0]
    assert not masks.from_segmentation(seg, []).any()
    stacked = torch.randint(0, 5, (2, 3, 4, 4))
    assert torch.equal(masks.from_segmentation(stacked, (2,)), stacked == 2)


def test_every_builder_returns_per_frame_masks_composite_takes():
    g = torch.Generator().manual_seed(4)
    obs = torch.randint(0, 256, (2, 9, 5, 5), generator=g, dtype=torch.uint8)
    bg = torch.zeros(2, 3, 5, 5, dtype=torch.uint8)
    built = [
        masks.green_screen(obs),
        masks.color_key(obs, (0, 0, 0), 128),
        masks.blue_dominant(obs),
        masks.from_segmentation(obs[:, ::3] // 128, [1]),
    ]
    for keep in built:
        assert keep.shape == (2, 3, 5, 5) and keep.dtype == torch.bool
        out = composite(obs, bg, keep)
        frames = keep.unsqueeze(2).expand(2, 3, 3, 5, 5).reshape(2, 9, 5, 5)
        assert torch.equal(out, torch.where(frames, obs, bg.repeat(1, 3, 1, 1)))


def test_margin_grows_the_kept_region_by_k_pixels():
    seg = torch.zeros(1, 2, 7, 7, dtype=torch.int32)
    seg[0, 0, 3, 3] = 1
    seg[0, 1, 0, 6] = 1  # in a corner: the square is cut by the border
    assert torch.equal(masks.from_segmentation(seg, [1], margin=0), seg == 1)
    grown = masks.from_segmentation(seg, [1], margin=1)
    assert grown[0, 0].nonzero().tolist() == [[y, x] for y in (2, 3, 4) for x in (2, 3, 4)]
    assert grown[0, 1].nonzero().tolist() == [[0, 5], [0, 6], [1, 5], [1, 6]]
    assert int(masks.from_segmentation(seg, [1], margin=2)[0, 0].sum()) == 25
    obs = as_obs([(0, 200, 0)] * 4 + [(200, 0, 0)] + [(0, 200, 0)] * 4, 9)
    assert masks.green_screen(obs, margin=2).flatten().tolist() == [0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert masks.blue_dominant(torch.zeros(1, 3, 2, 2), margin=1).all()


def test_bad_inputs_are_refused_with_one_clear_error():
    obs = torch.zeros(2, 9, 4, 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"preset must be one of \['dmcgb'\], got 'dmc'"):
        masks.green_screen(obs, "dmc")
    with pytest.raises(ValueError, match="obs must be uint8 or float 0..255, got torch.int32"):
        masks.blue_dominant(obs.int())
    with pytest.raises(ValueError, match="look channels-last"):
        masks.green_screen(torch.zeros(2, 84, 84, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="obs must be \\(N, 3k, H, W\\)"):
        masks.green_screen(torch.zeros(9, 4, 4, dtype=torch.uint8))
    with pytest.raises(TypeError, match="obs must be a torch.Tensor"):
        masks.blue_dominant([[0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"rgb must be three finite numbers \(R, G, B\)"):
        masks.color_key(obs, (1, 2))
    with pytest.raises(ValueError, match="tol must be a finite number >= 0, got -1"):
        masks.color_key(obs, (1, 2, 3), -1)
    with pytest.raises(TypeError, match="seg must hold integer ids, got torch.float32"):
        masks.from_segmentation(torch.zeros(2, 4, 4), [1])
    with pytest.raises(ValueError, match=r"seg must be \(N, H, W\), \(N, k, H, W\) with layout="):
        masks.from_segmentation(torch.zeros(4, 4, dtype=torch.long), [1])
    with pytest.raises(TypeError, match="ids must be an int, a sequence of ints or a tensor"):
        masks.from_segmentation(torch.zeros(1, 4, 4, dtype=torch.long), [1.5])
    for margin in (-1, 1.5, True):
        with pytest.raises(ValueError, match="margin must be an int >= 0"):
            masks.blue_dominant(obs, margin=margin)  # type: ignore[arg-type]


def test_composite_refuses_masks_of_the_wrong_dtype_or_shape():
    obs = torch.zeros(2, 9, 4, 4)
    bg = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    with pytest.raises(TypeError) as err:
        composite(obs, bg, torch.ones(2, 3, 4, 4, dtype=torch.uint8))
    assert str(err.value) == (
        "mask must be a bool or float tensor (true or 1 keeps the observation), got torch.uint8; "
        "for a 0/255 mask pass mask.bool(), or mask / 255 for partial weights"
    )
    with pytest.raises(ValueError, match=r"mask \(2, 2, 4, 4\) does not broadcast"):
        composite(obs, bg, torch.ones(2, 2, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask \(2, 3, 4, 5\) does not broadcast"):
        composite(obs, bg, torch.ones(2, 3, 4, 5, dtype=torch.bool))


def test_masks_is_public():
    import mixshard.augment.masks.builders as module

    assert "masks" in mixshard.__all__
    assert {"green_screen", "color_key", "blue_dominant", "from_segmentation"} <= set(
        module.__all__
    )
    # mixshard.masks re-exports every public builder, the same functions
    assert mixshard.masks.__all__ == module.__all__
    assert all(getattr(mixshard.masks, n) is getattr(module, n) for n in module.__all__)


def test_mixshard_masks_imports_as_a_module_and_mixshard_still_loads_no_torch():
    # `import mixshard.masks` and `from mixshard.masks import ...` were ModuleNotFoundError:
    # `masks` was only an attribute of the package
    code = (
        "import sys, mixshard; print('torch' in sys.modules)\n"
        "import mixshard.masks\n"
        "from mixshard.masks import green_screen, from_segmentation\n"
        "import torch\n"
        "obs = torch.zeros(1, 3, 2, 2, dtype=torch.uint8); obs[:, 1] = 200\n"
        "print(mixshard.masks.green_screen is green_screen, green_screen(obs).any().item())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "False"]


def test_color_key_refuses_a_tolerance_or_colour_that_is_not_finite():
    # a NaN compares false: color_key(tol=nan) keyed out every pixel
    obs = torch.zeros(1, 3, 2, 2, dtype=torch.uint8)
    for tol in (float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match=f"tol must be a finite number >= 0, got {tol!r}"):
            masks.color_key(obs, (0, 0, 0), tol)  # type: ignore[arg-type]
    for rgb in ((float("nan"), 0, 0), (0, float("-inf"), 0), (0, 0, True)):
        with pytest.raises(ValueError, match=r"rgb must be three finite numbers \(R, G, B\)"):
            masks.color_key(obs, rgb)
    # numpy's numbers are numbers: the same mask as Python's
    got = masks.color_key(obs, (np.float32(0), np.int64(0), 0.0), np.float64(0.5))
    assert torch.equal(got, masks.color_key(obs, (0, 0, 0), 0.5)) and not got.any()


def test_a_margin_larger_than_the_frame_is_refused_by_name():
    # margin=2**31 was a RuntimeError from max_pool2d; up to the frame's side it works
    seg = torch.zeros(1, 1, 3, 5, dtype=torch.int32)
    seg[0, 0, 0, 0] = 1
    assert masks.from_segmentation(seg, 1, margin=5).all()  # the whole frame
    grown = masks.from_segmentation(seg, 1, margin=1)  # a numpy margin as its int
    assert torch.equal(masks.from_segmentation(seg, 1, margin=np.int64(1)), grown)
    for margin in (6, 2**31, 2**70):
        with pytest.raises(ValueError) as err:
            masks.from_segmentation(seg, 1, margin=margin)
        assert str(err.value) == (
            f"margin must be at most the frame's larger side (5 pixels), got {margin}"
        )
    with pytest.raises(ValueError, match="margin must be at most the frame's larger side"):
        masks.green_screen(torch.zeros(1, 3, 4, 4, dtype=torch.uint8), margin=2**31)


def test_from_segmentation_takes_numpy_ids_and_refuses_bools_and_floats():
    # ids=np.int64(1) was a raw TypeError ("'numpy.int64' object is not iterable")
    seg = torch.tensor([[[0, 1], [2, 3]]], dtype=torch.int16)
    ones = seg == 1
    for ids in (np.int64(1), np.uint8(1), [np.int32(1)], np.array([1, 7], np.uint16), np.array(1)):
        assert torch.equal(masks.from_segmentation(seg, ids), ones), ids
    assert torch.equal(masks.from_segmentation(seg, np.array([[3], [1]])), ones | (seg == 3))
    for ids in (True, np.bool_(True), [1, False], 1.0, [np.float64(1)], "1"):
        with pytest.raises(TypeError, match="ids must be an int, a sequence of ints or a tensor"):
            masks.from_segmentation(seg, ids)  # type: ignore[arg-type]
    for ids, dtype in ((np.array([True]), "bool"), (np.array([1.0]), "float64")):
        with pytest.raises(TypeError, match=f"ids must be integers, got a numpy array of {dtype}"):
            masks.from_segmentation(seg, ids)
    with pytest.raises(ValueError, match="ids must fit in int64"):
        masks.from_segmentation(seg, np.array([2**64 - 1], np.uint64))
    with pytest.raises(ValueError, match="ids must fit in int64"):
        masks.from_segmentation(seg, [2**63])

"""Per-call weights (issue 40, point 6): an alpha tensor or a mask given to `blend`,
`composite` or an `Overlay` call is refused when its dtype is an integer one, and, on the CPU
(where looking costs no host sync), when a value lies outside [0, 1] or is NaN."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import small_pack

from mixshard import Overlay, blend, composite

N, K, H, W = 4, 2, 8, 8
NAN = float("nan")


def data():
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(N, 3 * K, H, W, generator=g) * 255
    imgs = torch.randint(0, 256, (N, 3, H, W), generator=g, dtype=torch.uint8)
    return obs, imgs


FLOAT_ALPHA = "alpha must be a float tensor of weights in [0, 1], got "
BAD_ALPHA = [
    (torch.full((N,), 2.0), ValueError, "alpha must be in [0, 1], got a tensor from 2 to 2"),
    (
        torch.tensor([0.5, -1.0, 0.5, 1.0]),
        ValueError,
        "alpha must be in [0, 1], got a tensor from -1 to 1",
    ),
    (
        torch.tensor([0.5, NAN, 0.5, NAN]),
        ValueError,
        "alpha must be in [0, 1], got NaN (2 of 4 values)",
    ),
    (torch.tensor(NAN), ValueError, "alpha must be in [0, 1], got NaN (1 of 1 values)"),
    (torch.ones(N, dtype=torch.int64), TypeError, FLOAT_ALPHA + "torch.int64"),
    (torch.ones(N, dtype=torch.bool), TypeError, FLOAT_ALPHA + "torch.bool"),
]


@pytest.mark.parametrize(("alpha", "error", "message"), BAD_ALPHA)
@pytest.mark.parametrize("op", ["blend", "composite", "composite-masked"])
def test_a_bad_alpha_tensor_is_refused(op, alpha, error, message):
    obs, imgs = data()
    before = obs.clone()
    with pytest.raises(error) as err:
        if op == "blend":
            blend(obs, imgs, alpha, out=obs)
        elif op == "composite":
            composite(obs, imgs, None, alpha, out=obs)
        else:
            composite(obs, imgs, torch.zeros(N, 1, H, W, dtype=torch.bool), alpha, out=obs)
    assert str(err.value) == message
    assert torch.equal(obs, before)  # nothing written


BOOL_MASK = "mask must be a bool or float tensor (true or 1 keeps the observation), got "
MASK_FIX = "; for a 0/255 mask pass mask.bool(), or mask / 255 for partial weights"
PIXELS = N * H * W
BAD_MASK = [
    (
        torch.full((N, 1, H, W), 255, dtype=torch.uint8),
        TypeError,
        BOOL_MASK + "torch.uint8" + MASK_FIX,
    ),
    (torch.ones(N, 1, H, W, dtype=torch.int64), TypeError, BOOL_MASK + "torch.int64" + MASK_FIX),
    (
        torch.full((N, 1, H, W), -1.0),
        ValueError,
        "mask must be in [0, 1], got a tensor from -1 to -1",
    ),
    (
        torch.full((N, 1, H, W), 255.0),
        ValueError,
        "mask must be in [0, 1], got a tensor from 255 to 255",
    ),
    (
        torch.full((N, 1, H, W), NAN),
        ValueError,
        f"mask must be in [0, 1], got NaN ({PIXELS} of {PIXELS} values)",
    ),
]


@pytest.mark.parametrize(("mask", "error", "message"), BAD_MASK)
def test_a_bad_mask_is_refused(mask, error, message):
    obs, imgs = data()
    with pytest.raises(error) as err:
        composite(obs, imgs, mask)
    assert str(err.value) == message


def test_good_weights_still_blend_exactly():
    obs, imgs = data()
    alpha = torch.tensor([0.0, 0.25, 1.0, 0.5])
    mask = torch.rand(N, 1, H, W) > 0.5
    background = imgs.float().unsqueeze(1)
    want = torch.lerp(obs.view(N, K, 3, H, W), background, alpha.view(-1, 1, 1, 1, 1))
    assert torch.equal(blend(obs, imgs, alpha), want.view(obs.shape))
    got = composite(obs, imgs, mask, alpha).view(N, K, 3, H, W)
    keep = mask.view(N, 1, 1, H, W).expand(N, K, 3, H, W)
    assert torch.equal(got[keep], obs.view(N, K, 3, H, W)[keep])
    assert torch.equal(got[~keep], want[~keep])
    assert torch.equal(composite(obs, imgs, mask.float()), composite(obs, imgs, mask))


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    return small_pack(tmp_path_factory.mktemp("callvalues"), 4, shard_size=8, block_size=4)


@pytest.mark.parametrize(("alpha", "error", "message"), BAD_ALPHA)
def test_an_overlay_call_refuses_a_bad_alpha_tensor(pack_dir, alpha, error, message):
    ov = Overlay(pack_dir, cache="device", seed=1)
    obs, _ = data()
    with pytest.raises(error) as err:
        ov(obs, alpha=alpha)
    assert str(err.value) == message
    ov.close()


@pytest.mark.parametrize(("mask", "error", "message"), BAD_MASK[:1] + BAD_MASK[-1:])
def test_an_overlay_call_refuses_a_bad_mask(pack_dir, mask, error, message):
    ov = Overlay(pack_dir, cache="device", seed=1)
    obs, _ = data()
    with pytest.raises(error) as err:
        ov(obs, mask=mask)
    assert str(err.value) == message
    ov.close()


def test_the_constructor_refuses_an_integer_alpha_tensor_as_the_call_does(pack_dir):
    with pytest.raises(TypeError) as err:
        Overlay(pack_dir, alpha=torch.ones(N, dtype=torch.int64))
    assert str(err.value) == FLOAT_ALPHA + "torch.int64"

"""mixshard.composite: the masked paste behind SGQN's, MaDi's and SODA's overlays; the checks
at the front of the API (mixshard.augment.inputs.checks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mixshard
from mixshard import blend, composite
from mixshard.augment.inputs.checks import check_obs

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

# every test through a CPU's one-pass blend and through the torch ops other devices run
pytestmark = pytest.mark.usefixtures("lerp_path")


def data(n=4, k=3, h=5, w=6, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    obs = (torch.rand(n, 3 * k, h, w, generator=g) * 255).to(device)
    imgs = torch.randint(0, 256, (n, 3, h, w), generator=g, dtype=torch.uint8).to(device)
    return obs, imgs, g


def frames(t: torch.Tensor, k: int = 3) -> torch.Tensor:
    n, _, h, w = t.shape
    return t.reshape(n, k, 3, h, w)


@pytest.mark.parametrize("device", DEVICES)
def test_a_bool_pixel_mask_keeps_obs_exactly_and_shows_the_image_elsewhere(device):
    obs, imgs, g = data(device=device)
    mask = (torch.rand(4, 1, 5, 6, generator=g) < 0.5).to(device)
    out = composite(obs, imgs, mask)
    keep = frames(mask.expand(4, 9, 5, 6).contiguous())
    o, x = frames(out), frames(obs)
    assert torch.equal(o[keep], x[keep])
    background = imgs.float().unsqueeze(1).expand_as(o)
    assert torch.equal(o[~keep], background[~keep])  # the same image on every frame


def test_fractional_per_channel_and_per_frame_masks_blend():
    obs, imgs, g = data()
    mask = torch.rand(4, 9, 5, 6, generator=g)
    expected = obs * mask + imgs.float().repeat(1, 3, 1, 1) * (1 - mask)  # SGQN's formula
    assert torch.allclose(composite(obs, imgs, mask), expected, atol=1e-4)
    per_frame = torch.rand(4, 3, 1, 5, 6, generator=g)
    full = per_frame.expand(4, 3, 3, 5, 6).reshape(4, 9, 5, 6)
    assert torch.allclose(composite(obs, imgs, per_frame), composite(obs, imgs, full), atol=1e-4)
    shared = torch.rand(1, 1, 5, 6, generator=g)  # one mask for every sample
    assert torch.allclose(
        composite(obs, imgs, shared), composite(obs, imgs, shared.expand(4, 1, 5, 6)), atol=1e-5
    )


def test_alpha_weights_the_image_where_the_mask_is_zero():
    obs, imgs, _ = data()
    zero = torch.zeros(4, 1, 5, 6)
    assert torch.allclose(composite(obs, imgs, zero, alpha=0.3), blend(obs, imgs, 0.3), atol=1e-4)
    alpha = torch.tensor([0.0, 0.25, 0.5, 1.0])
    assert torch.allclose(composite(obs, imgs, zero, alpha), blend(obs, imgs, alpha), atol=1e-4)
    assert torch.equal(composite(obs, imgs, torch.ones(4, 1, 5, 6), 0.7), obs)
    assert torch.equal(composite(obs, imgs, None, 0.5), blend(obs, imgs, 0.5))


def test_uint8_obs_round_half_up_and_out_works_in_place():
    obs = torch.full((1, 3, 1, 2), 10, dtype=torch.uint8)
    imgs = torch.full((1, 3, 1, 2), 13, dtype=torch.uint8)
    mask = torch.tensor([[[[0.0, 0.5]]]])
    out = composite(obs, imgs, mask)  # 13, then 10 + 0.5 * 3 = 11.5 -> 12
    assert out.dtype == torch.uint8 and out[0, :, 0].tolist() == [[13, 12]] * 3
    x, imgs2, g = data()
    mask = torch.rand(4, 1, 5, 6, generator=g)
    expected = composite(x, imgs2, mask)
    same = x.clone()
    assert composite(same, imgs2, mask, out=same).data_ptr() == same.data_ptr()
    assert torch.allclose(same, expected)


def test_autograd_flows_to_obs_images_and_mask():
    obs, imgs, g = data(n=2)
    obs.requires_grad_(True)
    img = imgs.float().requires_grad_(True)
    mask = torch.rand(2, 9, 5, 6, generator=g).requires_grad_(True)
    composite(obs, img, mask, alpha=0.5).sum().backward()
    assert obs.grad is not None and img.grad is not None and mask.grad is not None
    assert torch.allclose(obs.grad, 1 - 0.5 * (1 - mask.detach()))
    assert torch.allclose(img.grad, frames(0.5 * (1 - mask.detach())).sum(1))
    with pytest.raises(ValueError, match="out= cannot be used when obs, imgs, mask or alpha"):
        composite(obs, img, mask, out=torch.empty_like(obs))


def test_mask_errors():
    obs, imgs, _ = data()
    with pytest.raises(ValueError) as err:
        composite(obs, imgs, torch.ones(4, 2, 5, 6))
    assert str(err.value) == (
        "mask (4, 2, 5, 6) does not broadcast to obs (4, 9, 5, 6): give (N, H, W) or "
        "(N, 1, H, W) per pixel, (N, k, H, W) per frame, (N, 3k, H, W) per channel or "
        "(N, k, 1, H, W); here N=4, k=3, H=5, W=6"
    )
    with pytest.raises(TypeError, match="mask must be a torch.Tensor, a mixshard.keys key or None"):
        composite(obs, imgs, [[1.0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha must be in"):
        composite(obs, imgs, torch.ones(4, 1, 5, 6), alpha=2.0)


def test_an_alpha_that_is_no_number_is_a_type_error_naming_it():
    # float() took "0.5" and True: alpha="0.5" blended at 0.5, alpha=True pasted whole
    obs, imgs, _ = data()
    mask = torch.ones(4, 1, 5, 6, dtype=torch.bool)
    for alpha in ("0.5", True, False, np.bool_(True), None, [0.5], np.array([0.5, 0.5])):
        for fn, args in (
            (composite, (obs, imgs, mask)),
            (blend, (obs, imgs)),
            (blend, (obs.byte(), imgs)),
        ):
            with pytest.raises(TypeError) as err:
                fn(*args, alpha=alpha)
            assert str(err.value) == (
                "alpha must be a float in [0, 1] or an (N,) float tensor, got "
                f"{type(alpha).__name__} {alpha!r}"
            )
    # numpy's floats and ints are numbers: the same bytes as Python's
    assert torch.equal(blend(obs, imgs, np.float32(0.25)), blend(obs, imgs, 0.25))
    assert torch.equal(composite(obs, imgs, ~mask, np.int64(1)), composite(obs, imgs, ~mask, 1.0))


def test_composite_is_public():
    assert "composite" in mixshard.__all__ and mixshard.composite is composite


def test_obs_checks_name_the_fix():
    import numpy as np

    with pytest.raises(ValueError) as err:
        check_obs(torch.zeros(2, 84, 84, 9))
    assert str(err.value) == (
        "obs (2, 84, 84, 9) look channels-last (N, H, W, 3k); mixshard takes (N, 3k, H, W): "
        "pass obs.permute(0, 3, 1, 2)"
    )
    with pytest.raises(ValueError, match="look channels-last"):
        check_obs(torch.zeros(2, 64, 64, 3))
    assert check_obs(torch.zeros(2, 9, 12, 12)).shape == (2, 9, 12, 12)  # small but NCHW
    with pytest.raises(ValueError, match=r"obs must be \(N, 3k, H, W\) with 3k channels"):
        check_obs(torch.zeros(2, 4, 12, 12))
    with pytest.raises(TypeError) as err:
        check_obs(np.zeros((2, 9, 84, 84)))
    assert str(err.value) == (
        "obs must be a torch.Tensor of shape (N, 3k, H, W), got numpy.ndarray "
        "(torch.from_numpy(obs) converts a numpy array)"
    )


def test_the_lerp_gives_the_plain_formula_pixel_for_pixel():
    """Every pixel is the plain formula's, `lerp(obs, img, alpha * (1 - mask))` over whole
    tensors, through either path: a bool mask keeps obs or shows the background exactly; a
    mask shared by all samples, a per-frame one and fractional ones alike."""
    obs, _, g = data(n=7)
    per_frame = torch.randint(0, 256, (7, 9, 5, 6), generator=g, dtype=torch.uint8)
    alpha = torch.rand(7, generator=g)
    masks = [
        torch.rand(7, 1, 5, 6, generator=g) < 0.5,  # per pixel
        torch.rand(7, 3, 5, 6, generator=g) < 0.5,  # per frame and pixel
        torch.rand(1, 1, 5, 6, generator=g) < 0.5,  # one for every sample
        torch.rand(7, 3, 5, 6, generator=g),  # fractional
    ]
    background = frames(per_frame.float())
    for mask in masks:
        keep = mask.float().reshape(mask.shape[0], mask.shape[1], 1, 5, 6)
        for a in (1.0, 0.4, alpha):
            per_sample = a.view(7, 1, 1, 1, 1) if isinstance(a, torch.Tensor) else a
            weight = (1 - keep) * per_sample
            want = torch.lerp(frames(obs), background, weight).reshape(7, 9, 5, 6)
            assert torch.equal(composite(obs, per_frame, mask, a), want), (mask.shape, a)
            if mask.dtype == torch.bool:  # the observation, or the plain blend, exactly
                blended = torch.lerp(frames(obs), background, per_sample)
                shown = torch.where(keep.bool(), frames(obs), blended).reshape(7, 9, 5, 6)
                assert torch.equal(composite(obs, per_frame, mask, a), shown)
            obs8 = obs.round().to(torch.uint8)
            weight8 = torch.lerp(frames(obs8.float()), background, weight)
            want8 = weight8.add(0.5).floor().to(torch.uint8).reshape(7, 9, 5, 6)
            assert torch.equal(composite(obs8, per_frame, mask, a), want8), (mask.shape, a)

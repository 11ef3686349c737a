"""mixshard.blend and the batched flip / crop ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from mixshard import blend
from mixshard.augment.kernels import fused, ops
from mixshard.augment.kernels.ops import (
    _flip_arith,
    _flip_where,
    crop_resample,
    crop_resize,
    flip,
    random_crop_boxes,
    resize,
)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def reference(x: torch.Tensor, imgs: torch.Tensor, alpha) -> torch.Tensor:
    """The reference blend's formula, with `repeat`, in float64."""
    k = x.shape[1] // 3
    a = alpha.double().view(-1, 1, 1, 1) if isinstance(alpha, torch.Tensor) else alpha
    imgs01 = (imgs.double() / 255.0).repeat(1, k, 1, 1)
    return ((1 - a) * (x.double() / 255.0) + a * imgs01) * 255.0


def data(n=6, k=3, h=10, w=12, device="cpu", dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = (torch.rand(n, 3 * k, h, w, generator=g) * 255).to(dtype).to(device)
    imgs = torch.randint(0, 256, (n, 3, h, w), generator=g, dtype=torch.uint8).to(device)
    alpha = torch.rand(n, generator=g).to(device)
    return obs, imgs, alpha


@pytest.fixture(params=["fused", "one_pass"])
def path(request, monkeypatch):
    """Run blend through a CPU's compiled one pass (`_lerp.c`) and the torch ops' one pass
    (what a GPU runs, and a CPU without the compiled module)."""
    if request.param == "one_pass":
        monkeypatch.setattr(fused, "_lerp", None)
    elif fused._lerp is None:
        pytest.skip("mixshard.augment.kernels._lerp is not built")
    return request.param


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("per_sample", [False, True])
def test_float32_matches_reference(device, k, per_sample, path):
    obs, imgs, alpha = data(k=k, device=device)
    a = alpha if per_sample else 0.3
    got = blend(obs, imgs, a)
    assert got.dtype == torch.float32 and got.shape == obs.shape and got.device == obs.device
    assert (got.double() - reference(obs, imgs, a)).abs().max() < 1e-3
    inplace = obs.clone()
    assert blend(inplace, imgs, a, out=inplace) is inplace
    assert (inplace.double() - reference(obs, imgs, a)).abs().max() < 1e-3
    other = torch.empty_like(obs)
    assert blend(obs, imgs, a, out=other) is other
    assert torch.equal(other, got)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,tol", [(torch.float16, 0.13), (torch.bfloat16, 1.0)])
def test_half_precision_keeps_the_dtype(device, dtype, tol, path):
    obs, imgs, alpha = data(device=device, dtype=dtype)
    got = blend(obs, imgs, alpha)
    assert got.dtype == dtype
    assert (got.double() - reference(obs, imgs, alpha)).abs().max() <= tol


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [1, 3])
def test_uint8_rounds_half_up(device, k):
    obs, imgs, alpha = data(k=k, device=device)
    obs8 = obs.round().to(torch.uint8)
    got = blend(obs8, imgs, 0.5)
    assert got.dtype == torch.uint8
    k3 = imgs.repeat(1, k, 1, 1).long()
    want = (obs8.long() + k3 + 1) // 2  # alpha 0.5, exactly, halves rounded up
    assert torch.equal(got.long(), want)
    a = alpha.double().view(-1, 1, 1, 1)
    exact = (1 - a) * obs8.double() + a * k3.double()
    got = blend(obs8, imgs, alpha).double()
    near_tie = ((exact - exact.floor()) - 0.5).abs() < 1e-4
    assert torch.equal(got[~near_tie], torch.floor(exact + 0.5)[~near_tie])
    assert (got - exact).abs().max() <= 0.5 + 1e-4
    inplace = obs8.clone()
    blend(inplace, imgs, alpha, out=inplace)
    assert torch.equal(inplace.double(), got)


@pytest.mark.parametrize("device", DEVICES)
def test_a_background_per_frame_blends_each_frame_with_its_own(device, path):
    obs, _, alpha = data(k=3, device=device)
    g = torch.Generator().manual_seed(1)
    per_frame = torch.randint(0, 256, (6, 9, 10, 12), generator=g, dtype=torch.uint8).to(device)
    want = torch.cat(
        [
            reference(obs[:, 3 * j : 3 * j + 3], per_frame[:, 3 * j : 3 * j + 3], alpha)
            for j in range(3)
        ],
        1,
    )
    assert (blend(obs, per_frame, alpha).double() - want).abs().max() < 1e-3
    inplace = obs.clone()
    assert blend(inplace, per_frame, alpha, out=inplace) is inplace
    assert (inplace.double() - want).abs().max() < 1e-3
    exact = blend(obs.round().to(torch.uint8), per_frame, 0.5)
    assert torch.equal(exact.long(), (obs.round().long() + per_frame.long() + 1) // 2)
    grad = obs.clone().requires_grad_()
    assert (blend(grad, per_frame, alpha).detach().double() - want).abs().max() < 1e-3


def test_one_ulp_tie_cases_round_up():
    obs = torch.tensor([[[[1]], [[3]], [[254]]]], dtype=torch.uint8)
    imgs = torch.tensor([[[[2]], [[4]], [[255]]]], dtype=torch.uint8)
    assert blend(obs, imgs, 0.5).flatten().tolist() == [2, 4, 255]


def test_blend_never_repeats_and_allocates_only_the_output(monkeypatch, path):
    obs, imgs, alpha = data(n=32, k=3, h=84, w=84)
    monkeypatch.setattr(torch.Tensor, "repeat", lambda *a, **k: pytest.fail("repeat called"))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        blend(obs, imgs, alpha)
    allocated = sum(max(e.self_cpu_memory_usage, 0) for e in prof.events())
    assert allocated <= obs.nbytes + 4096  # the output, plus the (N,) weights
    inplace = obs.clone()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        blend(inplace, imgs, 0.5, out=inplace)
    allocated = sum(max(e.self_cpu_memory_usage, 0) for e in prof.events())
    assert allocated <= imgs.nbytes * 4 + 4096  # backgrounds as float: 1/k of obs


def test_blend_errors():
    obs, imgs, alpha = data(k=3)
    with pytest.raises(ValueError, match="obs has 8 channels, not a multiple of 3"):
        blend(obs[:, :8], imgs)
    with pytest.raises(ValueError, match=r"do not match obs .* in N, H or W"):
        blend(obs[:5], imgs)
    with pytest.raises(ValueError, match=r"do not match obs .* in N, H or W"):
        blend(obs, imgs[..., :-1])
    with pytest.raises(ValueError, match="obs is on cpu but imgs on meta"):
        blend(obs, imgs.to("meta"))
    with pytest.raises(ValueError, match=r"alpha must be a float or an \(N,\) tensor"):
        blend(obs, imgs, alpha[:3])
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\], got 1.5"):
        blend(obs, imgs, 1.5)
    with pytest.raises(ValueError, match="imgs must have 3 channels"):
        blend(obs, obs[:, :6])  # neither one background nor one per frame
    with pytest.raises(ValueError, match="out must have the shape, dtype and device of obs"):
        blend(obs, imgs, out=torch.empty(1))


def test_flip_and_identity_crop():
    _, imgs, _ = data(n=8, h=16, w=16)
    mask = torch.tensor([True, False] * 4)
    flipped = flip(imgs, mask)
    assert torch.equal(flipped[0], imgs[0].flip(-1)) and torch.equal(flipped[1], imgs[1])
    assert torch.equal(_flip_where(imgs, mask), flipped)  # the CUDA branch, on the CPU
    assert torch.equal(_flip_arith(imgs.float(), mask), flipped.float())
    whole = torch.tensor([[0.0, 0.0, 16.0, 16.0]]).repeat(8, 1)
    same = crop_resize(imgs, whole, (16, 16))
    assert torch.equal(same.add(0.5).floor().to(torch.uint8), imgs)
    both = crop_resize(imgs, None, (16, 16), mask)
    assert torch.equal(both.add(0.5).floor().to(torch.uint8), flipped)


def test_crop_takes_the_box():
    img = torch.zeros(1, 3, 20, 20, dtype=torch.uint8)
    img[..., 5:15, 10:20] = 200
    box = torch.tensor([[10.0, 5.0, 10.0, 10.0]])
    out = crop_resize(img, box, (10, 10))
    assert torch.equal(
        out.round().to(torch.uint8), torch.full((1, 3, 10, 10), 200, dtype=torch.uint8)
    )
    assert resize(img, (10, 10)).shape == (1, 3, 10, 10)


@pytest.mark.parametrize("device", DEVICES)
def test_random_crop_boxes_follow_the_rule(device):
    g = torch.Generator(device=device).manual_seed(0)
    boxes = random_crop_boxes(4000, 60, 80, (0.08, 1.0), (3 / 4, 4 / 3), device, g).cpu()
    x0, y0, w, h = boxes.unbind(1)
    assert (x0 >= 0).all() and (y0 >= 0).all() and (x0 + w <= 80).all() and (y0 + h <= 60).all()
    area = w * h / (60 * 80)
    assert area.min() >= 0.07 and area.max() <= 1.0
    import torchvision.transforms as T

    torch.manual_seed(0)
    tv = [
        h * w / (60 * 80)
        for _, _, h, w in (
            T.RandomResizedCrop.get_params(torch.zeros(3, 60, 80), (0.08, 1.0), (3 / 4, 4 / 3))
            for _ in range(4000)
        )
    ]
    assert abs(area.mean().item() - sum(tv) / len(tv)) < 0.02  # torchvision's distribution
    full = random_crop_boxes(5, 60, 80, (1.0, 1.0), (3 / 4, 4 / 3), device, g).cpu()
    assert torch.equal(full, torch.tensor([[0.0, 0.0, 80.0, 60.0]] * 5))


@pytest.mark.parametrize("device", DEVICES)
def test_crop_resample_identity_and_flip(device):
    _, imgs, _ = data(n=6, h=16, w=16, device=device)
    whole = torch.tensor([[0.0, 0.0, 16.0, 16.0]], device=device).repeat(6, 1)
    same = crop_resample(imgs, whole, (16, 16))
    assert same.dtype == torch.float32 and torch.equal(same.round().to(torch.uint8), imgs)
    mask = torch.tensor([True, False] * 3, device=device)
    boxes = torch.tensor([[2.0, 3.0, 11.0, 9.0]], device=device).repeat(6, 1)
    plain, flipped = crop_resample(imgs, boxes, (8, 8)), crop_resample(imgs, boxes, (8, 8), mask)
    assert torch.allclose(flipped[0], plain[0].flip(-1)) and torch.equal(flipped[1], plain[1])


@pytest.mark.parametrize("box", [(0, 0, 40, 40), (3, 5, 31, 27), (7, 2, 13, 15), (0, 20, 20, 20)])
def test_crop_resample_is_pils_bicubic_box_resize(box):
    from PIL import Image

    g = torch.Generator().manual_seed(1)
    # detail at every scale, but values far from 0 and 255: PIL rounds and clips to uint8
    # between its horizontal and vertical passes, which the cubic's overshoot would show
    coarse = torch.rand(1, 3, 10, 10, generator=g) * 120 + 60
    fine = torch.rand(1, 3, 40, 40, generator=g) * 40 - 20
    img = (F.interpolate(coarse, size=(40, 40), mode="bilinear") + fine).round().to(torch.uint8)
    x0, y0, w, h = box
    pil = Image.fromarray(img[0].permute(1, 2, 0).numpy())
    ref = pil.resize((20, 20), Image.Resampling.BICUBIC, box=(x0, y0, x0 + w, y0 + h))
    ref = torch.from_numpy(np.asarray(ref).copy()).permute(2, 0, 1).int()
    out = crop_resample(img, torch.tensor([box], dtype=torch.float32), (20, 20))
    # PIL computes in fixed point: equal up to its rounding
    assert (out[0].add(0.5).floor().int() - ref).abs().max() <= 1


def test_crop_resample_does_not_alias_when_shrinking():
    yy, xx = torch.meshgrid(torch.arange(72), torch.arange(72), indexing="ij")
    checker = (((xx + yy) % 2) * 255).to(torch.uint8).expand(2, 3, 72, 72)
    boxes = torch.tensor([[0.0, 0.0, 72.0, 72.0]] * 2)
    smooth = crop_resample(checker, boxes, (24, 24))[..., 3:-3, 3:-3]  # 3x smaller
    aliased = crop_resize(checker, boxes, (24, 24))[..., 3:-3, 3:-3]  # samples pixel centres
    assert aliased.std() > 100  # the 1-pixel checkerboard comes out at full contrast
    assert (smooth - 127.5).abs().max() < 15  # averaged to grey


@pytest.fixture(params=["compiled", "torch"])
def placing(request, monkeypatch):
    """`ops.place` (and `flip`) through the compiled pass and through the torch ops (what a GPU
    runs, and a CPU without the compiled module)."""
    if request.param == "torch":
        monkeypatch.setattr(ops, "_lerp", None)
    elif ops._lerp is None:
        pytest.skip("mixshard.augment.kernels._lerp is not built")
    return request.param


@pytest.mark.parametrize("width", [1, 15, 16, 17, 84, 100])
def test_place_gathers_scatters_and_flips_exactly(placing, width):
    g = torch.Generator().manual_seed(width)
    images = torch.randint(0, 256, (7, 3, 5, width), generator=g, dtype=torch.uint8)
    rows = torch.tensor([6, 0, 3, 3, 2])
    at = np.array([9, 1, 4, 0, 8])
    flipped = torch.tensor([True, False, True, False, True])
    out = torch.full((10, 3, 5, width), 7, dtype=torch.uint8)
    ops.place(out, images, at, rows, flipped)
    want = torch.full_like(out, 7)
    for j in range(5):
        image = images[rows[j]]
        want[at[j]] = image.flip(-1) if flipped[j] else image
    assert torch.equal(out, want)
    # in order, flips only: `flip`'s result
    mask = flipped.repeat(2)[:7]
    assert torch.equal(flip(images, mask), _flip_where(images, mask))


def test_place_refuses_an_image_out_of_range_and_writes_nothing():
    if ops._lerp is None:
        pytest.skip("mixshard.augment.kernels._lerp is not built")
    images = torch.arange(2 * 3 * 4 * 4, dtype=torch.uint8).view(2, 3, 4, 4)
    out = torch.zeros((3, 3, 4, 4), dtype=torch.uint8)
    with pytest.raises(IndexError, match="place: an image index is out of range"):
        ops.place(out, images, np.array([0, 3]))  # out holds 3 images
    with pytest.raises(IndexError, match="place: an image index is out of range"):
        ops.place(out, images, None, torch.tensor([1, 2]))  # images holds 2
    with pytest.raises(IndexError, match="place: an image index is out of range"):
        ops.place(out, images, np.array([0, -1]))
    assert not out.any()

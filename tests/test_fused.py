"""A CPU's one-pass blend (`augment/_lerp.c` through `augment/fused.py`) gives the bytes of the
torch ops every other device runs, for every mask, alpha and background layout; it takes only
what it can and refuses bad buffers with an error, never a crash."""

from __future__ import annotations

import itertools
import multiprocessing
import sys

import numpy as np
import pytest
import torch
from helpers import clip_pack

import mixshard
from mixshard.augment.kernels import fused

pytestmark = pytest.mark.skipif(
    fused._lerp is None, reason="mixshard.augment.kernels._lerp is not built"
)

N, K, H, W = 5, 3, 6, 7


def same_both_ways(monkeypatch, fn, *args) -> bool:
    """`fn(*args)` gives the same bytes through the compiled pass and with it switched off
    (the torch ops, a GPU's path)."""
    got = fn(*args)
    with monkeypatch.context() as m:
        m.setattr(fused, "_lerp", None)
        return torch.equal(got, fn(*args))


def masks(g: torch.Generator) -> list[torch.Tensor | None]:
    return [
        None,
        torch.rand(N, 1, H, W, generator=g) < 0.5,  # per pixel
        torch.rand(N, K, H, W, generator=g) < 0.5,  # per frame and pixel
        torch.rand(N, 3 * K, H, W, generator=g) < 0.5,  # per channel
        torch.rand(1, K, 1, H, W, generator=g) < 0.5,  # one for every sample
        torch.rand(N, 1, H, W, generator=g),  # fractional
        torch.rand(N, K, H, W, generator=g).double(),  # fractional, float64
    ]


def test_composite_and_blend_give_the_torch_paths_bytes(monkeypatch):
    g = torch.Generator().manual_seed(3)
    obs = torch.rand(N, 3 * K, H, W, generator=g) * 255
    one = torch.randint(0, 256, (N, 3, H, W), generator=g, dtype=torch.uint8)
    per_frame = torch.randint(0, 256, (N, 3 * K, H, W), generator=g, dtype=torch.uint8)
    alphas = [1.0, 0.5, 0.3, torch.rand(N, generator=g)]
    for imgs, mask, alpha in itertools.product([one, per_frame], masks(g), alphas):
        assert same_both_ways(monkeypatch, mixshard.composite, obs, imgs, mask, alpha)
        inplace = obs.clone()
        mixshard.composite(inplace, imgs, mask, alpha, out=inplace)
        assert torch.equal(inplace, mixshard.composite(obs, imgs, mask, alpha))
    for imgs, alpha in itertools.product([one, per_frame], alphas):
        assert same_both_ways(monkeypatch, mixshard.blend, obs, imgs, alpha)


FIVE_D = list(itertools.product((1, N), (1, K), (1, 3), (1, H), (1, W)))
FOUR_D = list(itertools.product((1, N), (1, K, 3 * K), (1, H), (1, W)))


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.float64])
@pytest.mark.parametrize("shape", FIVE_D + FOUR_D, ids=lambda s: "x".join(map(str, s)))
def test_every_mask_shape_that_broadcasts_gives_the_torch_paths_bytes(monkeypatch, shape, dtype):
    # a mask broadcast over H or W was read as whole pixel rows by the compiled pass
    # ("keep holds 288 bytes, needs 528"); it must give what the torch ops (a GPU) give, and
    # what the mask made whole gives
    g = torch.Generator().manual_seed(11)
    obs = torch.rand(N, 3 * K, H, W, generator=g) * 255
    imgs = torch.randint(0, 256, (N, 3, H, W), generator=g, dtype=torch.uint8)
    mask = (torch.rand(shape, generator=g) < 0.5).to(dtype)
    if mask.dim() == 4:  # (N or 1, 1 or k, ...) per pixel or frame; (N or 1, 3k, ...) per channel
        n, c, h, w = shape
        five = mask.reshape(n, K, 3, h, w) if c == 3 * K else mask.reshape(n, c, 1, h, w)
    else:
        five = mask
    whole = five.expand(N, K, 3, H, W).reshape(N, 3 * K, H, W).contiguous()
    for alpha in (1.0, 0.3, torch.rand(N, generator=g)):
        assert same_both_ways(monkeypatch, mixshard.composite, obs, imgs, mask, alpha)
        got = mixshard.composite(obs, imgs, mask, alpha)
        assert torch.equal(got, mixshard.composite(obs, imgs, whole, alpha))
        assert not torch.equal(got, obs) or bool(mask.all())  # something was pasted


def test_no_samples_give_an_empty_result_both_ways(monkeypatch):
    obs, imgs = torch.zeros(0, 6, 4, 4), torch.zeros(0, 3, 4, 4, dtype=torch.uint8)
    mask = torch.zeros(0, 1, 4, 4, dtype=torch.bool)
    for args in ((obs, imgs, mask, 0.3), (obs, imgs, None, 0.3)):
        assert mixshard.composite(*args).shape == (0, 6, 4, 4)
        assert same_both_ways(monkeypatch, mixshard.composite, *args)


def test_backgrounds_composite_gives_the_torch_paths_bytes_flipped_or_not(tmp_path, monkeypatch):
    pack = clip_pack(tmp_path, [3, 5, 2, 4])
    g = torch.Generator().manual_seed(5)
    obs = torch.rand(6, 9, 8, 8, generator=g) * 255
    keep = torch.rand(6, 3, 8, 8, generator=g) < 0.5
    soft = torch.rand(6, 1, 8, 8, generator=g)
    for flip in (False, True):
        bg = mixshard.Backgrounds(pack, 6, frames=3, flip=flip, seed=1, playback="random")
        bg.step()
        assert flip == bool(bg.flipped.any())  # some environment drew a flip
        for mask, alpha in [(None, 0.5), (keep, 1.0), (keep, 0.25), (soft, torch.rand(6))]:
            assert same_both_ways(monkeypatch, bg.composite, obs, mask, alpha)
        bg.close()


def test_it_takes_only_what_it_can():
    obs = torch.rand(2, 3, 4, 4) * 255
    frames = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    assert fused.usable(obs, frames, torch.empty_like(obs), None, 0.5)
    assert fused.usable(obs.byte(), frames, obs.byte(), None, 0.5)  # uint8 obs too
    assert not fused.usable(obs.double(), frames, obs.double(), None, 0.5)  # float32, uint8
    assert not fused.usable(obs, frames.float(), obs, None, 0.5)  # uint8 frames only
    assert not fused.usable(obs, frames, obs.byte(), None, 0.5)  # out like obs
    assert not fused.usable(obs.requires_grad_(), frames, obs, None, 0.5)  # autograd: torch's
    with torch.no_grad():
        assert fused.usable(obs, frames, obs, None, 0.5)
    assert not fused.usable(obs.detach(), frames, obs, None, torch.rand(2, requires_grad=True))
    got = mixshard.composite(obs.detach().double(), frames, None, 0.5)  # the torch ops do it
    assert got.dtype == torch.float64 and torch.equal(got, obs.detach().double() * 0.5)
    # an out laid out otherwise (channels-last memory) is written through its strides
    out = torch.empty(2, 4, 4, 3).permute(0, 3, 1, 2)
    mixshard.composite(obs.detach(), frames, None, 0.5, out=out)
    assert torch.equal(out, obs.detach() * 0.5)


def call_kernel(out, index, threads=2, keep=None, kind=0, side=(2, 3)):
    """`_lerp.composite` itself: 2 samples of one frame, backgrounds from a store of 2 frames
    by `index`, a bool `keep` of one plane per sample (`kind` 1) or none."""
    h, w = side
    obs = np.full((2, 3, h, w), 10.0, np.float32)
    frames = (np.arange(2 * 3 * h * w) % 251).astype(np.uint8).reshape(2, 3, h, w)
    p = np.zeros(len(fused._SLOTS), np.int64)
    plane = h * w
    fused._put(p, "n", [2, 1, 3, h, w, 0])
    fused._put(p, "obs", [3 * plane, 3 * plane, plane, 1])
    fused._put(p, "out", [3 * plane, 3 * plane, plane, 1])
    fused._put(p, "bg", [3 * plane, 0, 0, plane, 1, 2, kind, plane, 0, 0, 1])
    fused._put(p, "plain", [1, 0, threads])
    alpha = np.array([1.0], np.float32)
    fused._lerp.composite(  # type: ignore[union-attr]
        out, obs, frames, index, None, keep, None, None, None, alpha, p
    )
    return frames


def test_the_kernel_splits_rows_over_threads_and_refuses_bad_buffers():
    assert len(fused._SLOTS) == fused._lerp.PARAMS  # type: ignore[union-attr]
    # 2 samples of 45,000 pixels: over a quarter million values, so split over threads
    # (fewer, as many and more threads than units: the same bytes); tiny ones run on one
    for side in ((150, 300), (2, 3)):
        for threads in (0, 1, 4, 6, 100):
            out = np.zeros((2, 3, *side), np.float32)
            frames = call_kernel(out, np.array([1, 0], np.int64), threads, side=side)
            assert np.array_equal(out, frames[[1, 0]].astype(np.float32))
    with pytest.raises(IndexError, match="a frame index is out of range"):
        call_kernel(np.zeros((2, 3, 2, 3), np.float32), np.array([0, 2], np.int64))
    with pytest.raises(ValueError, match="out holds 140 bytes, needs 144"):
        call_kernel(np.zeros(35, np.float32), np.array([0, 1], np.int64))
    with pytest.raises(ValueError, match="keep holds 11 bytes, needs 12"):
        short = np.ones(11, np.uint8)  # 2 samples of 6 pixels, stride 6
        call_kernel(np.zeros(36, np.float32), np.array([0, 1], np.int64), keep=short, kind=1)
    with pytest.raises(ValueError, match="a required buffer is None"):
        call_kernel(np.zeros(36, np.float32), np.array([0, 1], np.int64), kind=1)
    read_only = np.zeros(36, np.float32)
    read_only.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        call_kernel(read_only, np.array([0, 1], np.int64))


def _composite_in_child(obs, imgs, keep, want) -> None:
    got = mixshard.composite(obs, imgs, keep).numpy()
    sys.exit(0 if np.array_equal(got, want) else 3)


def test_a_forked_child_splits_the_pass_over_threads_of_its_own():
    """The pass runs on OpenMP's team where the module was built with it (torch's own); a child
    forked after the parent used that team has none (a parallel region there would wait for it
    forever), so the child's pass takes threads of its own: it finishes, with the same bytes.
    (The child compares with numpy: a torch op of its own would wait on torch's team.)"""
    g = torch.Generator().manual_seed(9)
    obs = torch.randint(0, 256, (64, 9, 84, 84), generator=g, dtype=torch.uint8)
    imgs = torch.randint(0, 256, (64, 9, 84, 84), generator=g, dtype=torch.uint8)
    keep = torch.rand(64, 3, 84, 84, generator=g) < 0.5
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # (4.5 million values: split over both)
    try:
        want = mixshard.composite(obs, imgs, keep).numpy()
        child = multiprocessing.get_context("fork").Process(
            target=_composite_in_child, args=(obs, imgs, keep, want)
        )
        child.start()
        child.join(60)
        if child.is_alive():
            child.kill()
            child.join()
            pytest.fail("the forked child's composite never finished")
        assert child.exitcode == 0
    finally:
        torch.set_num_threads(threads)


def test_what_the_pass_does_not_walk_goes_to_the_torch_ops(monkeypatch):
    # over 64 frames, channels-last: the torch ops (the pass keeps 64 frame pointers a sample)
    g = torch.Generator().manual_seed(6)
    obs = torch.rand(2, 2, 40, 3 * 65, generator=g) * 255
    imgs = torch.randint(0, 256, (2, 2, 40, 3), generator=g, dtype=torch.uint8)
    mask = torch.rand(2, 2, 40, 65, generator=g) < 0.5  # (65 frames: the mask says so)

    def nhwc(*args):
        return mixshard.composite(*args, layout="NHWC")

    assert same_both_ways(monkeypatch, nhwc, obs, imgs, mask, 0.5)
    kept = mask.repeat_interleave(3, dim=3)
    assert torch.equal(nhwc(obs, imgs, mask, 1.0)[kept], obs[kept])


def test_wide_mirrored_channels_last_lines_are_blended_whole(tmp_path, monkeypatch):
    """A flipped environment's lines, channels-last, wider than a step of the interleaved
    loop holds (1,024 px x 3 frames): the planar loop takes them, mirrored line by line."""
    pack = clip_pack(tmp_path, [2, 3], size=1024, block_size=2)
    bg = mixshard.Backgrounds(pack, 2, frames=3, flip=True, seed=0)
    while not bool(bg.flipped.all()):
        bg.reset()
    obs = torch.zeros(2, 1024, 1024, 9, dtype=torch.uint8)
    keep = torch.zeros(2, 1024, 1024, 3, dtype=torch.bool)
    got = bg.composite(obs, keep, layout="NHWC")
    assert torch.equal(got, bg.images(layout="NHWC"))  # all background, mirrored
    assert same_both_ways(monkeypatch, lambda: bg.composite(obs, keep, 0.5, layout="NHWC"))


def test_float_obs_that_are_not_finite_give_the_torch_ops_bytes(monkeypatch):
    g = torch.Generator().manual_seed(7)
    imgs = torch.randint(0, 256, (N, 3 * K, H, W), generator=g, dtype=torch.uint8)
    for layout in ("NCHW", "NHWC"):
        obs = torch.rand(N, 3 * K, H, W, generator=g) * 255
        obs.view(-1)[::5] = float("nan")
        obs.view(-1)[1::7] = float("inf")
        obs.view(-1)[2::11] = -float("inf")
        background = imgs
        if layout == "NHWC":
            obs, background = obs.permute(0, 2, 3, 1).contiguous(), imgs.permute(0, 2, 3, 1)
        for key in (mixshard.keys.green_screen(), mixshard.keys.color_key((10, 20, 30), 50)):
            for alpha in (1.0, 0.5):
                got = mixshard.composite(obs, background, key, alpha, layout=layout)
                with monkeypatch.context() as m:
                    m.setattr(fused, "_lerp", None)
                    want = mixshard.composite(obs, background, key, alpha, layout=layout)
                assert torch.equal(got.nan_to_num(1e9), want.nan_to_num(1e9)), (layout, key)
                assert torch.equal(got.isnan(), want.isnan())


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize(
    "frames,flip,n,side",
    [(3, False, 4, 20), (3, True, 4, 20), (1, False, 4, 20), (3, False, 128, 86)],
)
def test_the_wide_loops_give_the_narrow_ones_and_the_torch_paths_bytes(
    tmp_path, monkeypatch, frames, flip, n, side, layout
):
    """Obs (uint8 and float32, either layout) through the AVX-512 loops (where the CPU has
    them), through AVX2 alone, and through the torch ops: the same bytes for each key (ids of
    int16 and int32, listed or background, one the dtype cannot hold) and a bool mask, with
    backgrounds from the frame store (3 frames woven from its planes, or 1) and from the
    caller. 20 px: 400 pixels a frame, 6 blocks of 64 and 16 left for the narrow loops. 128
    environments of 86 px: outputs of 8 MiB and more, streamed past the caches, from addresses
    64-byte aligned, 16-byte aligned and neither (a plane is 7,396 pixels)."""
    lerp = fused._lerp
    pack = clip_pack(tmp_path, [4, 6, 3], size=side)
    g = torch.Generator().manual_seed(11)
    rgb = torch.randint(0, 256, (n, side, side, frames, 3), generator=g)
    greenish = torch.rand(n, side, side, frames, generator=g) < 0.5
    shade = torch.randint(0, 60, (int(greenish.sum()), 3), generator=g)
    rgb[greenish] = shade * torch.tensor([1, 0, 1]) + torch.tensor([0, 150, 0])
    rgb[:, 0, :3, 0] = torch.tensor([[24, 70, 1], [2, 80, 0], [13, 70, 50]])  # DMC-GB bounds
    seg = torch.randint(-1, 4, (n, side, side, frames), generator=g, dtype=torch.int16)
    seg.view(-1)[::7] = 70000 - 65536  # what 70000 wraps to in int16: still not 70000
    depth = torch.rand(n, side, side, frames, generator=g) * 4
    depth.view(-1)[:4] = torch.tensor([0.0, float("inf"), float("nan"), -1.0])
    keep = torch.rand(n, side, side, frames, generator=g) < 0.5
    imgs = torch.randint(0, 256, (n, side, side, 3 * frames), generator=g, dtype=torch.uint8)
    rgb = rgb.reshape(n, side, side, 3 * frames)
    if layout == "NCHW":  # the same values, channels-first
        rgb, imgs, seg, depth, keep = (
            t.permute(0, 3, 1, 2).contiguous() for t in (rgb, imgs, seg, depth, keep)
        )
    mixshard_keys = mixshard.keys
    sources = [
        mixshard_keys.green_screen(),
        mixshard_keys.color_key((20, 200, 20), 60),
        mixshard_keys.from_segmentation(seg, background=[-1, 0]),
        mixshard_keys.from_segmentation(seg, [2, 70000]),  # (no int16 is 70000)
        mixshard_keys.from_segmentation(seg.int(), [1, 3, 70000]),
        mixshard_keys.from_depth(depth, 2.0),
        keep,
    ]
    bg = mixshard.Backgrounds(pack, n, frames=frames, flip=flip, seed=2, playback="random")
    bg.step()

    def every(obs: torch.Tensor) -> list[torch.Tensor]:
        return [
            call(obs, key, alpha)
            for key in sources
            for alpha in ((1.0, 0.5) if n < 100 else (1.0,))  # (large: the streamed selects)
            for call in (
                lambda o, k, a: bg.composite(o, k, a, layout=layout),
                lambda o, k, a: mixshard.composite(o, imgs, k, a, layout=layout),
            )
        ]

    before = lerp.wide()
    try:
        for dtype in (torch.uint8, torch.float32):
            obs = rgb.to(dtype)
            wide = (lerp.wide(True), every(obs))[1]
            narrow = (lerp.wide(False), every(obs))[1]
            with monkeypatch.context() as m:
                m.setattr(fused, "_lerp", None)
                ops = every(obs)
            for i, (a, b, c) in enumerate(zip(wide, narrow, ops)):
                assert torch.equal(a, c) and torch.equal(b, c), (dtype, i)
    finally:
        lerp.wide(before)
    bg.close()

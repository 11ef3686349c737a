"""`Backgrounds(clip_order=...)`: which clip each reset plays (issue 47 §4).

Independent draws (`"random"`, as before), DMC-GB's order (`"next"`: each reset the pack's
next clip) and draws that never replay the clip just played (`"no-repeat"`), each a pure
function of (seed, environment, episode). The clip packs' pixels say which clip they are
(red), so every assertion reads the clip off the frames.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import clip_pack, make_flat

import mixshard

LENGTHS = [3, 5, 2, 4, 1, 6]
ORDERS = ["random", "next", "no-repeat"]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return clip_pack(tmp_path_factory.mktemp("order"), LENGTHS)


def shown_clips(bg: mixshard.Backgrounds) -> list[int]:
    """Each environment's clip, read off its background's red channel."""
    return bg.images()[:, 0, 0, 0].tolist()


def history(bg: mixshard.Backgrounds, resets: int, seed: int = 0) -> np.ndarray:
    """`(num_envs, episodes)`: the clip of each environment's episodes, over `resets` resets
    of random subsets of the environments (and steps between them)."""
    g = torch.Generator().manual_seed(seed)
    played: list[list[int]] = [[c] for c in shown_clips(bg)]
    for _ in range(resets):
        done = torch.rand(bg.num_envs, generator=g) < 0.5
        bg.step()
        bg.reset(done)
        for e, c in enumerate(shown_clips(bg)):
            if done[e]:
                played[e].append(c)
    width = min(len(p) for p in played)
    return np.array([p[:width] for p in played])


def test_next_plays_the_packs_next_clip_at_each_reset(clips):
    """DMC-GB's `VideoWrapper` order (`index = (index + 1) % n` at each reset); environments
    start at consecutive clips, so those that reset together play different ones."""
    bg = mixshard.Backgrounds(clips, 8, frames=1, clip_order="next", seed=4)
    first = shown_clips(bg)
    assert first == [(first[0] + e) % 6 for e in range(8)]
    seq = [first]
    for _ in range(13):
        bg.step()
        bg.reset()
        seq.append(shown_clips(bg))
    assert seq == [[(first[0] + e + k) % 6 for e in range(8)] for k in range(14)]
    other_seed = mixshard.Backgrounds(clips, 8, frames=1, clip_order="next", seed=5)
    starts = {shown_clips(mixshard.Backgrounds(clips, 1, clip_order="next", seed=s))[0]
              for s in range(12)}  # fmt: skip
    assert len(starts) > 2 and shown_clips(other_seed)[0] in starts  # the seed draws the start


def test_no_repeat_never_replays_the_clip_just_played(clips):
    """At d499c40 a reset replayed the clip just played 1 in n times (a sixth here); now never,
    and every clip still comes up about as often."""
    random = history(mixshard.Backgrounds(clips, 16, frames=1, seed=2), 300)
    again = (random[:, 1:] == random[:, :-1]).mean()
    assert 0.1 < again < 0.25  # 1/6: independent draws, as before
    bg = mixshard.Backgrounds(clips, 16, frames=1, seed=2, clip_order="no-repeat")
    played = history(bg, 300)
    assert played.shape[1] > 100
    assert not (played[:, 1:] == played[:, :-1]).any()
    share = np.bincount(played.ravel(), minlength=6) / played.size
    assert np.all(np.abs(share - 1 / 6) < 0.03), share
    two = clip_pack(Path(bg.source.folder).parent / "two", [2, 3])  # two clips take turns
    turns = history(mixshard.Backgrounds(two, 4, frames=1, clip_order="no-repeat"), 40)
    assert (turns[:, 1:] != turns[:, :-1]).all()


def run_env_1(bg: mixshard.Backgrounds, others: int) -> list[torch.Tensor]:
    """Environment 1's backgrounds over 40 steps, resetting every 3rd step; the others
    reset in a pattern that depends on `others`."""
    g = torch.Generator().manual_seed(others)
    seq = []
    for t in range(40):
        mask = torch.rand(bg.num_envs, generator=g) < 0.4
        mask[1] = t % 3 == 0
        bg.step()
        bg.reset(mask)
        seq.append(bg.images()[1].clone())
    return seq


@pytest.mark.parametrize("order", ORDERS)
def test_each_order_is_keyed_by_environment_and_episode_in_both_caches(clips, order):
    """Environment 1 plays the same clips whatever `num_envs` and the others do, and a pool
    (which reads each environment's next clip ahead) plays what the device cache plays."""
    kwargs = {"frames": 2, "playback": "random", "seed": 9, "clip_order": order}
    a = run_env_1(mixshard.Backgrounds(clips, 3, **kwargs), others=1)
    b = run_env_1(mixshard.Backgrounds(clips, 11, **kwargs), others=2)
    pool = mixshard.Backgrounds(clips, 5, cache="pool", pool=5, **kwargs)
    try:
        c = run_env_1(pool, others=3)
    finally:
        pool.close()
    assert all(torch.equal(x, y) and torch.equal(x, z) for x, y, z in zip(a, b, c))


@pytest.mark.parametrize("order", ["next", "no-repeat"])
def test_a_pool_reads_each_environments_next_clip_in_its_order_ahead(clips, order):
    """The pool reads ahead the clip each environment plays next: with every read ahead in,
    a reset waits for none."""
    bg = mixshard.Backgrounds(clips, 2, cache="pool", pool=6, seed=1, clip_order=order)
    pool = bg._clip_pool
    try:
        waits = bg.stats()["waits"]
        for _ in range(4):
            deadline = time.monotonic() + 10
            while pool._asked.any() and time.monotonic() < deadline:
                pool._drain(block=False)
                time.sleep(0.005)
            bg.reset()
            assert bg.stats()["waits"] == waits
    finally:
        bg.close()


@pytest.mark.parametrize("cache", ["device", "pool"])
def test_a_state_continues_in_its_order_and_another_order_is_refused(clips, cache):
    kwargs = {"frames": 1, "seed": 3, "clip_order": "no-repeat", "cache": cache}
    bg = mixshard.Backgrounds(clips, 6, **kwargs)
    run_env_1(bg, others=1)
    buf = io.BytesIO()
    state = bg.state_dict()
    assert state["clip_order"] == "no-repeat"
    assert {k for k, v in state.items() if isinstance(v, torch.Tensor)} == {"episode", "played"}
    torch.save(state, buf)
    went_on = run_env_1(bg, others=2)
    buf.seek(0)
    other = mixshard.Backgrounds(clips, 6, **{**kwargs, "seed": 0})
    other.load_state_dict(torch.load(buf))
    assert all(torch.equal(x, y) for x, y in zip(went_on, run_env_1(other, others=2)))
    for order in ("random", "next"):
        with pytest.raises(
            ValueError,
            match=f"state_dict was saved with clip_order='no-repeat', this Backgrounds has "
            f"clip_order='{order}'",
        ):
            mixshard.Backgrounds(clips, 6, clip_order=order).load_state_dict(bg.state_dict())
    # a state saved before clip_order was (its draws were independent) loads as "random"
    old = {k: v for k, v in bg.state_dict().items() if k != "clip_order"}
    mixshard.Backgrounds(clips, 6).load_state_dict(old)
    with pytest.raises(ValueError, match="saved with clip_order='random'"):
        other.load_state_dict(old)
    for b in (bg, other):
        b.close()


def test_bad_clip_orders_say_what_is_wrong(clips, tmp_path):
    with pytest.raises(
        ValueError, match="clip_order must be one of random, next, no-repeat, got 'shuffle'"
    ):
        mixshard.Backgrounds(clips, 2, clip_order="shuffle")
    one = clip_pack(tmp_path / "one", [4])
    mixshard.Backgrounds(one, 2, clip_order="next")  # one clip, played at every reset
    with pytest.raises(
        ValueError, match="clip_order='no-repeat' needs at least 2 clips .* holds 1"
    ):
        mixshard.Backgrounds(one, 2, clip_order="no-repeat")
    make_flat(tmp_path / "src", n=3, ext=".png")  # an image pack: each image a clip
    mixshard.pack(tmp_path / "src", tmp_path / "images", size=8, workers=1, labels="none")
    bg = mixshard.Backgrounds(tmp_path / "images", 4, clip_order="no-repeat", seed=1)
    played = history(bg, 30)
    assert not (played[:, 1:] == played[:, :-1]).any()


@pytest.mark.cuda
@pytest.mark.parametrize("order", ["next", "no-repeat"])
def test_cuda_draws_each_order_as_the_cpu_does_without_a_host_sync(clips, order):
    kwargs = {"frames": 1, "seed": 4, "clip_order": order}
    cpu = mixshard.Backgrounds(clips, 6, **kwargs)
    gpu = mixshard.Backgrounds(clips, 6, device="cuda", **kwargs)
    g = torch.Generator().manual_seed(1)
    masks = [torch.rand(6, generator=g) < 0.5 for _ in range(10)]
    on_gpu = [m.cuda() for m in masks]
    gpu.images()  # warm-up
    torch.cuda.synchronize()
    shown = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        for mask in on_gpu:
            gpu.reset(mask)
            gpu.step()
            shown.append(gpu.images())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for mask, images in zip(masks, shown):
        cpu.reset(mask)
        cpu.step()
        assert torch.equal(images.cpu(), cpu.images())

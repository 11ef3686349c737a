"""mixshard.Backgrounds: a background clip per environment, kept through its episode.

The packs are tiny clip packs (`helpers.clip_pack`) whose pixels say which clip (red), which
frame (green) and which column (blue, so a flip shows) they are, so every assertion is exact.
"""

from __future__ import annotations

import contextlib
import functools
import io
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import clip_pack, make_flat

import mixshard
from mixshard.augment.draws import keyed
from mixshard.augment.draws.keyed import mix64, mix64_int, seed_key

LENGTHS = [3, 5, 2, 4, 1, 6]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return clip_pack(tmp_path_factory.mktemp("bg"), LENGTHS)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bgimages")
    make_flat(root / "src", n=5, ext=".png")
    mixshard.pack(root / "src", root / "pack", size=8, workers=1, labels="none")
    return root / "pack"


def shown(bg: mixshard.Backgrounds) -> list[tuple[int, list[int]]]:
    """Per environment: (its clip, the frame numbers of its `frames` background frames)."""
    imgs = bg.images()
    return [(int(imgs[e, 0, 0, 0]), imgs[e, 1::3, 0, 0].tolist()) for e in range(bg.num_envs)]


def test_the_draws_are_splitmix64_on_every_word():
    assert mix64_int(0) == 0xE220A8397B1DCDAF  # SplitMix64's first output for seed 0
    words = [0, 1, 2, 12345, -1, 2**62, -(2**63), 2**63 - 1]
    got = mix64(torch.tensor(words, dtype=torch.int64)).tolist()
    assert [g % 2**64 for g in got] == [mix64_int(w % 2**64) for w in words]
    assert seed_key(0) != seed_key(1)


def test_the_compiled_draws_give_the_tensor_ops_bits(monkeypatch):
    # a CPU's `keyed` is one compiled loop; every other device runs the tensor ops
    g = torch.Generator().manual_seed(3)
    env = torch.randint(-(2**63), 2**63 - 1, (500,), generator=g)
    episode = torch.randint(-(2**63), 2**63 - 1, (3, 500), generator=g)  # broadcast
    for key in (seed_key(0), -(2**63), 2**63 - 1):
        got = keyed.keyed(key, env, episode, 4)
        with monkeypatch.context() as m:
            m.setattr(keyed, "_lerp", None)
            want = keyed.keyed(key, env, episode, 4)
        assert got.shape == (3, 500) and torch.equal(got, want)
    one = mix64_int((mix64_int((mix64_int((5 + seed_key(1)) % 2**64) + 7) % 2**64) + 2) % 2**64)
    assert keyed.keyed(seed_key(1), torch.tensor([5]), torch.tensor([7]), 2).item() % 2**64 == one


@pytest.mark.parametrize("order", ["random", "next", "no-repeat"])
@pytest.mark.parametrize("clips", [1, 2, 3, 7, 1000])
def test_the_compiled_clip_draws_give_the_tensor_ops_bits(order, clips, monkeypatch):
    # a CPU's clip, start and flip of a reset are one compiled loop (`_lerp.draws`); every
    # other device runs the tensor ops: the same values, episodes negative and huge included
    from mixshard.augment.draws import playback

    if playback._lerp is None:
        pytest.skip("mixshard.augment.kernels._lerp is not built")
    g = torch.Generator().manual_seed(clips)
    envs = torch.cat([torch.arange(40), torch.randint(0, 2**40, (40,), generator=g)])
    episode = torch.cat([torch.arange(-3, 37), torch.randint(-(2**62), 2**62, (40,), generator=g)])
    length = torch.randint(1, 600, (clips,), generator=g)
    for key in (seed_key(clips), -(2**63)):
        for playback_, flip in (("random", True), ("loop", False)):
            got = playback.draw(key, envs, episode, length, playback_, flip, order)
            alone = playback.draw_clips(key, envs, episode, clips, order)
            with monkeypatch.context() as m:
                m.setattr(playback, "_lerp", None)
                want = playback.draw(key, envs, episode, length, playback_, flip, order)
            assert [w.dtype for w in got] == [torch.int64, torch.int64, torch.bool]
            for a, b in zip(got, want):
                assert a.shape == b.shape and torch.equal(a, b)
            assert torch.equal(alone, want[0])
    assert torch.all(got[0] < clips) and torch.all(got[1] == 0) and not got[2].any()
    assert len(torch.unique(got[0])) > min(clips, 80) // 2


def test_loop_plays_the_drawn_clip_from_its_first_frame_and_wraps(clips):
    bg = mixshard.Backgrounds(clips, 8, frames=1, playback="loop")
    first = shown(bg)
    assert len({c for c, _ in first}) > 2  # the environments drew different clips
    for k in range(13):
        for clip, frames in shown(bg):
            assert frames == [k % LENGTHS[clip]]
        bg.step()
    assert [c for c, _ in shown(bg)] == [c for c, _ in first]  # a clip lasts the episode


def test_pingpong_plays_forwards_then_backwards(clips):
    bg = mixshard.Backgrounds(clips, 16, frames=1, playback="pingpong")
    seen = {}
    for _ in range(14):
        for clip, frames in dict(shown(bg)).items():  # environments playing one clip agree
            seen.setdefault(clip, []).append(frames[0])
        bg.step()
    assert seen[1] == [0, 1, 2, 3, 4, 3, 2, 1, 0, 1, 2, 3, 4, 3]  # 5 frames
    assert seen[2] == [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]  # 2 frames
    assert seen[4] == [0] * 14  # a clip of one frame
    fast = mixshard.Backgrounds(clips, 16, frames=1, playback="pingpong", speed=3)
    seq = []
    for _ in range(6):
        seq.append(dict(shown(fast)).get(1))
        fast.step()
    assert [f[0] for f in seq] == [0, 3, 2, 1, 4, 1]  # 0, 3, 6 -> 2, 9 -> 1, 12 -> 4, 15 -> 1


def test_random_starts_each_episode_at_a_drawn_frame_then_loops(clips):
    bg = mixshard.Backgrounds(clips, 32, frames=1, playback="random", seed=3)
    starts = set()
    for _ in range(4):
        begin = shown(bg)
        for k in range(1, 8):
            bg.step()
            for (clip, frames), (_, first) in zip(shown(bg), begin):
                assert frames == [(first[0] + k) % LENGTHS[clip]]
        starts |= {(c, f[0]) for c, f in begin}
        bg.reset()
    assert len({f for c, f in starts if c == 5}) > 3  # start frames vary (clip 5: 6 frames)
    assert all(0 <= f < LENGTHS[c] for c, f in starts)


def test_stacked_frames_are_consecutive_oldest_first_and_start_on_the_first_frame(clips):
    bg = mixshard.Backgrounds(clips, 16, frames=3, playback="loop", speed=2)
    history = []
    for _ in range(4):
        history.append(dict(shown(bg))[5])  # clip 5 has 6 frames
        bg.step()
    assert history == [[0, 0, 0], [0, 0, 2], [0, 2, 4], [2, 4, 0]]
    assert bg.images().shape == (16, 9, 8, 8) and bg.images().dtype == torch.uint8


def test_an_image_pack_repeats_each_image_and_takes_only_loop(images):
    bg = mixshard.Backgrounds(images, 4, frames=2)
    before = bg.images().clone()
    assert torch.equal(before[:, :3], before[:, 3:])  # both frames one image
    for _ in range(3):
        bg.step()
    assert torch.equal(bg.images(), before)
    for playback in ("pingpong", "random"):
        with pytest.raises(ValueError, match=f"playback='{playback}' plays clips.*image pack"):
            mixshard.Backgrounds(images, 4, playback=playback)


def test_a_reset_by_mask_or_by_index_resets_those_environments_only(clips):
    """A mask is one entry per environment, of any dtype a simulator hands out (bool, 0/1
    integers of any width, 0/1 floats; torch, numpy or a list); numbers go through index=."""
    results = []
    for envs, index in (
        (torch.tensor([True, False, True, False, False]), None),
        (torch.tensor([1, 0, 1, 0, 0]), None),  # Isaac Gym's int64 reset_buf
        (torch.tensor([1, 0, 1, 0, 0], dtype=torch.uint8), None),
        (torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0]), None),
        (np.array([True, False, True, False, False]), None),  # a gymnasium vector env's done
        (np.array([1, 0, 1, 0, 0], np.int32), None),
        ([True, False, True, False, False], None),
        ([1, 0, 1, 0, 0], None),
        (None, torch.tensor([0, 2])),
        (None, torch.tensor([2, 0, 2])),  # listed twice: reset once
        (None, [0, 2]),
        (None, np.array([2, 0], np.uint8)),
    ):
        bg = mixshard.Backgrounds(clips, 5, frames=1, seed=7)
        for _ in range(3):
            bg.step()
        before = shown(bg)
        bg.reset(envs, index=index)
        after = shown(bg)
        assert after[1] == before[1] and after[3] == before[3] and after[4] == before[4]
        assert after[0][1] == [0] and after[2][1] == [0]
        assert bg.episode.tolist() == [1, 0, 1, 0, 0]
        bg.step(torch.tensor([False, True, False, False, False]))
        bg.step(index=[4])
        results.append((after, shown(bg), bg.played.tolist()))
    assert all(r == results[0] for r in results)
    assert results[0][2] == [0, 4, 0, 3, 4]
    bg.reset(torch.zeros(5, dtype=torch.bool))  # nobody
    bg.reset(index=[])
    assert bg.episode.tolist() == [1, 0, 1, 0, 0]


@pytest.mark.parametrize("cache", ["device", "pool"])
def test_nothing_about_which_environments_is_guessed(clips, cache):
    """Each of these was read as indices at 5e33428 (resetting environments 0 and 1, or 2):
    now a mask of 0/1 or an error naming the value, and nothing is reset."""
    bg = mixshard.Backgrounds(clips, 4, frames=1, seed=3, cache=cache)
    bg.reset([True, False, True, False])
    assert bg.episode.tolist() == [1, 0, 1, 0]
    bg.reset(torch.tensor([0, 1, 1, 0], dtype=torch.uint8))
    assert bg.episode.tolist() == [1, 1, 2, 0]
    bad = [
        (
            [2.7],
            ValueError,
            r"reset: envs is a mask of one entry per environment \(4,\), got "
            r"shape \(1,\); to name environments by number pass index=",
        ),
        (
            torch.tensor([0, 2, 1, 0]),
            ValueError,
            r"reset: envs is a mask of 0 and 1 \(or bool\), "
            r"got the value 2; to name environments by number pass index=",
        ),
        ([0.0, 0.5, 1.0, 0.0], ValueError, "got the value 0.5"),
        (torch.tensor([0.0, float("nan"), 1.0, 0.0]), ValueError, "got the value nan"),
        (
            ["a", "b", "c", "d"],
            TypeError,
            "envs must be a torch tensor, a numpy array or a list of numbers, got a list of str",
        ),
        ([[0, 1], [1]], TypeError, "got a list of list"),
        (torch.ones(4, dtype=torch.complex64), TypeError, "bool, integer or float mask"),
        (torch.ones(2, 2, dtype=torch.bool), ValueError, r"got shape \(2, 2\)"),
    ]
    for envs, kind, message in bad:
        with pytest.raises(kind, match=message):
            bg.reset(envs)
    for index, kind, message in [
        ([2.7], TypeError, "reset: index must hold integer environment numbers, got torch.float64"),
        ([True, False], TypeError, "index must hold integer environment numbers, got torch.bool"),
        ([[0], [1]], ValueError, r"index must be 1-D, got shape \(2, 1\)"),
        ([4], ValueError, r"environment indices must be in \[0, 4\), got 4 .. 4"),
    ]:
        with pytest.raises(kind, match=message):
            bg.reset(index=index)
    with pytest.raises(ValueError, match="reset: pass envs \\(a mask\\) or index=, not both"):
        bg.reset([1, 0, 0, 0], index=[0])
    with pytest.raises(ValueError, match="step: envs is a mask of 0 and 1"):
        bg.step([0, 3, 0, 0])
    assert bg.episode.tolist() == [1, 1, 2, 0] and bg.played.tolist() == [0, 0, 0, 0]
    bg.close()


def run_env_1(bg: mixshard.Backgrounds, others: int) -> list:
    """Environment 1's backgrounds over 30 steps; it resets at steps 5 and 12, the others
    (in a pattern that depends on `others`) whenever they like."""
    g = torch.Generator().manual_seed(others)
    seq = []
    for t in range(30):
        mask = torch.rand(bg.num_envs, generator=g) < 0.3
        mask[1] = t in (5, 12)
        bg.reset(mask)
        if t % 2:
            steps = torch.rand(bg.num_envs, generator=g) < 0.8
            steps[1] = t % 3 != 0
            bg.step(steps)
        else:
            bg.step()
        seq.append(bg.images()[1].clone())
    return seq


def test_an_environment_plays_the_same_whatever_num_envs_and_the_others_do(clips):
    kwargs = {"frames": 2, "playback": "random", "flip": True, "seed": 11}
    a = run_env_1(mixshard.Backgrounds(clips, 3, **kwargs), others=1)
    b = run_env_1(mixshard.Backgrounds(clips, 17, **kwargs), others=2)
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
    other_seed = run_env_1(mixshard.Backgrounds(clips, 3, **{**kwargs, "seed": 12}), others=1)
    assert not all(torch.equal(x, y) for x, y in zip(a, other_seed))


@pytest.mark.parametrize("cache", ["device", "pool"])
def test_one_environment_per_process_plays_its_number_with_first_env(clips, cache):
    """`first_env=k` numbers the environments from k: a process of one environment (ManiSkill3
    on a CPU) plays what environment k of them all plays, through resets, and its state says so."""
    kwargs = {"frames": 2, "playback": "random", "flip": True, "seed": 4, "cache": cache}
    all_of_them = mixshard.Backgrounds(clips, 6, **kwargs)
    ranks = [mixshard.Backgrounds(clips, 1, first_env=k, **kwargs) for k in range(6)]
    for step in range(12):
        images = all_of_them.images()
        assert all(torch.equal(r.images()[0], images[k]) for k, r in enumerate(ranks)), step
        done = torch.tensor([(step + k) % 3 == 0 for k in range(6)])
        all_of_them.step(), all_of_them.reset(done)
        for k, r in enumerate(ranks):
            r.step()
            r.reset(done[k : k + 1])
    state = ranks[4].state_dict()
    assert state["first_env"] == 4
    with pytest.raises(
        ValueError, match="saved with first_env=4, this Backgrounds has first_env=3"
    ):
        ranks[3].load_state_dict(state)
    older = {k: v for k, v in ranks[0].state_dict().items() if k != "first_env"}
    ranks[0].load_state_dict(older)  # a state from before first_env: numbered from 0
    with pytest.raises(ValueError, match="first_env must be >= 0, got -1"):
        mixshard.Backgrounds(clips, 1, first_env=-1)
    with pytest.raises(ValueError, match="first_env must be below 2\\*\\*62"):
        mixshard.Backgrounds(clips, 1, first_env=2**62)
    for b in (all_of_them, *ranks):
        b.close()


def test_flip_is_drawn_per_episode_and_kept_through_it(clips):
    bg = mixshard.Backgrounds(clips, 32, frames=1, flip=True)
    cols = [30 * x for x in range(8)]
    flipped = set()
    for _ in range(3):
        rows = bg.images()[:, 2, 0].tolist()
        for _ in range(2):
            bg.step()
            assert bg.images()[:, 2, 0].tolist() == rows  # the same flip through the episode
        assert all(r in (cols, cols[::-1]) for r in rows)
        flipped |= {r == cols[::-1] for r in rows}
        bg.reset()
    assert flipped == {True, False}


@pytest.mark.parametrize("cache", ["device", "pool"])
def test_state_dict_continues_exactly(clips, cache):
    kwargs = {"frames": 3, "playback": "pingpong", "flip": True, "seed": 5, "cache": cache}
    bg = mixshard.Backgrounds(clips, 6, **kwargs)
    run_env_1(bg, others=3)
    buf = io.BytesIO()
    torch.save(bg.state_dict(), buf)
    went_on = run_env_1(bg, others=4)
    other = mixshard.Backgrounds(clips, 6, **{**kwargs, "seed": 0})
    buf.seek(0)
    other.load_state_dict(torch.load(buf))
    assert other.seed == 5
    assert all(torch.equal(x, y) for x, y in zip(went_on, run_env_1(other, others=4)))
    with pytest.raises(ValueError, match="state_dict was saved with num_envs=6.*num_envs=7"):
        mixshard.Backgrounds(clips, 7, **kwargs).load_state_dict(bg.state_dict())
    with pytest.raises(ValueError, match="state_dict was saved with playback='pingpong'"):
        mixshard.Backgrounds(clips, 6, playback="loop").load_state_dict(bg.state_dict())
    for b in (bg, other):
        b.close()


def wait_for_reads_ahead(bg: mixshard.Backgrounds) -> None:
    pool = bg._clip_pool
    deadline = time.monotonic() + 10
    while pool._asked.any() and time.monotonic() < deadline:
        pool._drain(block=False)
        time.sleep(0.005)
    assert not pool._asked.any()


@pytest.mark.parametrize("num_envs,slots", [(4, 4), (2, 2), (9, 6)])
def test_the_pool_plays_what_the_device_cache_plays(clips, num_envs, slots):
    kwargs = {"frames": 3, "playback": "random", "flip": True, "seed": 2}
    device = mixshard.Backgrounds(clips, num_envs, cache="device", **kwargs)
    pool = mixshard.Backgrounds(clips, num_envs, cache="pool", pool=slots, **kwargs)
    try:
        assert device.stats()["mode"] == "device" and pool.stats()["mode"] == "pool"
        assert pool._frames.shape[0] == slots * max(LENGTHS)  # slots of the longest clip
        a, b = run_env_1(device, others=5), run_env_1(pool, others=5)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
        assert torch.equal(device.images(), pool.images())
        stats = pool.stats()
        assert stats["slots"] == slots and stats["loads"] >= len(LENGTHS)  # clips came and went
    finally:
        pool.close()


def test_a_pool_reset_finds_the_next_clips_read_ahead(clips):
    bg = mixshard.Backgrounds(clips, 2, cache="pool", pool=6, seed=1)
    try:
        waits = bg.stats()["waits"]  # construction reads the first clips in: waits
        for _ in range(3):
            wait_for_reads_ahead(bg)
            bg.reset()
            assert bg.stats()["waits"] == waits  # every next clip was in the pool
        assert bg.stats()["loads"] >= 3
    finally:
        bg.close()


def test_a_pool_too_small_for_a_clip_per_environment_is_refused(clips):
    with pytest.raises(mixshard.MixshardError, match="no room for a pool of clips.*pool=N"):
        mixshard.Backgrounds(clips, 4, cache="pool", pool=3)


def test_auto_keeps_a_small_pack_on_the_device(clips):
    assert mixshard.Backgrounds(clips, 2).stats() == {"mode": "device", "frames": sum(LENGTHS)}


def frame_values(bg: mixshard.Backgrounds) -> torch.Tensor:
    return bg.images().float()


@pytest.mark.usefixtures("lerp_path")
def test_composite_pastes_blends_and_keeps_exactly(clips):
    bg = mixshard.Backgrounds(clips, 3, frames=2, playback="loop", seed=4)
    bg.step()
    back = frame_values(bg)
    obs = torch.full((3, 6, 8, 8), 100.0)
    assert torch.equal(bg.composite(obs), back)  # mask None, alpha 1: the backgrounds
    half = bg.composite(obs, alpha=0.5)
    assert torch.equal(half, 100.0 + 0.5 * (back - 100.0))
    alpha = torch.tensor([0.0, 0.5, 1.0])
    per_env = bg.composite(obs, alpha=alpha)
    assert torch.equal(per_env[0], obs[0]) and torch.equal(per_env[2], back[2])
    assert torch.equal(per_env[1], half[1])
    keep = torch.zeros(3, 1, 8, 8, dtype=torch.bool)
    keep[:, :, :, :4] = True  # keep the left half of every frame
    pasted = bg.composite(obs, keep)
    assert torch.equal(pasted[..., :4], obs[..., :4]) and torch.equal(
        pasted[..., 4:], back[..., 4:]
    )
    per_frame = torch.zeros(3, 2, 8, 8, dtype=torch.bool)
    per_frame[:, 1] = True  # keep frame 1 whole, frame 0 all background
    out = bg.composite(obs, per_frame)
    assert torch.equal(out[:, :3], back[:, :3]) and torch.equal(out[:, 3:], obs[:, 3:])
    soft = bg.composite(obs, torch.full((3, 1, 8, 8), 0.5), alpha=alpha)
    assert torch.allclose(soft, obs + alpha.view(3, 1, 1, 1) * 0.5 * (back - obs))
    obs8 = torch.full((3, 6, 8, 8), 101, dtype=torch.uint8)
    got8 = bg.composite(obs8, alpha=0.5)
    assert got8.dtype == torch.uint8
    assert torch.equal(got8.long(), (101 + bg.images().long() + 1) // 2)  # halves round up
    obs16 = obs.half()
    assert bg.composite(obs16).dtype == torch.float16
    inplace = obs.clone()
    assert bg.composite(inplace, keep, out=inplace) is inplace
    assert torch.equal(inplace, pasted)
    with pytest.raises(ValueError, match="out must have the shape, dtype and device of obs"):
        bg.composite(obs, out=obs8)


def test_composite_resizes_obs_of_another_size_and_says_so_once(clips):
    bg = mixshard.Backgrounds(clips, 2, frames=1)
    obs = torch.zeros(2, 3, 16, 16)
    with pytest.warns(UserWarning, match="pack frames are 8x8 but the obs 16x16"):
        out = bg.composite(obs)
    assert out.shape == (2, 3, 16, 16)
    # a solid red and green survive the resize exactly
    assert torch.equal(out[:, :2], bg.images().float()[:, :2, :1, :1].expand(2, 2, 16, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bg.composite(obs)


def test_bad_arguments_say_what_is_wrong(clips):
    with pytest.raises(ValueError, match="playback must be one of loop, pingpong, random"):
        mixshard.Backgrounds(clips, 2, playback="bounce")
    with pytest.raises(ValueError, match="cache must be one of auto, device, pool"):
        mixshard.Backgrounds(clips, 2, cache="stream")
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        mixshard.Backgrounds(clips, 0)
    with pytest.raises(TypeError, match="frames must be an integer"):
        mixshard.Backgrounds(clips, 2, frames=2.5)
    with pytest.raises(TypeError, match="flip must be True or False, got 0.5"):
        mixshard.Backgrounds(clips, 2, flip=0.5)
    with pytest.raises(ValueError, match="cache_fraction must be in"):
        mixshard.Backgrounds(clips, 2, cache_fraction=0)
    bg = mixshard.Backgrounds(clips, 4, frames=3)
    with pytest.raises(
        ValueError, match=r"reset: environment indices must be in \[0, 4\), got 1 .. 4"
    ):
        bg.reset(index=torch.tensor([1, 4]))
    with pytest.raises(ValueError, match=r"step: environment indices must be in \[0, 4\)"):
        bg.step(index=[-1])
    with pytest.raises(ValueError, match=r"one entry per environment \(4,\), got shape \(5,\)"):
        bg.reset(torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="envs must be a torch tensor, a numpy array or a list"):
        bg.step("all")
    obs = torch.zeros(4, 9, 8, 8)
    with pytest.raises(ValueError, match="obs hold 3 environments, Backgrounds has num_envs=4"):
        bg.composite(obs[:3])
    with pytest.raises(ValueError, match=r"obs have 6 channels \(2 stacked frames\).*frames=2"):
        bg.composite(obs[:, :6])
    # the masks and errors of mixshard.composite (at d499c40 a message of its own, and a
    # ValueError for an integer mask where composite raised a TypeError)
    with pytest.raises(ValueError, match=r"mask \(4, 2, 8, 8\) does not broadcast to obs"):
        bg.composite(obs, torch.ones(4, 2, 8, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask \(4, 1, 4, 8\) does not broadcast to obs"):
        bg.composite(obs, torch.ones(4, 1, 4, 8, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a bool or float tensor .* got torch.int64"):
        bg.composite(obs, torch.ones(4, 1, 8, 8, dtype=torch.int64))
    with pytest.raises(
        ValueError, match=r"alpha must be a float or a float tensor of shape \(4,\)"
    ):
        bg.composite(obs, alpha=torch.ones(3))
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\], got 2"):
        bg.composite(obs, alpha=2)
    for alpha in ("0.5", True):  # at 5e33428 a ValueError, unlike composite's TypeError
        with pytest.raises(TypeError, match=r"alpha must be a float in \[0, 1\] or a \(4,\)"):
            bg.composite(obs, alpha=alpha)
    with pytest.raises(
        ValueError, match=r"alpha must be in \[0, 1\], got a tensor from 0.5 to 1.5"
    ):
        bg.composite(obs, alpha=torch.tensor([0.5, 1.5, 1.0, 1.0]))
    with pytest.raises(ValueError, match=r"mask must be in \[0, 1\], got a tensor from 0 to 2"):
        bg.composite(obs, torch.tensor([0.0, 2.0]).repeat(32).view(4, 1, 4, 4).repeat(1, 1, 2, 2))
    with pytest.raises(ValueError, match=r"mask must be in \[0, 1\], got NaN \(256 of 256"):
        bg.composite(obs, torch.full((4, 1, 8, 8), float("nan")))
    with pytest.raises(ValueError, match="look channels-last"):
        bg.composite(torch.zeros(4, 16, 16, 9))
    with pytest.raises(ValueError, match="obs are on meta but Backgrounds on cpu"):
        bg.composite(obs.to("meta"))


def test_readme_vectorised_loop(clips):
    """What the README's `Backgrounds` loop does (DMC-GB's green screen, batched): the agent's
    pixels stay, every green one shows that environment's own clip frame."""
    num_envs = 8
    bg = mixshard.Backgrounds(clips, num_envs, frames=3, playback="loop")
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(num_envs, 9, 8, 8, generator=g) * 255
    obs.view(num_envs, 3, 3, 8, 8)[:, :, :, :4] = torch.tensor([20.0, 200.0, 20.0]).view(3, 1, 1)
    for _ in range(20):
        keep = mixshard.masks.green_screen(obs)  # DMC-GB's rule, (num_envs, 3, H, W)
        out = bg.composite(obs, keep)  # each env behind its own clip
        shown = bg.images().float().view(num_envs, 3, 3, 8, 8)
        five, kept = out.view(num_envs, 3, 3, 8, 8), keep.unsqueeze(2).expand(-1, -1, 3, -1, -1)
        assert torch.equal(five[kept], obs.view(num_envs, 3, 3, 8, 8)[kept])
        assert torch.equal(five[~kept], shown[~kept]) and not kept[:, :, :, :4].any()
        done = torch.rand(num_envs, generator=g) < 0.1
        bg.step()
        bg.reset(done)


@pytest.mark.cuda
def test_cuda_plays_what_the_cpu_plays_without_a_host_sync(clips):
    words = torch.tensor([0, 1, -1, 2**62, -(2**63)], dtype=torch.int64)
    assert torch.equal(mix64(words.cuda()).cpu(), mix64(words))
    kwargs = {"frames": 3, "playback": "pingpong", "flip": True, "seed": 9}
    cpu = mixshard.Backgrounds(clips, 6, **kwargs)
    gpu = mixshard.Backgrounds(clips, 6, device="cuda", **kwargs)
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(6, 9, 8, 8, generator=g) * 255
    keep = torch.rand(6, 1, 8, 8, generator=g) < 0.5
    masks = [torch.rand(6, generator=g) < 0.4 for _ in range(8)]
    obs_gpu, keep_gpu, masks_gpu = obs.cuda(), keep.cuda(), [m.cuda() for m in masks]
    gpu.composite(obs_gpu, keep_gpu)  # warm-up
    torch.cuda.synchronize()
    outs = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        for mask in masks_gpu:
            gpu.reset(mask)
            gpu.step()
            outs.append(gpu.composite(obs_gpu, keep_gpu, alpha=0.5))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for mask, out in zip(masks, outs):
        cpu.reset(mask)
        cpu.step()
        assert torch.allclose(out.cpu(), cpu.composite(obs, keep, alpha=0.5), atol=1e-4)


class ScriptedReads:
    """The pool's read-ahead thread, replaced by reads that finish in an order a seeded
    generator picks: any read asked may come in at any call (or at none), a blocking take
    hands over any finished read, not necessarily the one waited for, and one read ahead in
    `fail` is a damaged block (the pool's own reads at a reset do not fail)."""

    def __init__(self, read, rng: np.random.Generator, fail: float) -> None:
        self.read, self.rng, self.fail = read, rng, fail
        self.asked: list[int] = []

    def ask(self, clip: int) -> None:
        self.asked.append(clip)

    def take(self, block: bool):
        if not self.asked or (not block and self.rng.random() < 0.5):
            assert not block, "the pool waits for a read it never asked for"
            return None
        clip = self.asked.pop(int(self.rng.integers(len(self.asked))))
        if self.rng.random() < self.fail:
            return clip, mixshard.MixshardError(f"clip {clip} has frames in a damaged block")
        return clip, self.read(clip)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def many_clips(tmp_path_factory) -> Path:
    lengths = [1 + (7 * c) % 4 for c in range(40)]  # 40 clips of 1-4 frames
    return clip_pack(tmp_path_factory.mktemp("bgmany"), lengths, size=4)


def random_envs(rng: np.random.Generator, n: int) -> dict:
    """A random choice of environments, in one of the forms `reset` takes."""
    mask = rng.random(n) < rng.choice([0.1, 0.5, 1.0])
    form = rng.integers(4)
    if form == 0:
        return {"envs": torch.from_numpy(mask)}
    if form == 1:
        return {"envs": mask.astype(np.int64).tolist()}
    if form == 2:
        return {"index": np.flatnonzero(mask).tolist()}
    return {"envs": None}


def test_the_pool_matches_the_device_cache_under_any_order_of_reads(many_clips, monkeypatch):
    """Issue 46: a clip read ahead that came in while another was waited for was placed twice,
    and a later placement evicted the first copy, handing environments slot -1 (IndexError,
    or a device-side assert on CUDA). For many seeds, every order of finished reads and every
    pool size from the tightest up: each images() equals the device cache's, a failed read
    changes nothing, and the slot bookkeeping stays one clip to one slot."""
    from mixshard.augment.caches import clippool

    for seed in range(60):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 13))
        slots = min(40, n + int(rng.integers(0, 4)))
        fail = 0.1 if seed % 3 == 0 else 0.0
        scripted = functools.partial(ScriptedReads, rng=rng, fail=fail)
        monkeypatch.setattr(clippool, "ReadAhead", scripted)
        kwargs = {"frames": 2, "playback": "random", "flip": True, "seed": seed}
        device = mixshard.Backgrounds(many_clips, n, cache="device", **kwargs)
        pool = mixshard.Backgrounds(many_clips, n, cache="pool", pool=slots, **kwargs)
        for _ in range(25):
            which = random_envs(rng, n)
            try:
                pool.reset(**which)
            except mixshard.MixshardError as e:
                assert "damaged block" in str(e)  # scripted: nothing was reset
            else:
                device.reset(**which)
            if rng.random() < 0.7:
                device.step()
                pool.step()
            if rng.random() < 0.1:  # a state loaded: every clip acquired again, or nothing
                with contextlib.suppress(mixshard.MixshardError):
                    pool.load_state_dict(device.state_dict())
            assert torch.equal(pool.episode, device.episode)
            assert torch.equal(pool.images(), device.images()), seed
            p = pool._clip_pool
            placed = p.clip_of >= 0
            assert (p.slot_of[p.clip_of[placed]] == np.flatnonzero(placed)).all()
            assert (p.slot_of >= 0).sum() == placed.sum()
            assert (p.users >= 0).all() and p.users.sum() == n
            assert not p._pending and not p._held
        pool.close()


def test_a_pool_over_many_clips_never_hands_out_slot_minus_one(tmp_path):
    """Issue 46's reproduction with the real reader thread: 64 environments over 600 one-frame
    clips in a pool of 100; at 5e33428, 16 of 20 fresh instances raised IndexError (slot -1)
    within ten resets of half the environments."""
    pack = clip_pack(tmp_path, [1] * 600, size=4, block_size=64)
    for seed in range(20):
        device = mixshard.Backgrounds(pack, 64, cache="device", seed=seed, frames=1)
        pool = mixshard.Backgrounds(pack, 64, cache="pool", pool=100, seed=seed, frames=1)
        g = torch.Generator().manual_seed(seed)
        for _ in range(10):
            done = torch.rand(64, generator=g) < 0.5
            pool.reset(done)
            device.reset(done)
            assert torch.equal(pool.images(), device.images())
        pool.close()


@pytest.mark.parametrize("cache", ["device", "pool"])
def test_a_state_that_lies_is_refused_naming_the_field(clips, cache):
    """At 5e33428 only the scalars were checked: a `played` of shape (1,) was kept and shared by
    every environment, NaN and inf counters became -9223372036854775807, and a list or a
    missing key raised AttributeError or KeyError."""
    bg = mixshard.Backgrounds(clips, 4, frames=2, seed=1, cache=cache)
    bg.reset(index=[1])
    bg.step()
    good = bg.state_dict()
    before = (bg.images().clone(), {k: v for k, v in good.items()})
    nan = torch.tensor([0.0, float("nan"), 1.0, 2.0])
    cases = [
        (
            {"played": torch.tensor([3])},
            ValueError,
            r"state\['played'\] must be int64 of shape \(4,\) \(num_envs\), got torch.int64 of "
            r"shape \(1,\)",
        ),
        ({"episode": nan}, ValueError, r"state\['episode'\] must be int64 .* got torch.float32"),
        ({"played": torch.tensor([0.0, float("inf"), 0, 0])}, ValueError, r"state\['played'\]"),
        (
            {"episode": [0, 1, 0, 0]},
            TypeError,
            r"state\['episode'\] must be a torch tensor, got list",
        ),
        (
            {"episode": torch.tensor([0, -1, 0, 0])},
            ValueError,
            r"state\['episode'\] must be counts >= 0, got -1",
        ),
        ({"episode": torch.zeros(4, dtype=torch.int32)}, ValueError, "got torch.int32"),
        ({"seed": 2.5}, TypeError, r"state\['seed'\] must be an integer, got 2.5"),
        ({"seed": 2**64}, ValueError, r"state\['seed'\] must be below 2\*\*64"),
        ({"num_envs": True}, ValueError, "state_dict was saved with num_envs=True"),
        ({"speed": 1.0}, ValueError, "state_dict was saved with speed=1.0"),
        ({"extra": 1}, ValueError, r"not a Backgrounds.state_dict\(\): unknown keys \['extra'\]"),
    ]
    for change, kind, message in cases:
        with pytest.raises(kind, match=message):
            bg.load_state_dict({**good, **change})
    for key in ("played", "seed", "clips"):
        state = {k: v for k, v in good.items() if k != key}
        with pytest.raises(ValueError, match=f"not a Backgrounds.state_dict\\(\\): it lacks {key}"):
            bg.load_state_dict(state)
    with pytest.raises(TypeError, match="state must be a dict from state_dict"):
        bg.load_state_dict([("seed", 1)])
    assert torch.equal(bg.images(), before[0])  # nothing changed
    after = bg.state_dict()
    assert all(
        torch.equal(after[k], v) for k, v in before[1].items() if isinstance(v, torch.Tensor)
    )
    bg.load_state_dict(good)
    assert torch.equal(bg.images(), before[0])
    bg.close()


def test_seeds_and_speeds_are_integers_that_fit_their_words(clips):
    """At 5e33428: seed=np.int64(3) raised OverflowError, seed=2**64 silently equalled seed=0,
    speed=2**70 raised OverflowError."""
    a = mixshard.Backgrounds(clips, 3, seed=np.int64(3), speed=np.int32(2), playback="random")
    b = mixshard.Backgrounds(clips, 3, seed=3, speed=2, playback="random")
    for _ in range(3):
        assert torch.equal(a.images(), b.images())
        a.step(), b.step()
        a.reset(), b.reset()
    assert type(a.seed) is int and type(a.speed) is int
    top = mixshard.Backgrounds(clips, 3, seed=2**64 - 1)
    assert top.state_dict()["seed"] == 2**64 - 1
    with pytest.raises(
        ValueError, match=r"seed must be below 2\*\*64 .*, got 18446744073709551616"
    ):
        mixshard.Backgrounds(clips, 3, seed=2**64)
    with pytest.raises(
        ValueError, match=r"speed must be below 2\*\*31 frames a step, got 1180591620717411303424"
    ):
        mixshard.Backgrounds(clips, 3, speed=2**70)
    with pytest.raises(TypeError, match="seed must be an integer, got True"):
        mixshard.Backgrounds(clips, 3, seed=True)


def test_a_closed_pool_says_so_every_time_and_changes_nothing(clips):
    """At 5e33428 a pool `Backgrounds` used after close() sometimes worked and sometimes said
    'the clip pool's reader ended'."""
    bg = mixshard.Backgrounds(clips, 4, frames=2, cache="pool", pool=4, seed=2)
    bg.reset(index=[0])
    state = bg.state_dict()
    bg.close()
    obs = torch.zeros(4, 6, 8, 8)
    calls = {
        "reset": lambda: bg.reset(),
        "step": lambda: bg.step(),
        "images": lambda: bg.images(),
        "positions": lambda: bg.positions(),
        "composite": lambda: bg.composite(obs),
        "load_state_dict": lambda: bg.load_state_dict(state),
    }
    for _ in range(3):
        for name, call in calls.items():
            with pytest.raises(ValueError, match=f"{name}: this Backgrounds was closed"):
                call()
    after = bg.state_dict()
    assert all(torch.equal(after[k], state[k]) for k in ("episode", "played"))
    bg.close()  # twice is fine

"""mixshard.Backgrounds over several packs by weight: the picks, weights that change, a
difficulty (the first k clips), and a state that resumes byte for byte."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import clip_pack, make_flat

import mixshard

LENGTHS = [3, 5, 2, 4, 1, 6]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return clip_pack(tmp_path_factory.mktemp("mixclips"), LENGTHS)


@pytest.fixture(scope="module")
def stills(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mixstills")
    make_flat(root / "src", n=5, ext=".png")
    mixshard.pack(root / "src", root / "pack", size=8, workers=1, labels="none")
    return root / "pack"


def packs_shown(bg: mixshard.Backgrounds) -> list[int]:
    """Each environment's pack: 0 for the clip pack's 6 clips, 1 for the stills."""
    return (bg.clip >= len(LENGTHS)).long().tolist()


def run(bg: mixshard.Backgrounds, steps: int, start: int = 0) -> list[torch.Tensor]:
    """`steps` steps, each environment resetting every 3-7 steps; the images of each."""
    out = []
    envs = torch.arange(bg.num_envs)
    for t in range(start, start + steps):
        bg.step()
        bg.reset((envs + t) % (3 + envs % 5) == 0)
        out.append(bg.images().clone())
    return out


def test_clip_and_image_packs_mix_and_a_still_holds_still(clips, stills):
    bg = mixshard.Backgrounds([clips, stills], 64, weights=[0.5, 0.5], frames=2)
    assert bg.weights == [0.5, 0.5] and 10 < sum(packs_shown(bg)) < 54
    first = bg.images().clone()
    for _ in range(4):
        bg.step()
    now, still = bg.images(), torch.tensor(packs_shown(bg)).bool()
    assert torch.equal(now[still], first[still])  # an image is a clip that holds still
    assert not torch.equal(now[~still], first[~still])
    frames = torch.cat([read_all(clips), read_all(stills)])
    assert torch.equal(now[:, 3:], frames[bg.base + bg.positions()[:, -1]])


def read_all(pack: Path) -> torch.Tensor:
    bg = mixshard.Backgrounds(pack, 1)
    return bg._frames.clone()


def test_an_environments_packs_do_not_depend_on_num_envs(clips, stills):
    small = mixshard.Backgrounds([clips, stills], 3, weights=[0.3, 0.7], seed=5)
    large = mixshard.Backgrounds([clips, stills], 40, weights=[0.3, 0.7], seed=5)
    for _ in range(20):
        assert large.clip[:3].tolist() == small.clip.tolist()
        small.reset()
        large.reset()


def test_episode_shares_follow_the_weights(clips, stills):
    bg = mixshard.Backgrounds([clips, stills], 20_000, weights=[0.9, 0.1])
    share = 1 - np.mean(packs_shown(bg))
    assert abs(share - 0.9) < 4.5 * np.sqrt(0.9 * 0.1 / 20_000)


def test_new_weights_reach_the_environments_that_reset_only(clips, stills):
    bg = mixshard.Backgrounds([clips, stills], 16, weights=[1, 0])
    assert packs_shown(bg) == [0] * 16
    bg.set_weights([0, 1])
    bg.reset(torch.arange(16) < 5)
    assert packs_shown(bg) == [1] * 5 + [0] * 11
    bg.step()
    assert packs_shown(bg) == [1] * 5 + [0] * 11


def test_a_schedule_changes_the_weights_by_step(clips, stills):
    bg = mixshard.Backgrounds([clips, stills], 8, schedule=[(0, [1, 0]), (3, [0, 1])])
    seen = []
    for _ in range(5):
        bg.reset()
        seen.append(sum(packs_shown(bg)))
        bg.step()
    assert seen == [0, 0, 0, 8, 8]


def test_a_difficulty_plays_the_first_clips_only(clips):
    bg = mixshard.Backgrounds(clips, 64, limit=2, seed=1)
    drawn = set()
    for _ in range(10):
        drawn |= set(bg.clip.tolist())
        bg.reset()
    assert drawn == {0, 1}
    bg.set_limit(None)
    bg.reset()
    assert set(bg.clip.tolist()) == set(range(6))
    with pytest.raises(ValueError, match=r"limit\[0\] must be in \[1, 6\] \(the clips of pack 0\)"):
        bg.set_limit(7)


@pytest.mark.parametrize("cache", ["device", "pool"])
def test_a_state_resumes_byte_for_byte_at_any_step(clips, stills, cache):
    kw = dict(weights=[0.6, 0.4], playback="pingpong", flip=True, cache=cache, seed=2)
    kw["pool"] = 24 if cache == "pool" else None
    bg = mixshard.Backgrounds([clips, stills], 16, **kw)
    states, images = [], []
    for t in range(0, 120, 30):  # the weights change as it goes: they are in the state
        bg.set_weights([0.6 + t / 300, 0.4 - t / 300])
        states.append(bg.state_dict())
        images.append(run(bg, 30, t))
    tail = run(bg, 60, 120)
    for k, state in enumerate(states):
        again = mixshard.Backgrounds([clips, stills], 16, **kw)
        again.load_state_dict(state)
        got = []
        for j, t in enumerate(range(30 * k, 120, 30)):
            if j:
                again.set_weights([0.6 + t / 300, 0.4 - t / 300])
            got += run(again, 30, t)
        got += run(again, 60, 120)
        want = [x for chunk in images[k:] for x in chunk] + tail
        assert len(got) == len(want) == 180 - 30 * k
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        again.close()
    bg.close()


def test_a_state_is_16_bytes_an_environment_and_a_few_hundred_more(clips, stills):
    bg = mixshard.Backgrounds([clips, stills], 1000, weights=[1, 1])
    state = bg.state_dict()
    tensors = sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v))
    assert tensors == 16 * 1000
    assert len(pickle.dumps(state)) <= 4096 + 16 * 1000
    assert [state[k].dtype for k in ("episode", "played", "clip")] == [
        torch.int64,
        torch.int32,
        torch.int32,
    ]


def test_a_state_of_other_packs_weights_or_num_envs_is_refused(clips, stills):
    bg = mixshard.Backgrounds([clips, stills], 4, weights=[1, 1])
    state = bg.state_dict()
    with pytest.raises(ValueError) as info:
        mixshard.Backgrounds([clips, stills], 5, weights=[1, 1]).load_state_dict(state)
    assert str(info.value).startswith("state_dict was saved with num_envs=4, this Backgrounds has")
    with pytest.raises(ValueError, match=r"saved with packs \[\[21, 6\], \[5, 5\]\]"):
        mixshard.Backgrounds([clips, clips], 4, weights=[1, 1]).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with other weights= or schedule="):
        mixshard.Backgrounds([clips, stills], 4, weights=[1, 2]).load_state_dict(state)
    with pytest.raises(ValueError, match="without weights=, schedule= or limit="):
        bg.load_state_dict(mixshard.Backgrounds(clips, 4).state_dict())
    with pytest.raises(ValueError, match="unknown keys"):
        mixshard.Backgrounds(clips, 4).load_state_dict(state)
    before = bg.clip.clone()
    bad = {**state, "clip": torch.full((4,), 99, dtype=torch.int32)}
    with pytest.raises(ValueError, match=r"state\['clip'\] must be clip numbers in \[0, 11\)"):
        bg.load_state_dict(bad)
    assert torch.equal(bg.clip, before)


def test_bad_mixes_are_named(clips, stills, tmp_path):
    mixshard.pack(stills.parent / "src", tmp_path / "big", size=12, workers=1, labels="none")
    with pytest.raises(ValueError) as info:
        mixshard.Backgrounds([clips, tmp_path / "big"], 4, weights=[1, 1])
    assert "pack 0 (" in str(info.value) and "is 8 px, pack 1 (" in str(info.value)
    assert str(info.value).endswith(
        "is 12 px: repack it at 8 px (`mixshard pack SRC OUT --size 8`)"
    )
    with pytest.raises(ValueError, match=r"weights\[1\] must be >= 0, got -1"):
        mixshard.Backgrounds([clips, stills], 4, weights=[1, -1])
    with pytest.raises(ValueError, match="clip_order='next' plays one pack's clips in turn"):
        mixshard.Backgrounds([clips, stills], 4, weights=[1, 1], clip_order="next")
    with pytest.raises(TypeError, match="with weights= the source must be a list of packs"):
        mixshard.Backgrounds(clips, 4, weights=[1])
    with pytest.raises(ValueError, match="set_weights: this Backgrounds was made without"):
        mixshard.Backgrounds(clips, 4).set_weights([1])
    with pytest.raises(ValueError, match="schedule steps must increase"):
        mixshard.Backgrounds([clips, stills], 4, schedule=[(5, [1, 0]), (2, [0, 1])])


@pytest.mark.cuda
def test_cuda_mixes_as_the_cpu_does_and_resumes(clips, stills):
    kw = dict(weights=[0.6, 0.4], playback="pingpong", flip=True, seed=3)
    cpu = mixshard.Backgrounds([clips, stills], 16, **kw)
    gpu = mixshard.Backgrounds([clips, stills], 16, device="cuda", **kw)
    assert torch.equal(torch.cat(run(cpu, 40)), torch.cat(run(gpu, 40)).cpu())
    state = gpu.state_dict()
    again = mixshard.Backgrounds([clips, stills], 16, device="cuda", **kw)
    again.load_state_dict(state)
    assert torch.equal(torch.cat(run(again, 30, 40)), torch.cat(run(gpu, 30, 40)))

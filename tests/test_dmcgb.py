"""`mixshard.compat.VideoWrapper`: DMC-GB's video evaluation from a clip pack (issue 39):
its clip order, its frame per step, its green screen, its errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from clipdata import make_video

import mixshard
from mixshard import masks
from mixshard.compat import VideoWrapper
from mixshard.reading.source import resolve_source

FRAMES = (3, 5, 4, 6, 3, 4, 5, 3, 4, 5)  # of video0 ... video9
SIZE = 16


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """`$MIXSHARD_DATA` with a `dmcgb-video_easy` clip pack of ten short videos."""
    root = tmp_path_factory.mktemp("dmcgb")
    for i, n in enumerate(FRAMES):
        make_video(root / "video_easy" / f"video{i}.mp4", clip=i % 3, frames=n)
    mixshard.pack(
        root / "video_easy", root / "data" / "dmcgb-video_easy", clips=True, crop="full",
        size=SIZE, workers=1,
    )  # fmt: skip
    return root / "data"


class GreenEnv:
    """A stand-in for dmc2gym's env: `(3, H, W)` uint8 frames, the top half DMC-GB's green
    sky, the bottom half a red agent; `step` returns the same frame with a counter."""

    _max_episode_steps = 7

    def __init__(self, size: int = SIZE) -> None:
        self.frame = np.zeros((3, size, size), np.uint8)
        self.frame[1, : size // 2] = 200  # green: replaced
        self.frame[0, size // 2 :] = 180  # red: kept
        self.steps = 0
        self.observation_space = "box"

    def reset(self) -> np.ndarray:
        self.steps = 0
        return self.frame.copy()

    def step(self, action):
        self.steps += 1
        return self.frame.copy(), 1.0, False, {"step": self.steps}


def pack_frames(data: Path) -> list[np.ndarray]:
    """Each clip's frames `(n, 3, S, S)`, in the pack's clip order (video0 ... video9)."""
    source = resolve_source(data / "dmcgb-video_easy")
    images = np.concatenate([b.numpy() for b in mixshard.ShardStream(source, 1, shuffle=False)])
    return [images[c.start : c.start + c.count] for c in source.manifest.clips]


def expected(obs: np.ndarray, bg: np.ndarray) -> np.ndarray:
    keep = masks.green_screen(torch.from_numpy(obs)[None])[0, 0].numpy()
    return np.where(keep[None], obs, bg)


def test_it_plays_dmcgbs_clips_in_order_a_frame_per_step(data, monkeypatch):
    monkeypatch.setenv("MIXSHARD_DATA", str(data))
    clips = pack_frames(data)
    env = VideoWrapper(GreenEnv(), "video_easy", seed=0)
    assert env._max_episode_steps == 7 and env.observation_space == "box"  # passed through
    for episode in range(12):  # the first reset plays clip 1, then 2, ..., 9, 0, 1, 2
        clip = clips[(episode + 1) % 10]
        obs = env.reset()
        assert np.array_equal(obs, expected(GreenEnv().frame, clip[0]))
        for t in range(1, 8):
            obs, reward, done, info = env.step(0)
            assert (reward, done, info) == (1.0, False, {"step": t})
            assert np.array_equal(obs, expected(GreenEnv().frame, clip[t % len(clip)]))
    assert np.array_equal(obs[:, SIZE // 2 :], GreenEnv().frame[:, SIZE // 2 :])  # agent kept
    assert not np.array_equal(obs[:, : SIZE // 2], GreenEnv().frame[:, : SIZE // 2])
    # apply_to, channels last as DMC-GB's
    last = GreenEnv().frame.transpose(1, 2, 0).copy()
    got = env.apply_to(last)
    assert np.array_equal(got.transpose(2, 0, 1), expected(GreenEnv().frame, clip[7 % len(clip)]))


def test_observations_of_another_size_get_dmcgbs_resize(data, monkeypatch):
    monkeypatch.setenv("MIXSHARD_DATA", str(data))
    clip = pack_frames(data)[1]
    env = VideoWrapper(GreenEnv(size=24), "video_easy", seed=0)
    obs = env.reset()
    bg = F.interpolate(
        torch.from_numpy(clip[0]).float()[None] / 255.0, size=(24, 24), mode="bilinear",
        align_corners=False,
    )  # fmt: skip
    bg = (bg * 255.0).byte()[0].numpy()
    assert np.array_equal(obs, expected(GreenEnv(size=24).frame, bg))


def test_other_modes_pass_through_and_bad_setups_are_named(data, tmp_path, monkeypatch):
    monkeypatch.setenv("MIXSHARD_DATA", str(data))
    env = VideoWrapper(GreenEnv(), "train", seed=0)
    assert np.array_equal(env.reset(), GreenEnv().frame)
    with pytest.raises(mixshard.MixshardError) as err:
        VideoWrapper(GreenEnv(), "video_hard", seed=0)
    assert "no packed dataset 'dmcgb-video_hard'" in str(err.value)
    assert "`make dmcgb-videos SRC=<DMC-GB checkout>/src/env/data DATA=" in str(err.value)
    with pytest.raises(ValueError, match='received unknown mode "video_medium"'):
        VideoWrapper(GreenEnv(), "video_medium", seed=0)
    short = tmp_path / "short"
    for i in range(9):  # video9 missing
        make_video(tmp_path / "videos" / f"video{i}.mp4", clip=0, frames=2)
    mixshard.pack(tmp_path / "videos", short / "dmcgb-video_easy", clips=True, size=8, workers=1)
    monkeypatch.setenv("MIXSHARD_DATA", str(short))
    with pytest.raises(mixshard.MixshardError, match="holds 9 clips but lacks 1 of the 10 of"):
        VideoWrapper(GreenEnv(), "video_easy", seed=0)
    monkeypatch.setenv("MIXSHARD_DATA", str(data))
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        VideoWrapper(GreenEnv(), "video_easy", seed=0).step(0)


def test_observations_that_are_not_uint8_are_refused_as_dmcgb_refuses_them(data, monkeypatch):
    # DMC-GB's do_green_screen asserts uint8 frames; an int32 frame above 255 was numpy's
    # IndexError (past the colour table), a float one below 0 keyed from the table's end
    monkeypatch.setenv("MIXSHARD_DATA", str(data))
    env = VideoWrapper(GreenEnv(), "video_easy", seed=0)
    env.reset()
    frame = GreenEnv().frame
    bad = [frame.astype(np.int32) + 256, frame.astype(np.float32) - 1, frame.astype(np.int32)]
    for obs in bad:
        env.env.frame = obs
        with pytest.raises(TypeError) as err:
            env.step(0)
        assert str(err.value) == (
            "obs must be a (3, H, W) uint8 numpy array, as DMC-GB's do_green_screen takes, got "
            f"{obs.dtype}: convert it with np.clip(obs, 0, 255).astype(np.uint8)"
        )
        with pytest.raises(TypeError, match=f"got {obs.dtype}: convert it"):
            env.apply_to(obs.transpose(1, 2, 0))
    with pytest.raises(
        ValueError, match=r"obs must be a \(3, H, W\) uint8 frame, got shape \(4, 16"
    ):
        env.apply_to(np.zeros((4, SIZE, SIZE), np.uint8))
    env.env.frame = frame  # uint8 again: as before (the refused steps counted, as DMC-GB's)
    assert np.array_equal(env.step(0)[0], expected(frame, pack_frames(data)[1][4]))
    passthrough = VideoWrapper(GreenEnv(), "train", seed=0)  # no green screen: no check
    passthrough.env.frame = bad[0]
    assert passthrough.reset() is not None and passthrough.reset().dtype == np.int32

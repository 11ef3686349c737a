"""`mixshard.compat.VideoWrapper`: DMC-GB's video evaluation from a clip pack (issues 39, 48):
its clip order, its frame per step, its green screen, its resize, its errors."""

from __future__ import annotations

import types
from pathlib import Path

import av
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from clipdata import make_video
from PIL import Image

import mixshard
from mixshard import masks
from mixshard.compat import VideoWrapper
from mixshard.reading.source import resolve_source

FRAMES = (3, 5, 4, 6, 3, 4, 5, 3, 4, 5)  # of video0 ... video9
SIZE = 16
NO_AA = "bilinear-no-antialias"  # `make dmcgb-videos`' resize: DMC-GB's F.interpolate


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """`$MIXSHARD_DATA` with a `dmcgb-video_easy` clip pack of ten short videos."""
    root = tmp_path_factory.mktemp("dmcgb")
    for i, n in enumerate(FRAMES):
        make_video(root / "video_easy" / f"video{i}.mp4", clip=i % 3, frames=n)
    mixshard.pack(
        root / "video_easy", root / "data" / "dmcgb-video_easy", clips=True, crop="full",
        size=SIZE, workers=1, resample=NO_AA,
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


def test_a_pack_of_another_size_than_the_observations_is_named_with_both(data, monkeypatch):
    monkeypatch.setenv("MIXSHARD_DATA", str(data))
    want = (
        f"{data / 'dmcgb-video_easy'} holds 16x16 frames, the observations are 24x24: pack "
        "DMC-GB's videos at the observations' size (`make dmcgb-videos ... SIZE=24`, into "
        "<dataset>-24); DMC-GB resizes each decoded frame once, to the observation"
    )
    spaced = GreenEnv(size=24)
    spaced.observation_space = types.SimpleNamespace(shape=(3, 24, 24))  # dmc2gym's Box
    with pytest.raises(mixshard.MixshardError) as err:  # before the first episode
        VideoWrapper(spaced, "video_easy", seed=0)
    assert str(err.value) == want
    env = VideoWrapper(GreenEnv(size=24), "video_easy", seed=0)  # no shape: at the first frame
    with pytest.raises(mixshard.MixshardError) as err:
        env.reset()
    assert str(err.value) == want


def noise_video(path: Path, frames: int, width: int, height: int) -> None:
    """An H.264 clip of random pixels: the worst case for a resize's rounding."""
    rng = np.random.default_rng(11)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for _ in range(frames):
            rgb = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def dmcgb_background(rgb: np.ndarray, size: int) -> np.ndarray:
    """DMC-GB's `_interpolate_bg` of a decoded frame (HWC): 0..1 floats, F.interpolate,
    times 255, truncated."""
    bg = torch.from_numpy(rgb.transpose(2, 0, 1).copy()).float().unsqueeze(0) / 255.0
    bg = F.interpolate(bg, size=(size, size), mode="bilinear", align_corners=False)
    return (bg * 255.0).byte().squeeze(0).numpy()


def test_the_background_is_dmcgbs_resize_of_the_decoded_frame_within_a_level(tmp_path, monkeypatch):
    """A sized pack (`dmcgb-video_easy-40`) for 40 px observations, found by the
    observation space's shape; an all-green observation shows the whole background."""
    for i in range(10):
        noise_video(tmp_path / "videos" / f"video{i}.mp4", 3, 120, 90)
    out = tmp_path / "data" / "dmcgb-video_easy-40"
    mixshard.pack(tmp_path / "videos", out, clips=True, crop="full", size=40, workers=1,
                  resample=NO_AA)  # fmt: skip
    monkeypatch.setenv("MIXSHARD_DATA", str(tmp_path / "data"))
    env = GreenEnv(size=40)
    env.frame[...] = np.array([51, 204, 51], np.uint8)[:, None, None]  # DMC-GB's green sky
    env.observation_space = types.SimpleNamespace(shape=(3, 40, 40))
    wrapper = VideoWrapper(env, "video_easy", seed=0)
    with av.open(str(tmp_path / "videos/video1.mp4")) as c:  # the first reset's clip
        decoded = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    shown = [wrapper.reset()] + [wrapper.step(0)[0] for _ in range(2)]
    for t, obs in enumerate(shown):
        diff = np.abs(obs.astype(int) - dmcgb_background(decoded[t], 40))
        assert diff.max() <= 1, t  # rounded here, truncated there
        assert (diff == 0).mean() > 0.3  # not a constant offset either


def test_a_pack_resized_by_pils_filter_plays_with_a_warning(tmp_path, monkeypatch):
    for i in range(10):
        make_video(tmp_path / "videos" / f"video{i}.mp4", clip=0, frames=2)
    mixshard.pack(tmp_path / "videos", tmp_path / "d" / "dmcgb-video_easy", clips=True,
                  crop="full", size=SIZE, workers=1)  # fmt: skip
    monkeypatch.setenv("MIXSHARD_DATA", str(tmp_path / "d"))
    with pytest.warns(RuntimeWarning) as caught:
        VideoWrapper(GreenEnv(), "video_easy", seed=0)
    assert str(caught[0].message) == (
        f"{tmp_path / 'd' / 'dmcgb-video_easy'} was resized with 'bilinear', not DMC-GB's "
        "F.interpolate ('bilinear-no-antialias'): its frames differ from DMC-GB's by ~3 levels "
        "on average; pack it again with `make dmcgb-videos ... REPACK=1`"
    )


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
    mixshard.pack(tmp_path / "videos", short / "dmcgb-video_easy", clips=True, size=8, workers=1,
                  resample=NO_AA)  # fmt: skip
    monkeypatch.setenv("MIXSHARD_DATA", str(short))
    with pytest.raises(mixshard.MixshardError, match="holds 9 clips but lacks 1 of the 10 of"):
        VideoWrapper(GreenEnv(), "video_easy", seed=0)
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (20, 20), (0, 200, 0)).save(images / "a.png")
    mixshard.pack(images, tmp_path / "static" / "dmcgb-video_easy", size=SIZE, workers=1)
    monkeypatch.setenv("MIXSHARD_DATA", str(tmp_path / "static"))
    with pytest.raises(mixshard.ManifestError) as err:  # an image pack where clips are needed
        VideoWrapper(GreenEnv(), "video_easy", seed=0)
    assert str(err.value) == (
        f"{tmp_path / 'static' / 'dmcgb-video_easy'} is an image pack, not a clip pack; pack "
        "the 'dmcgb-video_easy' videos with clips=True"
    )
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


def test_a_damaged_block_raises_and_a_pack_opened_to_skip_plays_on(data, tmp_path, monkeypatch):
    """The default pack raises the damaged block's `ShardError`; one opened with
    `on_error="skip"` warns once and plays the clip, its unread frames as they were."""
    import shutil

    from mixshard.core import layout

    shutil.copytree(data, tmp_path / "data")
    folder = tmp_path / "data" / "dmcgb-video_easy"
    m = mixshard.Manifest.load(folder)
    first = m.clips[1].start  # the first reset plays clip 1
    starts = np.cumsum([0] + [b.count for s in m.shards for b in s.blocks])
    shard, block = [(s, b) for s in m.shards for b in s.blocks][
        int(np.searchsorted(starts, first, side="right")) - 1
    ]
    with open(folder / shard.name, "r+b") as f:
        f.seek(block.offset - layout.images_header_len(block.count, m.size))
        f.write(b"XXXX")
    monkeypatch.setenv("MIXSHARD_DATA", str(tmp_path / "data"))
    with pytest.raises(mixshard.ShardError, match=f"block {block.key}: "):
        VideoWrapper(GreenEnv(), "video_easy", seed=0).reset()
    env = VideoWrapper(GreenEnv(), "video_easy", seed=0)
    env._pack = env._source.open_pack("skip")
    with pytest.warns(RuntimeWarning, match=f"block {block.key}: "):
        obs = env.reset()
    assert obs.shape == (3, SIZE, SIZE) and len(env._frames) == FRAMES[1]
    assert env.step(0)[3] == {"step": 1}

"""`mixshard.dbc.RandomVideoSource`: DBC's natural-video background from a clip pack (issue 48):
its loading order and draws, its grey, its frame per observation, its mask, its errors."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from clipdata import VIDEOS, make_videos
from PIL import Image

import mixshard
from mixshard import composite, masks
from mixshard.dbc import RandomVideoSource
from mixshard.reading.source import resolve_source

NO_AA = "bilinear-no-antialias"
SIZE = 8


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    """Three short clips (`clipdata.VIDEOS`: 15, 12 and 20 frames) and their pack at 8 px."""
    root = tmp_path_factory.mktemp("dbc")
    make_videos(root / "kinetics")
    mixshard.pack(root / "kinetics", root / "data" / "dbc-video", clips=True, crop="full",
                  size=SIZE, workers=1, resample=NO_AA)  # fmt: skip
    return root


def files(videos: Path) -> list[str]:
    """DBC's `glob` of its resource_files, in the order a listing may give."""
    return [str(videos / "kinetics" / name) for name, _, _ in VIDEOS]


def clip_frames(videos: Path, grayscale: bool = True) -> dict[str, np.ndarray]:
    """Each file's packed frames as DBC keeps them: `(n, h, w, 1)` grey (PIL's "L") or RGB."""
    source = resolve_source(videos / "data" / "dbc-video")
    rgb = np.concatenate([b.numpy() for b in mixshard.ShardStream(source, 1, shuffle=False)])
    rgb = rgb.transpose(0, 2, 3, 1)
    out = {}
    for clip in source.manifest.clips or ():
        frames = rgb[clip.start : clip.start + clip.count]
        if grayscale:
            frames = np.stack([np.asarray(Image.fromarray(f).convert("L")) for f in frames])
            frames = frames[..., None]
        out[str(videos / "kinetics" / clip.name)] = frames
    return out


def dbc_order(filelist: list[str], total: int, frames: dict[str, np.ndarray]) -> np.ndarray:
    """DBC's `build_arr` with `total_frames` (its documented loop): shuffle whenever the list
    has been gone through, files from the second on, frames until `total`."""
    arr, file_i = [], 0
    while len(arr) < total:
        if file_i % len(filelist) == 0:
            random.shuffle(filelist)
        file_i += 1
        arr += list(frames[filelist[file_i % len(filelist)]][: total - len(arr)])
    return np.stack(arr)


@pytest.mark.parametrize("total", [40, 7, 100])
def test_it_loads_and_plays_dbcs_frames_with_dbcs_draws(videos, total):
    frames = clip_frames(videos)
    random.seed(3), np.random.seed(4)
    want_list = files(videos)
    want = dbc_order(want_list, total, frames)
    loc = np.random.randint(0, total)
    after = random.getstate(), np.random.get_state()[1].copy()
    random.seed(3), np.random.seed(4)
    given = files(videos)
    source = RandomVideoSource((SIZE, SIZE), given, total_frames=total, grayscale=True,
                               pack=videos / "data" / "dbc-video")  # fmt: skip
    assert given == want_list  # shuffled in place, as DBC's list is
    assert random.getstate() == after[0] and np.array_equal(np.random.get_state()[1], after[1])
    assert source.arr.shape == (total, SIZE, SIZE, 1) and np.array_equal(source.arr, want)
    for k in range(2 * total + 3):  # +1 an observation from the offset, wrapping
        img = source.get_image()
        assert img.dtype == np.float64 and img.shape == (SIZE, SIZE, 1)
        assert np.array_equal(img, want[(loc + k) % total]), k


def test_without_total_frames_every_frame_of_every_file_shuffled_once(videos, monkeypatch):
    monkeypatch.setenv("MIXSHARD_DATA", str(videos / "data"))  # the default pack
    frames = clip_frames(videos, grayscale=False)
    random.seed(9), np.random.seed(9)
    order = files(videos)
    random.shuffle(order)
    want = np.concatenate([frames[f] for f in order])
    loc = np.random.randint(0, len(want))
    random.seed(9), np.random.seed(9)
    source = RandomVideoSource((SIZE, SIZE), files(videos))
    assert source.total_frames == len(want) == 47
    assert source.arr.shape == (47, SIZE, SIZE, 3) and np.array_equal(source.arr, want)
    assert np.array_equal(source.get_image(), want[loc].astype(np.float64))


def test_the_observation_is_dbcs_blue_key_and_paste(videos):
    """dmc2gym's `_get_obs`: `obs[b > g and b > r] = bg[...]` on the rendered frame, against
    `masks.blue_dominant` and `composite`."""
    np.random.seed(0)
    source = RandomVideoSource((SIZE, SIZE), files(videos), 30, True,
                               pack=videos / "data" / "dbc-video")  # fmt: skip
    rng = np.random.default_rng(1)
    for _ in range(5):
        rendered = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
        rendered[:4, :, 2] = 255  # a blue sky on top
        bg = source.get_image()
        want = rendered.copy()
        mask = np.logical_and(want[:, :, 2] > want[:, :, 1], want[:, :, 2] > want[:, :, 0])
        want[mask] = bg[mask]
        obs = torch.from_numpy(rendered.transpose(2, 0, 1).copy())[None]
        keep = masks.blue_dominant(obs)
        assert np.array_equal(keep[0, 0].numpy(), ~mask)
        grey3 = torch.from_numpy(bg.astype(np.uint8).transpose(2, 0, 1)).expand(3, -1, -1)
        got = composite(obs, grey3[None].contiguous(), keep)
        assert np.array_equal(got[0].numpy().transpose(1, 2, 0), want)


def test_bad_packs_and_files_are_named(videos, tmp_path):
    pack = videos / "data" / "dbc-video"
    with pytest.raises(mixshard.MixshardError) as err:
        RandomVideoSource((84, 84), files(videos), 10, True, pack=pack)
    assert str(err.value) == (
        f"{pack} holds 8x8 frames, DBC's background is 84x84 (height x width): pack the "
        "videos at that size (--size 84)"
    )
    with pytest.raises(mixshard.MixshardError) as err:
        RandomVideoSource((8, 6), files(videos), 10, True, pack=pack)
    assert str(err.value).endswith(
        "is 8x6 (height x width): pack the videos at that size (--size 8); packs are square: "
        "observations must be too"
    )
    stray = str(tmp_path / "elsewhere" / "other.mp4")
    with pytest.raises(mixshard.MixshardError) as err:
        RandomVideoSource((SIZE, SIZE), files(videos) + [stray], 10, True, pack=pack)
    assert str(err.value) == (
        f"{pack} holds no clip for {stray}: pack the folder of DBC's resource_files (make "
        "dbc-videos SRC=<videos> ...)"
    )
    with pytest.raises(ValueError, match="filelist is empty: DBC's resource_files matched no"):
        RandomVideoSource((SIZE, SIZE), [], 10, True, pack=pack)
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (10, 10)).save(tmp_path / "imgs" / "a.png")
    mixshard.pack(tmp_path / "imgs", tmp_path / "images", size=SIZE, workers=1)
    with pytest.raises(mixshard.ManifestError) as err:
        RandomVideoSource((SIZE, SIZE), files(videos), 10, True, pack=tmp_path / "images")
    assert str(err.value) == (
        f"{tmp_path / 'images'} is an image pack, not a clip pack; pack DBC's videos with "
        "clips=True (make dbc-videos SRC=<videos> ...)"
    )


def test_a_pack_without_every_frame_is_refused_and_pils_filter_warned(videos, tmp_path):
    short = tmp_path / "short"
    mixshard.pack(videos / "kinetics", short, clips=True, crop="full", size=SIZE, workers=1,
                  resample=NO_AA, max_frames=5)  # fmt: skip
    with pytest.raises(mixshard.MixshardError) as err:
        RandomVideoSource((SIZE, SIZE), files(videos), 10, True, pack=short)
    assert str(err.value) == (
        f"{short} was packed with every=1, max_frames=5: DBC reads every frame of each video; "
        "pack them all (no --every, --max-frames)"
    )
    pil = tmp_path / "pil"
    mixshard.pack(videos / "kinetics", pil, clips=True, crop="full", size=SIZE, workers=1)
    with pytest.warns(RuntimeWarning) as caught:
        RandomVideoSource((SIZE, SIZE), files(videos), 10, True, pack=pil)
    assert str(caught[0].message) == (
        f"{pil} was resized with 'bilinear', not cv2.resize's bilinear ('bilinear-no-antialias', "
        "as DBC resizes): pack it again with --resample bilinear-no-antialias"
    )


def test_a_grey_pack_holds_ffmpegs_grey_resized_and_is_played_as_it_is(tmp_path):
    """`make dbc-videos` packs `--grey`: FFmpeg's grey of each decoded frame (what DBC's
    `-pix_fmt gray` reads), resized as cv2.resize / F.interpolate resize, within a level."""
    import av

    rng = np.random.default_rng(2)
    path = tmp_path / "videos" / "noise.mp4"
    path.parent.mkdir()
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 96, 80, "yuv420p"
        for _ in range(4):
            rgb = rng.integers(0, 256, (80, 96, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    mixshard.pack(tmp_path / "videos", tmp_path / "grey", clips=True, crop="full", size=24,
                  workers=1, resample=NO_AA, grey=True)  # fmt: skip
    with av.open(str(path)) as c:
        decoded = [f.to_ndarray(format="gray") for f in c.decode(video=0)]
    np.random.seed(0)
    source = RandomVideoSource((24, 24), [str(path)], 4, True, pack=tmp_path / "grey")
    assert source.arr.shape == (4, 24, 24, 1)
    for t, g in enumerate(decoded):
        x = torch.from_numpy(g.astype(np.float32))[None, None]
        want = torch.nn.functional.interpolate(x, size=(24, 24), mode="bilinear",
                                               align_corners=False)  # fmt: skip
        want = (want[0, 0] + 0.5).floor().numpy()
        diff = np.abs(source.arr[t, ..., 0].astype(int) - want)
        # noise shrunk 4x: many sums at a half, where float32 rounding decides
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.95, t
    with pytest.raises(mixshard.MixshardError) as err:
        RandomVideoSource((24, 24), [str(path)], 4, False, pack=tmp_path / "grey")
    assert str(err.value) == (
        f"{tmp_path / 'grey'} holds grey frames (packed with grey=True) and grayscale=False asks "
        "for colour: pack the videos without --grey"
    )

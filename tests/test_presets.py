"""The benchmarks' clip lists (mixshard.core.presets), the check that a clip pack holds all of a
list's clips (named in the error when not), and the Makefile's video targets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mixshard.core.errors import ManifestError, SourceError
from mixshard.core.presets import CLIP_LISTS, check_clip_pack, clip_list, select_clips

ROOT = Path(__file__).resolve().parent.parent


def test_the_lists_are_the_benchmarks():
    train, val = clip_list("davis17-train"), clip_list("davis17-val")
    assert len(train) == 60 and len(val) == 30 and not set(train) & set(val)
    assert len(set(train)) == 60 and len(set(val)) == 30
    assert (train[0], train[-1], val[0], val[-1]) == ("bear", "walking", "bike-packing", "soapbox")
    assert clip_list("dmcgb-video_easy") == tuple(f"video{i}.mp4" for i in range(10))
    hard = clip_list("dmcgb-video_hard")
    assert len(hard) == 100 and hard[10] == "video10.mp4"  # DMC-GB's index order
    with pytest.raises(ValueError, match="clip list must be one of dmcgb-video_easy, .*; got 'x'"):
        clip_list("x")


def test_select_clips_in_the_lists_order_by_name_or_stem():
    found = [f"video{i}.mp4" for i in (0, 1, 10, 2, 3, 4, 5, 6, 7, 8, 9)]  # natural order
    assert select_clips("dmcgb-video_easy", found, "pack") == [0, 1, 3, 4, 5, 6, 7, 8, 9, 10]
    stems = [f"video{i}" for i in range(10)]
    assert select_clips("dmcgb-video_easy", stems, "pack") == list(range(10))
    davis = sorted(CLIP_LISTS["davis17-val"] + CLIP_LISTS["davis17-train"])
    picked = select_clips("davis17-val", davis, "DAVIS/JPEGImages/480p", SourceError)
    assert [davis[i] for i in picked] == list(CLIP_LISTS["davis17-val"])


def test_a_pack_with_fewer_clips_than_the_list_is_named_in_the_error():
    pack = SimpleNamespace(clips=[SimpleNamespace(name=f"video{i}.mp4") for i in range(10)])
    with pytest.raises(ManifestError) as err:
        check_clip_pack(pack, "data/dmcgb-video_hard", "dmcgb-video_hard")  # type: ignore[arg-type]
    assert str(err.value) == (
        "data/dmcgb-video_hard holds 10 clips but lacks 90 of the 100 of 'dmcgb-video_hard': "
        "video10.mp4, video11.mp4, video12.mp4, video13.mp4, video14.mp4, video15.mp4, "
        "video16.mp4, video17.mp4 and 82 more; pack it from a source that holds them all"
    )
    assert check_clip_pack(pack, "p", "dmcgb-video_easy") == list(range(10))  # type: ignore[arg-type]
    with pytest.raises(ManifestError, match="data/coco is an image pack, not a clip pack"):
        check_clip_pack(SimpleNamespace(clips=None), "data/coco", "davis17-val")  # type: ignore[arg-type]
    with pytest.raises(SourceError, match="SRC holds 2 clips but lacks 29 of the 30"):
        select_clips("davis17-val", ["bear", "dog"], "SRC", SourceError)


def test_check_clips_script_names_the_pack(tmp_path):
    script = str(ROOT / "scripts" / "check_clips.py")
    res = subprocess.run(
        [sys.executable, script, str(tmp_path / "nope"), "davis17-val"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 1 and res.stderr.startswith("Error: ")
    assert str(tmp_path / "nope") in res.stderr


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), *args, f"PY={sys.executable}", "STAMP=", "RUNTIME="],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_video_targets_say_what_src_must_hold(tmp_path):
    res = make("dmcgb-videos", f"SRC={tmp_path / 'nope'}", f"DATA={tmp_path / 'out'}")
    assert res.returncode != 0
    assert res.stderr.startswith(
        f"make dmcgb-videos: SRC={tmp_path / 'nope'} does not exist (from {ROOT}); give the "
        "path of DMC-GB's src/env/data folder (video_easy/, video_hard/)\n"
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "DAVIS").mkdir()
    res = make("dmcgb-videos", f"SRC={tmp_path / 'data'}", f"DATA={tmp_path / 'out'}")
    assert res.returncode != 0
    assert "SRC must be DMC-GB's src/env/data folder" in res.stdout
    assert "video_hard/video0.mp4 ... video99.mp4" in res.stdout
    res = make("davis", f"SRC={tmp_path / 'DAVIS'}", f"DATA={tmp_path / 'out'}")
    assert res.returncode != 0
    assert "SRC must be DAVIS 2017's trainval folder" in res.stdout
    assert "JPEGImages/480p/<clip>/00000.jpg" in res.stdout
    assert not (tmp_path / "out").exists()


def _video(path: Path, frames: int = 2) -> None:
    import av
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 16, 16, "yuv420p"
        for t in range(frames):
            rgb = np.full((16, 16, 3), 40 * t, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def test_dmcgb_videos_packs_both_sets_and_names_a_short_one(tmp_path):
    src = tmp_path / "data"
    for i in range(10):
        _video(src / "video_easy" / f"video{i}.mp4")
    for i in range(3):  # far fewer than DMC-GB's 100
        _video(src / "video_hard" / f"video{i}.mp4")
    res = make("dmcgb-videos", f"SRC={src}", f"DATA={tmp_path / 'out'}", "SIZE=8")
    from mixshard import Manifest

    easy = Manifest.load(tmp_path / "out" / "dmcgb-video_easy-8")
    assert easy.clips is not None and len(easy.clips) == 10 and easy.size == 8
    # resized as DMC-GB resizes (F.interpolate, the whole frame)
    assert (easy.options["resample"], easy.options["crop"]) == ("bilinear-no-antialias", "full")
    assert res.returncode != 0
    assert "dmcgb-video_hard-8 holds 3 clips but lacks 97 of the 100" in res.stderr


def test_dbc_videos_packs_every_frame_as_dbc_resizes(tmp_path):
    from mixshard import Manifest

    for name in ("a.mp4", "b.mp4"):
        _video(tmp_path / "kinetics" / name, frames=3)
    res = make("dbc-videos", f"SRC={tmp_path / 'kinetics'}", f"DATA={tmp_path / 'out'}", "SIZE=8")
    assert res.returncode == 0, res.stderr
    m = Manifest.load(tmp_path / "out" / "dbc-video-8")
    assert [(c.name, c.count) for c in m.clips or ()] == [("a.mp4", 3), ("b.mp4", 3)]
    o = m.options
    assert (o["resample"], o["crop"], o["every"], o["max_frames"], o["grey"], m.size) == (
        "bilinear-no-antialias",
        "full",
        1,
        None,
        True,
        8,
    )
    res = make("dbc-videos", f"DATA={tmp_path / 'out'}")
    assert res.returncode != 0
    assert "SRC must be the folder of DBC's natural videos" in res.stdout + res.stderr


def test_davis_packs_the_suites_two_lists(tmp_path):
    """The suite's training and validation lists as two packs, each in its list's order."""
    from PIL import Image

    from mixshard import Manifest

    frames = tmp_path / "DAVIS" / "JPEGImages" / "480p"
    for i, name in enumerate(CLIP_LISTS["davis17-train"] + CLIP_LISTS["davis17-val"] + ("x",)):
        (frames / name).mkdir(parents=True)
        Image.new("RGB", (24, 16), (i, 100, 50)).save(frames / name / "00000.jpg")
    res = make("davis", f"SRC={tmp_path / 'DAVIS'}", f"DATA={tmp_path / 'out'}", "SIZE=8")
    assert res.returncode == 0, res.stderr
    for split in ("davis17-train", "davis17-val"):
        clips = Manifest.load(tmp_path / "out" / f"{split}-8").clips
        assert clips is not None and [c.name for c in clips] == list(CLIP_LISTS[split])
    (frames / "dog" / "00000.jpg").unlink()
    (frames / "dog").rmdir()  # one validation clip gone: the source is named
    res = make("davis", f"SRC={tmp_path / 'DAVIS'}", f"DATA={tmp_path / 'out2'}", "SIZE=8")
    assert res.returncode != 0 and "lacks 1 of the 30 of 'davis17-val': dog" in res.stderr


def test_the_clip_lists_are_the_clip_list_choices_in_their_order():
    from mixshard.core.choices import ClipList, values

    assert tuple(CLIP_LISTS) == values(ClipList)

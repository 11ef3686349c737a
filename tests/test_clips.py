"""`pack --clips`: video files and frame folders (and archives of them) into clip packs (format
version 2): the clip table, play order, pixels, workers, resume, skipped videos, the options
that go with clips, and the read-only commands on a clip pack."""

from __future__ import annotations

import json
import os
import shutil
import signal

import numpy as np
import pytest
from clipdata import (
    FOLDERS,
    FPS,
    TOLERANCE,
    VIDEOS,
    colour,
    frame,
    make_frame_folders,
    make_video,
    make_videos,
    tar_of,
    zip_of,
)
from helpers import files, read_pack, run
from PIL import Image

from mixshard import pack
from mixshard.core import manifest as manifest_module
from mixshard.core.constants import JOURNAL_NAME
from mixshard.core.errors import ManifestError, SkippedImagesError, SourceError
from mixshard.core.manifest import Clip, Manifest
from mixshard.writing.pixels.image import frame_pixels, load_image

SIZE = 16
ARGS = dict(size=SIZE, shard_size=10, block_size=4, workers=1, clips=True)
CLI = ["--clips", "--size", SIZE, "--shard-size", 10, "--block-size", 4]
NATURAL = sorted(VIDEOS, key=lambda v: v[1])  # video1, video2, video10


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return make_videos(tmp_path_factory.mktemp("clips") / "videos")


@pytest.fixture(scope="module")
def video_pack(videos, tmp_path_factory):
    out = tmp_path_factory.mktemp("clips") / "pack"
    pack(videos, out, **ARGS)
    return out


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    return make_frame_folders(tmp_path_factory.mktemp("clips") / "JPEGImages" / "480p")


def test_video_clips_are_listed_in_natural_order_with_their_frames_and_fps(video_pack):
    m = Manifest.load(video_pack)
    assert m.version == 2
    starts = np.cumsum([0] + [n for _, _, n in NATURAL])
    assert m.clips == tuple(
        Clip(name, int(starts[k]), n, float(FPS)) for k, (name, _, n) in enumerate(NATURAL)
    )
    assert m.classes == ("video1.mp4", "video2.mp4", "video10.mp4")
    assert m.count == 47 and m.skipped == ()
    assert m.options["shuffle"] is False and m.options["every"] == 1
    doc = json.loads((video_pack / "index.json").read_text())
    assert doc["version"] == 2 and doc["clips"][2] == {
        "name": "video10.mp4", "start": 27, "count": 20, "fps": 10.0
    }  # fmt: skip


def test_video_frames_are_stored_in_play_order_resized_as_images(video_pack):
    images, labels, keys = read_pack(video_pack)
    m = Manifest.load(video_pack)
    for c, clip in enumerate(m.clips):
        assert (labels[clip.start : clip.start + clip.count] == c).all()
        for t in range(clip.count):
            want = frame_pixels(frame(c, t), SIZE, "center")[0].astype(int)
            got = images[clip.start + t].astype(int)
            assert np.abs(got - want).max() <= TOLERANCE, (clip.name, t)
        assert keys[clip.start : clip.start + 3] == [f"{clip.name}#{t}" for t in range(3)]
    # the colours themselves: frame t of clip c, not a neighbour (8 levels apart)
    assert abs(int(images[m.clips[2].start + 19, 0, 8, 8]) - colour(2, 19)[0]) <= TOLERANCE


def test_frame_folders_are_clips_stored_exactly_as_their_images(frames, tmp_path):
    out = tmp_path / "out"
    pack(frames, out, **ARGS)
    m = Manifest.load(out)
    order = sorted(FOLDERS, key=lambda f: f[1])  # bear, car2, car10
    assert [(c.name, c.count, c.fps) for c in m.clips] == [(n, k, 0.0) for n, _, k in order]
    images, labels, keys = read_pack(out)
    for clip in m.clips:
        for t in range(clip.count):
            path = frames / clip.name / f"{t:05d}.png"
            assert keys[clip.start + t] == f"{clip.name}/{t:05d}.png"
            assert (images[clip.start + t] == load_image(path, SIZE, "center")[0]).all()
    assert labels.tolist() == [c for c, clip in enumerate(m.clips) for _ in range(clip.count)]


def test_loose_images_and_nested_videos_are_reported_not_packed(frames, videos, tmp_path):
    src = shutil.copytree(frames, tmp_path / "src")
    shutil.copy(frames / "bear" / "00000.png", src / "loose.png")
    shutil.copy(videos / "video1.mp4", src / "bear" / "inside.mp4")
    pack(src, tmp_path / "out", **ARGS)
    skipped = Manifest.load(tmp_path / "out").skipped
    assert [s["path"] for s in skipped] == ["bear/inside.mp4", "loose.png"]
    assert "directly in SRC are clips" in skipped[0]["reason"]
    assert "a clip's frames go in a folder of their own" in skipped[1]["reason"]


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_archives_of_videos_and_of_frames_pack_as_their_folders(
    kind, videos, frames, video_pack, tmp_path
):
    make = tar_of if kind == "tar" else zip_of
    for src, top, ref in ((videos, "videos", video_pack), (frames, "480p", None)):
        archive = make(src, tmp_path / f"{top}.{kind}", top)
        if ref is None:
            ref = tmp_path / "ref-frames"
            pack(src, ref, **ARGS)
        out = tmp_path / f"out-{top}"
        pack(archive, out, **ARGS, within=top)
        assert files(out) == files(ref)
    with pytest.raises(SourceError, match="holds one folder, videos/"):
        pack(tmp_path / f"videos.{kind}", tmp_path / "nope", **ARGS)


def test_a_compressed_tar_is_refused_with_the_fix(videos, tmp_path):
    archive = tmp_path / "v.tar.gz"
    shutil.make_archive(str(tmp_path / "v"), "gztar", videos)
    with pytest.raises(SourceError, match=r"compressed.*decompress it first \(gunzip\)"):
        pack(archive, tmp_path / "out", **ARGS, within=".")
    assert not (tmp_path / "out").exists()


def test_the_pack_is_byte_identical_whatever_the_workers(videos, video_pack, tmp_path):
    for workers in (2, 3):
        out = tmp_path / f"w{workers}"
        pack(videos, out, **{**ARGS, "workers": workers})
        assert files(out) == files(video_pack), workers
    # one big shard: chunk tasks (not whole shards) on 3 workers, a clip per task
    one = tmp_path / "one"
    pack(videos, one, **{**ARGS, "shard_size": 100, "workers": 3})
    again = tmp_path / "one1"
    pack(videos, again, **{**ARGS, "shard_size": 100, "workers": 1})
    assert files(one) == files(again)
    assert read_pack(one)[0].tobytes() == read_pack(video_pack)[0].tobytes()


def test_a_killed_clip_pack_resumes_to_the_same_bytes(videos, video_pack, tmp_path):
    import subprocess
    import sys

    from test_resume import stop_after

    out = tmp_path / "out"
    argv = [sys.executable, "-m", "mixshard", "pack", str(videos), str(out), "--quiet"]
    argv += [str(a) for a in CLI] + ["--workers", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    try:
        os.killpg(proc.pid, signal.SIGSTOP)
        stop_after(proc, out, 2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert (out / JOURNAL_NAME).exists() and not (out / "index.json").exists()
    res = run("pack", videos, out, *CLI, "--workers", 2, "--resume")
    assert res.exit_code == 0, res.output
    assert "reused from earlier runs" in res.output
    assert files(out) == files(video_pack)


def test_every_and_max_frames_pick_frames_and_divide_the_rate(videos, tmp_path):
    out = tmp_path / "out"
    pack(videos, out, **ARGS, every=3, max_frames=5)
    m = Manifest.load(out)
    # video1 15 frames -> 0,3,6,9,12; video2 12 -> 0,3,6,9; video10 20 -> 0..12 (capped at 5)
    assert [(c.name, c.count) for c in m.clips] == [
        ("video1.mp4", 5), ("video2.mp4", 4), ("video10.mp4", 5)
    ]  # fmt: skip
    assert {c.fps for c in m.clips} == {round(FPS / 3, 6)}
    images, _, keys = read_pack(out)
    assert keys[5:9] == [f"video2.mp4#{t}" for t in (0, 3, 6, 9)]
    red = images[m.clips[1].start : m.clips[1].start + 4, 0, 8, 8].astype(int)
    assert np.abs(red - [colour(1, t)[0] for t in (0, 3, 6, 9)]).max() <= TOLERANCE
    assert m.options["every"] == 3 and m.options["max_frames"] == 5
    from mixshard.writing.pixels import video

    assert getattr(video._local, "open", None) is None  # each video closed after its last frame


def test_shuffled_clips_keep_their_frames_in_order(videos, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    pack(videos, a, **ARGS, shuffle_clips=True, seed=1)
    pack(videos, b, **ARGS, shuffle_clips=True, seed=1)
    assert files(a) == files(b)
    m = Manifest.load(a)
    assert [c.name for c in m.clips] == list(m.classes)
    assert [c.name for c in m.clips] != ["video1.mp4", "video2.mp4", "video10.mp4"]
    images, labels, _ = read_pack(a)
    number = {name: c for name, c, _ in VIDEOS}
    for k, clip in enumerate(m.clips):
        assert (labels[clip.start : clip.start + clip.count] == k).all()
        red = images[clip.start : clip.start + clip.count, 0, 8, 8].astype(int)
        want = [colour(number[clip.name], t)[0] for t in range(clip.count)]
        assert np.abs(red - want).max() <= TOLERANCE


@pytest.fixture
def bad_videos(videos, tmp_path):
    """The three good videos, a file of noise, and video1 cut short (its header intact)."""
    src = shutil.copytree(videos, tmp_path / "bad")
    (src / "noise.mp4").write_bytes(np.random.default_rng(0).bytes(3000))
    data = (videos / "video1.mp4").read_bytes()
    (src / "cut.mp4").write_bytes(data[: len(data) // 2])
    return src


def test_unreadable_and_cut_short_videos_are_skipped_and_named(bad_videos, video_pack, tmp_path):
    out = tmp_path / "out"
    res = run("pack", bad_videos, out, *CLI, "--workers", 1)
    assert res.exit_code == 0, res.output
    m = Manifest.load(out)
    assert [c.name for c in m.clips] == ["video1.mp4", "video2.mp4", "video10.mp4"]
    assert [s["path"] for s in m.skipped] == ["cut.mp4", "noise.mp4"]
    assert m.skipped[0]["reason"].startswith("truncated: its header lists 15 frames, the file")
    assert m.skipped[1]["reason"].startswith("not a video PyAV can read")
    assert "skipped: cut.mp4: truncated" in res.output
    summary = "Packed 3 clips (video1.mp4, video2.mp4, video10.mp4), 47 frames (2 skipped)"
    assert summary in res.output
    assert read_pack(out)[0].tobytes() == read_pack(video_pack)[0].tobytes()


def test_strict_fails_naming_the_bad_videos_and_leaves_no_pack(bad_videos, tmp_path):
    out = tmp_path / "out"
    res = run("pack", bad_videos, out, *CLI, "--workers", 1, "--strict")
    assert res.exit_code == 1
    assert res.output.startswith("Error: --strict: 2 file(s) could not be read: cut.mp4 (truncated")
    assert "noise.mp4 (not a video PyAV can read" in res.output
    assert "Traceback" not in res.output and not out.exists()
    with pytest.raises(SkippedImagesError, match="cut.mp4"):
        pack(bad_videos, out, **ARGS, strict=True)


def test_a_video_that_decodes_short_is_skipped_once_and_left_out_of_the_table(
    videos, tmp_path, monkeypatch
):
    """The plan counts 30 frames in video2 (its packets say 12): decoding runs out, and its
    frames are skipped with one entry; the table closes up, labels keep the clip's number."""
    from mixshard.writing.pixels.video import VideoInfo, probe_video
    from mixshard.writing.plan import clipsource

    def probe(file, progress=None):
        info = probe_video(file, progress)
        return VideoInfo(30, info.fps) if file.name.endswith("video2.mp4") else info

    monkeypatch.setattr(clipsource, "probe_video", probe)
    out = tmp_path / "out"
    pack(videos, out, **{**ARGS, "shard_size": 100})
    m = Manifest.load(out)
    assert m.skipped == (
        {"path": "video2.mp4", "reason": "30 frames not packed (frames 0-29): decodes to 12 "
         "frames, 30 expected (its packets)"},
    )  # fmt: skip
    assert m.clips == (Clip("video1.mp4", 0, 15, 10.0), Clip("video10.mp4", 15, 20, 10.0))
    assert m.classes == ("video1.mp4", "video2.mp4", "video10.mp4")
    assert read_pack(out)[1].tolist() == [0] * 15 + [2] * 20
    with pytest.raises(SkippedImagesError, match=r"video2.mp4 \(30 frames not packed"):
        pack(videos, tmp_path / "strict", **{**ARGS, "shard_size": 100}, strict=True)


def test_a_reader_of_version_1_only_refuses_a_clip_pack(video_pack, monkeypatch):
    monkeypatch.setattr(manifest_module, "READ_VERSIONS", (1,))
    with pytest.raises(ManifestError) as err:
        Manifest.load(video_pack)
    assert "is shard format version 2; this mixshard reads versions 1." in str(err.value)
    assert "install the mixshard that wrote it" in str(err.value)


def test_a_clip_table_that_does_not_cover_the_frames_is_refused(video_pack, tmp_path):
    doc = json.loads((video_pack / "index.json").read_text())
    doc["clips"][1]["start"] += 1
    with pytest.raises(ManifestError, match="clip 'video2.mp4' starts at 16, expected 15"):
        Manifest.from_dict(doc, "x/index.json")
    doc["clips"] = None
    with pytest.raises(ManifestError, match="clips are listed in version 2 packs"):
        Manifest.from_dict(doc, "x/index.json")


def test_verify_and_inspect_describe_a_clip_pack(video_pack):
    res = run("verify", video_pack, "--quiet")
    assert res.exit_code == 0 and res.output.startswith("OK: 5 shards, 47 images")
    res = run("inspect", video_pack)
    assert res.exit_code == 0
    assert "(mixshard format v2)" in res.output
    assert (
        "clips:    3 (47 frames, 12-20 a clip, 10 fps): video1.mp4, video2.mp4, video10.mp4\n"
        in res.output
    )
    summary = json.loads(run("inspect", video_pack, "--json").output)
    assert summary["clips"] == 3 and summary["clip_frames"] == [15, 12, 20]
    assert summary["clip_names"] == ["video1.mp4", "video2.mp4", "video10.mp4"]
    assert summary["fps"] == [10.0] and summary["version"] == 2


def test_preview_draws_a_strip_of_evenly_spaced_frames_per_clip(video_pack, tmp_path):
    from mixshard.cli.sheet import GAP, LABEL_HEIGHT

    png = tmp_path / "p.png"
    res = run("preview", video_pack, "-o", png)
    assert res.exit_code == 0 and "24 images" in res.output
    grid = np.asarray(Image.open(png).convert("RGB")).astype(int)
    tile = SIZE * 6  # tiles at least 96 px
    row_h = LABEL_HEIGHT + tile + GAP
    assert grid.shape == (GAP + 3 * row_h, GAP + 8 * (tile + GAP), 3)
    m = Manifest.load(video_pack)
    for r, clip in enumerate(m.clips):
        c = dict((n, k) for n, k, _ in VIDEOS)[clip.name]
        for col, t in enumerate(np.linspace(0, clip.count - 1, 8).round().astype(int)):
            y = GAP + r * row_h + LABEL_HEIGHT + tile // 2
            x = GAP + col * (tile + GAP) + tile // 2
            assert abs(grid[y, x, 0] - colour(c, t)[0]) <= TOLERANCE, (clip.name, t)
    res = run("preview", video_pack, "-o", png, "-n", 8, "--seed", 2)
    assert res.exit_code == 0 and "8 images" in res.output
    assert Image.open(png).size[1] == GAP + row_h  # one clip's strip


def test_clip_flags_that_do_not_go_together_are_refused(videos, tmp_path):
    out = tmp_path / "out"
    res = run("pack", videos, out, "--clips", "--crop", "random")
    assert res.exit_code == 2 and "--clips takes --crop center or --crop full" in res.output
    res = run("pack", videos, out, "--every", 2)
    assert res.exit_code == 2 and "--every applies to clip packs only: add --clips" in res.output
    res = run("pack", videos, out, "--clips", "--labels", "none")
    assert res.exit_code == 2 and "--labels does not apply to --clips" in res.output
    with pytest.raises(ValueError, match="crop='center' or crop='full'"):
        pack(videos, out, clips=True, crop="random")
    with pytest.raises(
        ValueError, match="every, max_frames, shuffle_clips and clip_list apply to clips"
    ):
        pack(videos, out, max_frames=3)
    assert not out.exists()


def test_a_folder_without_clips_says_what_a_clip_pack_is_made_of(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "notes.txt").write_text("x")
    res = run("pack", tmp_path / "src", tmp_path / "out", "--clips")
    assert res.exit_code == 1
    assert "no clips found in" in res.output and ".mp4, .webm, .mkv, .avi, .mov" in res.output


def test_other_containers_pack_too(tmp_path):
    """A webm (VP9) and an mkv: no frame count in their headers, counted from their packets."""
    import av

    src = tmp_path / "src"
    src.mkdir()
    for name, codec in (("a.webm", "libvpx-vp9"), ("b.mkv", "mpeg4")):
        with av.open(str(src / name), "w") as container:
            stream = container.add_stream(codec, rate=FPS)
            stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
            for t in range(6):
                image = av.VideoFrame.from_ndarray(frame(0, t), format="rgb24")
                for packet in stream.encode(image):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
    pack(src, tmp_path / "out", **ARGS)
    m = Manifest.load(tmp_path / "out")
    assert [(c.name, c.count) for c in m.clips] == [("a.webm", 6), ("b.mkv", 6)]
    red = read_pack(tmp_path / "out")[0][:, 0, 8, 8].astype(int)
    assert np.abs(red - [colour(0, t)[0] for t in range(6)] * 2).max() <= 2 * TOLERANCE


def test_a_clip_pack_goes_into_an_object_store_as_into_a_folder(
    videos, video_pack, s3_bucket, tmp_path, monkeypatch
):
    from mixshard.core.stores import Store
    from mixshard.writing.out import storeout

    monkeypatch.setenv(storeout.STAGING_ENV, str(tmp_path / "staging"))
    url = s3_bucket + "/clips"
    pack(videos, url, **ARGS)
    store, copy = Store(url), tmp_path / "copy"
    copy.mkdir()
    for name in store.listing():
        (copy / name).write_bytes(store.read(name))
    assert files(copy) == files(video_pack)
    res = run("inspect", url)
    assert res.exit_code == 0 and "clips:    3 (47 frames" in res.output


def test_make_video_helper_writes_what_it_says(tmp_path):
    """The test data itself: a video of 5 frames decodes to 5 frames of the right colours."""
    import av

    path = make_video(tmp_path / "v.mp4", 1, 5)
    with av.open(str(path)) as container:
        got = [f.to_ndarray(format="rgb24")[10, 10].astype(int) for f in container.decode(video=0)]
    assert len(got) == 5
    assert np.abs(np.array(got) - [colour(1, t) for t in range(5)]).max() <= TOLERANCE


def test_the_readme_clip_commands(videos, frames, tmp_path, monkeypatch):
    """The README's `--clips` example, and a DAVIS-like zip with --within and --every."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(videos, "video_hard")
    zip_of(frames, tmp_path / "DAVIS-2017-trainval-480p.zip", "DAVIS/JPEGImages/480p")
    res = run("pack", "video_hard", "data/video_hard", "--clips", "--workers", 1)
    assert res.exit_code == 0
    assert "Packed 3 clips (video1.mp4, video2.mp4, video10.mp4)" in res.output
    res = run("pack", "DAVIS-2017-trainval-480p.zip", "data/davis", "--clips",
              "--within", "DAVIS/JPEGImages/480p", "--every", 2, "--workers", 1)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert [c.count for c in Manifest.load("data/davis").clips] == [4, 3, 3]  # of 7, 6, 5
    res = run("preview", "data/video_hard", "-o", "clips.png")
    assert res.exit_code == 0 and Image.open("clips.png").size[0] > 0


def test_a_source_one_level_above_its_frame_folders_names_the_folder_to_pack(frames, tmp_path):
    """DAVIS's JPEGImages given instead of JPEGImages/480p; and a clip with a subfolder."""
    res = run("pack", frames.parent, tmp_path / "out", "--clips")
    assert res.exit_code == 1
    assert "but folders of frames one level down (480p/bear/, ...): pack its folder 480p/" in (
        res.output
    )
    src = shutil.copytree(frames, tmp_path / "src")
    shutil.copytree(frames / "car2", src / "bear" / "extra")
    pack(src, tmp_path / "out", **ARGS)
    m = Manifest.load(tmp_path / "out")
    assert [(c.name, c.count) for c in m.clips] == [("bear", 7), ("car2", 6), ("car10", 5)]
    assert len(m.skipped) == 6 and m.skipped[0]["path"] == "bear/extra/00000.png"
    assert m.skipped[0]["reason"].endswith("lie directly in it (bear/extra/)")


def test_job_array_parts_then_finish_give_the_same_clip_pack(videos, video_pack, tmp_path):
    out = tmp_path / "out"
    for k in (1, 0):
        pack(videos, out, **ARGS, part=(k, 2))
    assert not (out / "index.json").exists()
    pack(videos, out, **ARGS, finish=True)
    assert files(out) == files(video_pack)


def test_a_resumed_clip_pack_stamps_each_video_once_and_redoes_a_changed_one(
    videos, video_pack, tmp_path
):
    from mixshard.writing.out.shardwrite import plan_stamps
    from mixshard.writing.plan.clipplan import plan_clips
    from mixshard.writing.plan.options import ClipOptions, PackOptions

    options = PackOptions(size=SIZE, crop="center", variants=1, shard_size=10, block_size=4,
                          seed=0, shuffle=False, clips=ClipOptions())  # fmt: skip
    plan = plan_clips(videos, None, options)
    # shard 1: frames 10-19 = video1 #10-14, video2 #0-4
    assert plan.source_files(1) == (("video1.mp4", 0), ("video2.mp4", 1))
    sizes = [s[0] for s in plan_stamps(plan, 1)]
    assert sizes == [(videos / n).stat().st_size for n in ("video1.mp4", "video2.mp4")]
    src, out = shutil.copytree(videos, tmp_path / "src"), tmp_path / "out"
    pack(src, out, **ARGS, part=(0, 2))  # shards 0, 2, 4 written
    os.utime(src / "video1.mp4", ns=(1, 1))  # video1 (shards 0 and 1) changed since
    result = pack(src, out, **ARGS, resume=True)
    assert (result.reused_shards, result.written_shards, result.rewritten_shards) == (2, 3, 1)
    assert files(out) == files(video_pack)

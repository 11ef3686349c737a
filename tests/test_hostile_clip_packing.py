"""Issue 46, the packing side: videos over 1 MB in archives, frames over the pixel limit, a
probe's byte and time budget and its progress, an unknown clip list, names that would forge
output lines, a Ctrl-C in a pack's last moments, a dangling OUT link, a file that vanishes."""

from __future__ import annotations

import fractions
import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import av
import numpy as np
import pytest
from clipdata import frame, make_video, tar_of, zip_of
from helpers import files, make_tree, on_terminal, run
from PIL import Image

from mixshard import pack
from mixshard.core.manifest import Manifest
from mixshard.writing.pixels import video, videofile

ROOT = Path(__file__).resolve().parent.parent
ARGS = dict(size=8, shard_size=100, block_size=4, workers=1, clips=True)
VANISHED = "vanished during the pack: it was listed when the pack began, and is gone now"


def noise_video(path: Path, frames: int = 24, side: int = 192) -> Path:
    """A lossless H.264 mp4 of noise: over 1 MB in a fraction of a second."""
    rng = np.random.default_rng(1)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10, options={"crf": "0"})
        stream.width = stream.height = side
        stream.pix_fmt = "yuv420p"
        for _ in range(frames):
            pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def mkv(path: Path, frames: int = 3) -> Path:
    """A small H.264 .mkv of `frames` frames."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for t in range(frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame(0, t), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def padded(path: Path, zeros: int) -> Path:
    """`mkv(path)` followed by `zeros` bytes of zeros (a sparse tail: no disk)."""
    mkv(path)
    os.truncate(path, path.stat().st_size + zeros)
    return path


# --- point 2: a video over 1 MB inside a .tar or .zip ---


def test_a_video_over_1_mb_in_an_archive_packs_as_from_its_folder(tmp_path):
    """The archive reader judged members over 1 MB by an image's first bytes: a 1.3 MB video
    in a .tar or .zip was skipped as "not an image PIL can read". Each archive (a stored and a
    deflated zip member among them) now gives the folder's pack, byte for byte."""
    src = tmp_path / "videos"
    src.mkdir()
    assert noise_video(src / "noise.mp4").stat().st_size > 1 << 20
    make_video(src / "small.mp4", 0, 5)
    ref = tmp_path / "ref"
    pack(src, ref, **ARGS)
    assert [c.name for c in Manifest.load(ref).clips] == ["noise.mp4", "small.mp4"]
    deflated = tmp_path / "deflated.zip"
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(src.iterdir()):
            zf.write(p, f"v/{p.name}")
    archives = [tar_of(src, tmp_path / "v.tar", "v"), zip_of(src, tmp_path / "v.zip", "v")]
    for i, archive in enumerate([*archives, deflated]):
        out = tmp_path / f"out{i}"
        pack(archive, out, **ARGS, within="v")
        assert Manifest.load(out).skipped == (), archive.name
        assert files(out) == files(ref), archive.name


# --- point 3: one pixel limit for images and frames ---


def test_video_frames_over_the_pixel_limit_are_refused_before_any_is_decoded(tmp_path, monkeypatch):
    """A 64x48 video under a limit of 3071 pixels (PIL's, as for an image): skipped at plan
    time from its declared size, in a folder and in a .tar alike; no decoder is made."""
    src = tmp_path / "videos"
    make_video(src / "a.mp4", 0, 4)
    make_video(src / "b.mp4", 1, 3)
    tar_of(src, tmp_path / "v.tar", "v")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 64 * 48 - 1)
    decoders = []
    monkeypatch.setattr(video, "_Decoding", lambda *a: decoders.append(a))
    reason = (
        "decompression bomb: 64x48 = 3072 pixels exceeds PIL's limit of 3071 "
        "(PIL.Image.MAX_IMAGE_PIXELS)"
    )
    for i, source in enumerate([src, tmp_path / "v.tar"]):
        with pytest.raises(Exception, match="no readable clip") as info:
            pack(source, tmp_path / f"out{i}", **ARGS, within="v" if i else None)
        assert f"(first: a.mp4: {reason})" in str(info.value)
    assert decoders == []


def mjpeg_growing(path: Path) -> Path:
    """An MJPEG .mkv declared 64x48 whose third frame is 128x96."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mjpeg", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuvj420p"
        for t, (w, h) in enumerate([(64, 48), (64, 48), (128, 96)]):
            data = io.BytesIO()
            Image.fromarray(np.full((h, w, 3), 40 * t, np.uint8)).save(data, "JPEG")
            packet = av.Packet(data.getvalue())
            packet.stream, packet.pts, packet.dts = stream, t, t
            packet.time_base = fractions.Fraction(1, 10)
            container.mux(packet)
    return path


def test_a_frame_larger_than_its_stream_said_is_refused_by_the_decoder(tmp_path, monkeypatch):
    """The declared size passes (64x48 = 3072 pixels); the decoder, given the limit, refuses
    the 128x96 frame unmade, and its run is skipped with a reason that names the limit."""
    src = tmp_path / "videos"
    mjpeg_growing(src / "grow.mkv")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 64 * 48)
    with pytest.raises(Exception, match="no readable image") as info:
        pack(src, tmp_path / "out", **ARGS)
    assert (
        "grow.mkv: 3 frames not packed (frames 0-2): cannot decode frame 2 of 3: Invalid "
        "argument (damaged, or a frame over PIL's limit of 3072 pixels, "
        "PIL.Image.MAX_IMAGE_PIXELS)"
    ) in str(info.value)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # no limit: all three are packed
    assert Manifest.load(pack(src, tmp_path / "all", **ARGS).out).count == 3


# --- point 9: a probe's byte and time budget, and its progress ---


def test_a_probe_stops_within_its_byte_budget(tmp_path, monkeypatch):
    """A 3-frame .mkv followed by 64 MB of zeros (4 GB took 38-66 s): the probe stops once it
    has read its budget past the last frame (1 MB here, 256 MB by default) and skips it; the
    other clip is packed."""
    padded(tmp_path / "src" / "a.mkv", 64 << 20)
    make_video(tmp_path / "src" / "b.mp4", 1, 3)
    monkeypatch.setattr(videofile, "GAP_BYTES", 1 << 20)
    reads = []
    real = videofile.VideoFile.read
    monkeypatch.setattr(videofile.VideoFile, "read", lambda f, n=-1: reads.append(n) or real(f, n))
    m = Manifest.load(pack(tmp_path / "src", tmp_path / "out", **ARGS).out)
    assert [c.name for c in m.clips] == ["b.mp4"]
    assert m.skipped == (
        {"path": "a.mkv", "reason": "probe stopped: 1 MB read past frame 3 without another (data "
         "after the video, or damage?); cut the file after its last frame, or remux it (ffmpeg "
         "-i IN -c copy OUT)"},
    )  # fmt: skip
    assert sum(reads) < 4 << 20  # of a 64 MB file


def test_a_probe_stops_within_its_time_budget_and_shows_its_progress(tmp_path, monkeypatch):
    """A clock that runs a second a read: the probe stops once 60 s have passed without a
    packet; from its first second on, `progress` hears which video it reads and how far."""
    padded(tmp_path / "src" / "a.mkv", 64 << 20)
    make_video(tmp_path / "src" / "b.mp4", 1, 3)
    clock = iter(range(10**6))
    monkeypatch.setattr(videofile.time, "monotonic", lambda: float(next(clock)))
    seen = []
    m = Manifest.load(pack(tmp_path / "src", tmp_path / "out", **ARGS, progress=seen.append).out)
    assert m.skipped[0]["reason"].startswith("probe stopped: 60 s spent past frame ")
    probing = [p for p in seen if p.probing == "a.mkv"]  # (b.mp4's probe is long here too)
    assert len(probing) > 10 and (probing[0].total, probing[0].done) == (0, 0)
    assert [p.probed for p in probing] == sorted(p.probed for p in probing)
    assert probing[-1].probed > probing[0].probed
    first_image = min(i for i, p in enumerate(seen) if p.probing is None)
    assert all(p.probing is not None for p in seen[:first_image])


def test_a_long_probe_draws_its_bar_at_a_terminal(tmp_path):
    """At a terminal (a pseudo-terminal here), a probe over its quiet second (0 here) draws a
    bar of the bytes it has read, named by the video."""
    padded(tmp_path / "src" / "a.mkv", 4 << 20)
    code = (
        "import sys; from mixshard.writing.pixels import videofile; videofile.QUIET_SECONDS = -1; "
        "videofile._REPORT_EVERY = 0; from mixshard.cli import cli; "
        "cli.main(sys.argv[1:], prog_name='mixshard')"
    )
    args = ["pack", tmp_path / "src", tmp_path / "out", "--clips", "--size", 8, "--workers", 1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    drawn = on_terminal([sys.executable, "-c", code, *map(str, args)], timeout=60, env=env)
    assert "probing a.mkv: " in drawn and "B/s" in drawn


# --- point 8: an unknown --clip-list ---


def test_an_unknown_clip_list_is_one_usage_error_naming_the_lists(tmp_path):
    make_video(tmp_path / "src" / "video0.mp4", 0, 3)
    res = run("pack", tmp_path / "src", tmp_path / "out", "--clips", "--clip-list", "nope")
    assert res.exit_code == 2
    assert (
        "Error: Invalid value for '--clip-list': 'nope' is not one of 'dmcgb-video_easy', "
        "'dmcgb-video_hard', 'davis17-train', 'davis17-val'." in res.output
    )
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()


# --- point 10: names that would forge output lines ---

FORGED = "b\nPacked 999 clips (forged).mp4"
JUNK = "c\nError: forged line\x1b[2J.mp4"


def test_names_with_control_characters_are_printed_escaped(tmp_path):
    """A clip named with a newline printed as is started a line of its own (`Packed 999 clips
    (forged)`); an escape sequence drove the terminal. Every name the command line prints from
    the data (summary, skipped, error, inspect) is escaped; --json stays JSON."""
    src = tmp_path / "src"
    make_video(src / "a.mp4", 0, 3)
    make_video(src / FORGED, 1, 3)
    (src / JUNK).write_bytes(b"junk" * 10)
    out = tmp_path / "out"
    res = run("pack", src, out, "--clips", "--size", 8, "--workers", 1)
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [
        "skipped: c\\x0aError: forged line\\x1b[2J.mp4: not a video PyAV can read: Invalid data "
        "found when processing input"
    ]
    assert res.stdout.startswith("Packed 2 clips (a.mp4, b\\x0aPacked 999 clips (forged).mp4),")
    assert len(res.stdout.splitlines()) == 1
    shown = run("inspect", out)
    lines = shown.stdout.splitlines()
    assert len(lines) == 7 and not any(line.startswith(("Packed", "Error")) for line in lines)
    assert "b\\x0aPacked 999 clips (forged).mp4" in lines[-1]
    as_json = run("inspect", out, "--json").stdout
    assert json.loads(as_json)["clip_names"] == ["a.mp4", FORGED]
    os.unlink(src / "a.mp4")
    os.unlink(src / FORGED)
    res = run("pack", src, tmp_path / "out2", "--clips", "--size", 8, "--workers", 1)
    assert res.exit_code == 1
    assert res.stderr.count("\n") == 1 and "\x1b" not in res.stderr
    assert res.stderr.startswith(
        "Error: no readable clip in " + str(src) + ": all 1 entries were skipped (first: "
        "c\\x0aError: forged line\\x1b[2J.mp4: "
    )


# --- point 12: a Ctrl-C in a pack's last moments, a dangling OUT link, a file that vanishes ---

# `mixshard pack` with a SIGINT sent to itself at one point of its end: `dropped` in a
# `__del__` as the decode workers go (where Python drops the KeyboardInterrupt), `index` while
# index.json is written, `exit` in an `atexit` callback registered while it runs (as a process
# pool's is).
_LATE_CTRL_C = textwrap.dedent(
    """
    import atexit, os, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where pytest ignores it
    from mixshard.core import manifest
    from mixshard.writing.run import localrun
    point = sys.argv.pop(1)

    def ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)

    class Dropped:
        def __del__(self):
            ctrl_c()

    run, save = localrun.LocalRun.run, manifest.Manifest.save
    def late_run(self):
        run(self)
        if point == "dropped":
            Dropped()
        elif point == "exit":
            atexit.register(ctrl_c)
    def saving(self, out):
        if point == "index":
            ctrl_c()
        return save(self, out)
    localrun.LocalRun.run, manifest.Manifest.save = late_run, saving
    from mixshard.cli import main
    sys.argv = ["mixshard", *sys.argv[1:]]
    main()
    """
)


@pytest.mark.parametrize(
    ("point", "message"),
    [
        ("dropped", "Interrupted. Finished shards are kept: rerun the same command with "
                    "--resume to continue."),
        ("index", "Interrupted as the pack finished: {out} holds the whole pack; nothing is "
                  "left to do."),
        ("exit", "Interrupted as mixshard exited; what it printed above is complete."),
    ],
)  # fmt: skip
def test_a_ctrl_c_in_a_packs_last_moments_exits_130(tmp_path, point, message):
    """9 in 40 packs that got a Ctrl-C in their last moments exited 0. Before index.json is
    written the pack stops (resumable); once it is being written the pack is whole and says
    so; in the interpreter's exit too: always exit 130."""
    make_tree(tmp_path / "src", classes=("a", "b"), per_class=3)
    out = tmp_path / "out"
    args = ["pack", tmp_path / "src", out, "--size", 8, "--workers", 2, "-q"]
    done = subprocess.run(
        [sys.executable, "-c", _LATE_CTRL_C, point, *map(str, args)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert done.stderr.endswith(message.format(out=out) + "\n"), done.stderr
    assert (out / "index.json").exists() == (point != "dropped")
    if point == "dropped":  # and it resumes
        assert run("pack", tmp_path / "src", out, "--size", 8, "--resume").exit_code == 0


def test_a_dangling_output_link_is_named_and_nothing_is_made_through_it(tmp_path):
    make_tree(tmp_path / "src", per_class=1)
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "disk" / "pack")
    res = run("pack", tmp_path / "src", link, "--size", 8)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: output folder {link} is a symbolic link to {tmp_path / 'disk' / 'pack'}, "
        "which leads to no folder: make that folder (or mount the disk it is on) or remove the "
        "link; nothing was written\n"
    )
    assert not (tmp_path / "disk").exists() and link.is_symlink()


def test_a_file_that_vanishes_during_the_pack_is_named_so(tmp_path):
    """An image and a video removed once the plan is made (at the first progress report)
    are skipped as vanished, not as "corrupt or truncated: [Errno 2] ..."."""
    make_tree(tmp_path / "images", classes=("a",), per_class=3)
    make_video(tmp_path / "videos" / "a.mp4", 0, 3)
    make_video(tmp_path / "videos" / "b.mp4", 1, 3)
    for src, gone, options in [
        (tmp_path / "images", "a/img1.png", dict(size=8, workers=1)),
        (tmp_path / "videos", "b.mp4", ARGS),
    ]:

        def remove(progress, path=src / gone):
            if progress.done == 0 and path.exists():
                path.unlink()

        out = tmp_path / f"out-{src.name}"
        skipped = Manifest.load(pack(src, out, **options, progress=remove).out).skipped
        reason = (
            VANISHED if src.name == "images" else f"3 frames not packed (frames 0-2): {VANISHED}"
        )
        assert skipped == ({"path": gone, "reason": reason},)

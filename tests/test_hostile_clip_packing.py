"""Issue 46, the packing side: videos over 1 MB in archives, frames over the pixel limit, a
probe's byte and time budget and its progress, an unknown clip list, names that would forge
output lines, a Ctrl-C in a pack's last moments, a dangling OUT link, a file that vanishes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import av
import numpy as np
from clipdata import frame, make_video
from helpers import make_tree, run

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


# --- point 12: a dangling OUT link, a file that vanishes ---


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

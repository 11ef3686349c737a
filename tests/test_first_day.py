"""A new user's first day (issue 20), one test per numbered case: what `pack` and the make
targets refuse, which files OUT and SRC hold before and after, and the message's key words."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import files, make_flat, make_tree, noise, run

import mixshard
from mixshard import Manifest
from mixshard.testdata import make_image_folder

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--size", "8", "--workers", "1"]


def listing(folder: Path) -> list[str]:
    """Every path under `folder`, relative, sorted (files and folders)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), *args, f"PY={sys.executable}", "STAMP=", "RUNTIME="],
        capture_output=True,
        text=True,
    )


# ---------------------------------------------------------------- 1. OUT is mixshard's or empty


def test_1_resume_refuses_a_folder_that_holds_no_pack(tree, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    noise(other / "photo.png")
    before, src_before = files(other), listing(tree)
    res = run("pack", tree, other, "--resume", *ARGS)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: output folder {other} is not empty and holds no mixshard pack (notes.txt, "
        "photo.png); nothing was written. Choose an empty or new output folder\n"
    )
    assert files(other) == before and listing(tree) == src_before
    assert run("pack", tree, other, *ARGS).output == res.output  # the same line without it


def test_1_out_inside_src_src_inside_out_and_src_as_out_are_refused(tmp_path):
    src = tmp_path / "coco" / "val2017"
    make_flat(src, n=4)
    before = listing(tmp_path)
    res = run("pack", src, src / "packed", *ARGS)
    assert res.exit_code == 1
    assert res.output.startswith(
        f"Error: output folder {src}/packed is inside the source folder {src}; choose an "
        "output folder outside the source"
    )
    res = run("pack", src, src, "--resume", *ARGS)
    assert res.exit_code == 1 and f"output folder {src} is the source folder" in res.output
    res = run("pack", src, tmp_path / "coco", *ARGS)
    assert res.exit_code == 1
    assert res.output.startswith(
        f"Error: the source folder {src} is inside the output folder {tmp_path}/coco; "
    )
    assert listing(tmp_path) == before


def test_1_make_targets_refuse_data_inside_or_around_src(tmp_path):
    p365 = tmp_path / "places365_standard"
    make_image_folder(p365 / "train", classes=2, per_class=2, max_side=48)
    make_image_folder(p365 / "val", classes=2, per_class=1, max_side=48)
    make_flat(tmp_path / "coco" / "val2017", n=3)
    before = listing(tmp_path)
    res = make("places365", f"SRC={p365}", f"DATA={tmp_path}")
    assert res.returncode != 0
    assert (
        f"make places365: the pack folder {tmp_path}/places365_standard would be SRC itself; "
        "choose another DATA folder"
    ) in res.stderr
    res = make("coco", f"SRC={tmp_path}/coco/val2017", f"DATA={tmp_path}")
    assert res.returncode != 0
    assert f"the pack folder {tmp_path}/coco would hold SRC={tmp_path}/coco/val2017" in res.stderr
    res = make("coco", f"SRC={tmp_path}/coco/val2017", f"DATA={tmp_path}/coco/val2017/data")
    assert res.returncode != 0
    assert (
        f"make coco: DATA={tmp_path}/coco/val2017/data is inside SRC={tmp_path}/coco/val2017: "
        "the packs would be written into the download itself"
    ) in res.stderr
    assert listing(tmp_path) == before


# ----------------------------------------------------- 2. a failed run never destroys a pack


def test_2_a_failed_strict_overwrite_keeps_the_earlier_pack(tree, tmp_path):
    out = tmp_path / "out"
    assert run("pack", tree, out, *ARGS).exit_code == 0
    before = files(out)
    (tree / "cat" / "zz.png").write_bytes(b"")
    res = run("pack", tree, out, *ARGS, "--size", 4, "--strict", "--overwrite")
    assert res.exit_code == 1
    assert res.output.startswith("Error: --strict: 1 file(s) could not be read: cat/zz.png")
    assert res.output.rstrip().endswith(f"{out} still holds the earlier pack, unchanged")
    assert files(out) == before
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]  # a strict failure keeps no staging
    assert run("verify", out).exit_code == 0
    res = run("pack", tree, out, *ARGS, "--size", 4, "--overwrite")  # non-strict: replaced
    assert res.exit_code == 0, res.output
    assert Manifest.load(out).size == 4 and sorted(os.listdir(out)) == [
        "index.json",
        "shard-000000.tar",
    ]
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]


def test_2_a_full_disk_during_overwrite_keeps_the_earlier_pack(tree, tmp_path, monkeypatch):
    import mixshard.writing.out.tarwriter as fmt

    out = tmp_path / "out"
    assert run("pack", tree, out, *ARGS, "--shard-size", 6).exit_code == 0
    before = files(out)
    real = fmt.ShardWriter.add_block

    def full_after_one_shard(self, index, *args):
        if index >= 3:  # the first shard (3 blocks of 2 images) goes through
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, index, *args)

    monkeypatch.setattr(fmt.ShardWriter, "add_block", full_after_one_shard)
    again = [*ARGS, "--shard-size", 6, "--block-size", 2, "--overwrite"]
    res = run("pack", tree, out, *again)
    assert res.exit_code == 1
    staging = tmp_path / ".out.mixshard-new"
    assert res.output == (
        f"Error: cannot write {staging}/shard-000001.tar: No space left on device; free some "
        f"space, then pack again with --overwrite to continue (finished shards are kept). {out} "
        f"still holds the earlier pack, unchanged; the new pack's finished shards are kept in "
        f"{staging}, where a rerun goes on\n"
    )
    assert "--resume" not in res.output
    assert files(out) == before and "shard-000000.tar" in os.listdir(staging)
    monkeypatch.setattr(fmt.ShardWriter, "add_block", real)
    res = run("pack", tree, out, *again)
    assert res.exit_code == 0 and "1 reused from earlier runs" in res.output
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]
    assert Manifest.load(out).block_size == 2 and run("verify", out).exit_code == 0


def test_2_strict_names_every_unreadable_file_in_one_run(tmp_path):
    src = tmp_path / "src"
    make_tree(src, classes=("a", "b"), per_class=6)
    (src / "a" / "empty.png").write_bytes(b"")
    (src / "a" / "junk.png").write_bytes(b"not a png at all")
    (src / "b" / "cut.png").write_bytes((src / "b" / "img0.png").read_bytes()[:60])
    os.symlink(src / "gone.png", src / "b" / "link.png")  # found by the scan, not a decoder
    res = run("pack", src, tmp_path / "out", *ARGS, "--shard-size", 3, "--strict")
    assert res.exit_code == 1
    message = res.output
    assert message.startswith("Error: --strict: 4 file(s) could not be read: a/empty.png (")
    for name in ("a/junk.png", "b/cut.png", "b/link.png (broken symlink)"):
        assert name in message
    assert not (tmp_path / "out").exists()
    # a non-strict run that stopped after two shards had skipped some of them: a strict
    # resume redoes those shards and still names all four
    import mixshard.writing.out.tarwriter as fmt

    real = fmt.ShardWriter.add_block

    def full_at_the_third_shard(self, index, *args):
        if index >= 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, index, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fmt.ShardWriter, "add_block", full_at_the_third_shard)
        assert run("pack", src, tmp_path / "p", *ARGS, "--shard-size", 3).exit_code == 1
    assert (tmp_path / "p" / ".mixshard-pack.jsonl").read_text().count("\n") == 3
    res = run("pack", src, tmp_path / "p", *ARGS, "--shard-size", 3, "--strict", "--resume")
    assert res.exit_code == 1 and "--strict: 4 file(s) could not be read" in res.output
    assert not (tmp_path / "p" / "index.json").exists()


# --------------------------------------------------- 3. make targets that can change their mind


def test_3_changed_pack_args_say_what_differs_and_repack_replaces(tmp_path):
    make_flat(tmp_path / "val2017", n=4)
    data, src = tmp_path / "data", f"SRC={tmp_path}/val2017"
    assert make("coco", src, f"DATA={data}").returncode == 0
    before = files(data / "coco")
    res = make("coco", src, f"DATA={data}", "PACK_ARGS=--size 32")
    assert res.returncode != 0
    assert res.stderr.startswith(
        f"Error: {data}/coco holds a finished pack made with other options (size 84 -> 32); "
        "pass --overwrite to replace it (the old pack is kept until the new one is complete)\n"
        f'to continue: make coco {src} DATA={data} PACK_ARGS="--size 32"\n'
        f'to replace it: make coco {src} DATA={data} PACK_ARGS="--size 32" REPACK=1\n'
    )
    assert files(data / "coco") == before
    res = make("coco", src, f"DATA={data}", "PACK_ARGS=--size 32", "REPACK=1")
    assert res.returncode == 0, res.stderr
    assert Manifest.load(data / "coco").size == 32
    res = make("coco", src, f"DATA={data}", "PACK_ARGS=--size 16 --overwrite")
    assert res.returncode == 0, res.stderr  # no "--resume and --overwrite exclude each other"
    assert Manifest.load(data / "coco").size == 16
    assert sorted(os.listdir(data)) == ["coco"]


def test_3_the_command_line_names_the_changed_options(tree, tmp_path):
    out = tmp_path / "out"
    assert run("pack", tree, out, *ARGS).exit_code == 0
    res = run("pack", tree, out, "--size", 6, "--seed", 3, "--workers", 1, "--resume")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {out} holds a finished pack made with other options (seed 0 -> 3, size 8 -> "
        "6); pass --overwrite to replace it (the old pack is kept until the new one is "
        "complete)\n"
    )


# -------------------------------------------- 6. SRC one level too high, and the class count


def test_6_split_folders_as_source_are_refused(tmp_path):
    p365 = tmp_path / "places365_standard"
    make_image_folder(p365 / "train", classes=2, per_class=2, max_side=48)
    make_image_folder(p365 / "val", classes=2, per_class=1, max_side=48)
    res = run("pack", p365, tmp_path / "out", *ARGS)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: the top-level folders of {p365} are dataset splits (train, val), not classes; "
        f"pass one split as the source instead, e.g. {p365}/train (or pass --labels folders "
        "if they really are classes)\n"
    )
    assert not (tmp_path / "out").exists()
    coco = tmp_path / "coco"
    make_flat(coco / "val2017", n=3)
    (coco / "annotations").mkdir()
    res = run("pack", coco, tmp_path / "out", "--labels", "none", *ARGS)
    assert res.exit_code == 1 and f"e.g. {coco}/val2017 " in res.output
    res = run("pack", p365, tmp_path / "out", "--labels", "folders", *ARGS)
    assert res.exit_code == 0 and res.output.rstrip().endswith("; 2 classes (train, val)")


def test_6_the_summary_names_the_class_count(tree, tmp_path):
    res = run("pack", tree, tmp_path / "a", *ARGS)
    assert res.output.rstrip().endswith(f"s: {tmp_path}/a; 3 classes (cat, dog, eel)")
    make_flat(tmp_path / "flat", n=3)
    res = run("pack", tmp_path / "flat", tmp_path / "b", *ARGS)
    assert res.output.rstrip().endswith(f"s: {tmp_path}/b; unlabeled (one set)")


# ---------------------------------------------------------------------------- 8. smaller


def test_8_progress_counts_images_written(tree, tmp_path):
    seen: list = []
    mixshard.pack(tree, tmp_path / "o", size=8, crop="random", variants=3, workers=1,
                  shard_size=9, progress=seen.append)  # fmt: skip
    assert seen[-1].done == seen[-1].total == 54 == Manifest.load(tmp_path / "o").count


def test_8_free_space_is_checked_before_anything_is_written(tree, tmp_path, monkeypatch):
    from mixshard.writing.out import outdir

    monkeypatch.setattr(outdir, "free_bytes", lambda folder: 1000)
    res = run("pack", tree, tmp_path / "out", *ARGS)
    need = 18 * (3 * 8 * 8 + outdir.PER_IMAGE_OVERHEAD)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: not enough free space for this pack in {tmp_path}/out: its 18 images of 8x8 "
        f"px need about {need:,} bytes ({need / 1e9:.2f} GB), and 1,000 bytes (0.00 GB) are "
        "free; free some space or choose an output folder on another disk. Nothing was "
        "written\n"
    )
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(outdir, "free_bytes", lambda folder: need)
    assert run("pack", tree, tmp_path / "out", *ARGS).exit_code == 0


def test_8_a_literal_tilde_is_named(tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    home = os.path.expanduser("~")
    res = run("pack", "~/no-such-src", "out", *ARGS)
    assert res.exit_code == 1
    assert res.output == (
        "Error: source folder not found: ~/no-such-src (it starts with a literal ~, which was "
        f"not expanded: write {home}/no-such-src instead)\n"
    )
    res = run("pack", tree, "~/packs/coco", *ARGS)
    assert res.exit_code == 1
    assert "output folder ~/packs/coco would be made here (it starts with a literal ~" in (
        res.output
    )
    assert not (tmp_path / "~").exists()
    res = run("inspect", "~/no-such-pack")
    assert res.exit_code == 1 and "pack folder not found: ~/no-such-pack (it starts" in res.output
    res = make("coco", "SRC=~/coco/val2017", "DATA=data")
    assert res.returncode != 0
    assert "SRC=~/coco/val2017 starts with a literal ~ that was not expanded" in res.stderr
    assert "write SRC=$HOME/coco/val2017 or the full path" in res.stderr


@pytest.mark.parametrize(("name", "magic"), [("g.jpg", b"\xff\xd8\xff"), ("g.png", b"\x89PNG")])
def test_8_preview_writes_the_format_its_name_says(tree, tmp_path, name, magic):
    assert run("pack", tree, tmp_path / "p", *ARGS).exit_code == 0
    res = run("preview", tmp_path / "p", "-o", tmp_path / name, "-n", 4)
    assert res.exit_code == 0
    assert (tmp_path / name).read_bytes()[: len(magic)] == magic


def test_8_preview_refuses_other_suffixes(tree, tmp_path):
    assert run("pack", tree, tmp_path / "p", *ARGS).exit_code == 0
    res = run("preview", tmp_path / "p", "-o", tmp_path / "g.gif")
    assert res.exit_code == 2
    assert (
        f"Invalid value for '-o' / '--output': {tmp_path}/g.gif: name the file .png, .jpg, "
        ".jpeg or .webp"
    ) in res.output
    assert not (tmp_path / "g.gif").exists()


def test_2_an_interrupted_overwrite_keeps_the_old_pack_and_a_rerun_goes_on(
    tree, tmp_path, monkeypatch
):
    import mixshard.writing.out.tarwriter as fmt

    out = tmp_path / "out"
    assert run("pack", tree, out, *ARGS).exit_code == 0
    before = files(out)
    real = fmt.ShardWriter.add_block

    def ctrl_c_in_the_second_shard(self, index, *args):
        if index >= 3:
            raise KeyboardInterrupt
        return real(self, index, *args)

    monkeypatch.setattr(fmt.ShardWriter, "add_block", ctrl_c_in_the_second_shard)
    again = [*ARGS, "--shard-size", 6, "--block-size", 2, "--overwrite"]
    res = run("pack", tree, out, *again)
    assert res.exit_code == 130
    assert res.output == (
        f"Interrupted. {out} still holds the earlier pack, unchanged; rerun the same command to "
        "continue the new one (its finished shards are kept).\n"
    )
    assert files(out) == before
    assert "shard-000000.tar" in os.listdir(tmp_path / ".out.mixshard-new")
    monkeypatch.setattr(fmt.ShardWriter, "add_block", real)
    res = run("pack", tree, out, *again)
    assert res.exit_code == 0 and "1 reused from earlier runs" in res.output
    assert sorted(os.listdir(tmp_path)) == ["out", "src"] and Manifest.load(out).block_size == 2

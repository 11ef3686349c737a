"""The holes a newcomer fell into (issue 36), each with its exact outcome: advice that led to
a wrong pack, a traceback for a typo, a stale pack kept, a pack swapped under a reader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from helpers import files, make_flat, run

import mixshard
from mixshard.core.manifest import Manifest
from mixshard.testdata import make_image_folder
from mixshard.writing.out import replace

ROOT = Path(__file__).resolve().parents[1]
ARGS = ("--size", "8", "--workers", "1", "--quiet")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, recursively: relative path -> bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> Path:
    """`extracted/places365_standard/{train,val}` and its tar, laid out as the real one."""
    root = tmp_path_factory.mktemp("places")
    p365 = root / "extracted" / "places365_standard"
    make_image_folder(p365 / "train", classes=2, per_class=3, max_side=64)
    make_image_folder(p365 / "val", classes=2, per_class=1, max_side=64)
    with tarfile.open(root / "places365standard_easyformat.tar", "w") as tf:
        tf.add(p365, arcname="places365_standard")
    return root


# ------------------------------------------------------- 2. the advice leads to the right pack


def test_2_the_archive_advice_is_command_line_and_leads_to_one_split(places, tmp_path):
    tar, out = places / "places365standard_easyformat.tar", tmp_path / "out"
    res = run("pack", tar, out, *ARGS)
    assert (res.exit_code, res.output) == (
        1,
        f"Error: {tar} holds one folder, places365_standard/, of dataset splits (train, val): "
        "pass --within places365_standard/train to pack one split, as if the archive had been "
        "extracted and that folder given\n",
    )
    res = run("pack", tar, out, *ARGS, "--within", "places365_standard")
    assert (res.exit_code, res.output) == (
        1,
        f"Error: the top-level folders of {tar}:places365_standard are dataset splits (train, "
        "val), not classes; pass one split as the source instead, e.g. --within "
        "places365_standard/train (or pass --labels folders if they really are classes)\n",
    )
    res = run("pack", tar, out, *ARGS, "--within", ".")
    assert (res.exit_code, res.output) == (
        1,
        f"Error: {tar} holds dataset splits one level down (places365_standard/train, "
        "places365_standard/val), not classes; pass one split as the source instead, e.g. "
        "--within places365_standard/train (or pass --labels folders if they really are "
        "classes)\n",
    )
    assert not out.exists()
    res = run("pack", tar, out, *ARGS, "--within", "places365_standard/train")  # the advice
    assert res.exit_code == 0, res.output
    manifest = Manifest.load(out)
    assert manifest.count == 6 and manifest.classes == ("00_sunset", "01_checker")


def test_2_a_folder_one_or_two_levels_too_high_is_refused(places, tmp_path):
    extracted = places / "extracted"
    p365 = extracted / "places365_standard"
    before = snapshot(places)
    res = run("pack", extracted, tmp_path / "out", *ARGS)  # where the tar was extracted
    assert (res.exit_code, res.output) == (
        1,
        f"Error: {extracted} holds dataset splits one level down (places365_standard/train, "
        "places365_standard/val), not classes; pass one split as the source instead, e.g. "
        f"{p365}/train (or pass --labels folders if they really are classes)\n",
    )
    res = run("pack", p365, tmp_path / "out", *ARGS)
    assert res.exit_code == 1 and f"e.g. {p365}/train (or pass" in res.output
    assert not (tmp_path / "out").exists() and snapshot(places) == before


def test_2_one_split_among_other_folders_is_refused(tmp_path):
    src = tmp_path / "downloads"
    make_flat(src / "val2017", n=3)
    make_image_folder(src / "places365_standard" / "train", classes=1, per_class=2, max_side=64)
    res = run("pack", src, tmp_path / "coco", "--labels", "none", *ARGS)
    assert (res.exit_code, res.output) == (
        1,
        f"Error: the top-level folders of {src} are dataset splits (val2017), not classes; pass "
        f"one split as the source instead, e.g. {src}/val2017 (or pass --labels folders if "
        "they really are classes)\n",
    )
    assert not (tmp_path / "coco").exists()


# ------------------------------------------------------------- 3. typos: one line, no traceback


@pytest.mark.parametrize(
    "within, expected",
    [
        ("..", "Error: --within .. must be a folder inside the archive"),
        ("/etc", "Error: --within /etc must be a folder inside the archive"),
        ("root/..", "Error: --within root/.. must be a folder inside the archive"),
    ],
)
def test_3_a_within_outside_the_archive_is_a_usage_error(places, tmp_path, within, expected):
    res = run(
        "pack", places / "places365standard_easyformat.tar", tmp_path / "out", "--within", within
    )
    assert res.exit_code == 2 and expected in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


def test_3_a_misspelt_archive_and_within_with_a_folder(places, tmp_path):
    typo = places / "places365standard_easyfromat.tar"
    res = run("pack", typo, tmp_path / "out", *ARGS, "--within", "places365_standard/train")
    assert (res.exit_code, res.output) == (1, f"Error: source archive not found: {typo}\n")
    folder = places / "extracted" / "places365_standard"
    res = run("pack", folder, tmp_path / "out", *ARGS, "--within", "train")
    assert res.exit_code == 2
    assert (
        f"Error: --within train picks a folder inside an archive, but SRC {folder} is a folder: "
        f"pass the folder itself as SRC ({folder}/train) and no --within"
    ) in res.output
    # through make: the typo is named before anything runs
    res = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "places365", f"SRC={typo}", f"DATA={tmp_path}/data",
         f"PY={sys.executable}", "STAMP=", "RUNTIME="],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"make places365: SRC={typo} does not exist (from ")
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()


# --------------------------------------------------------- 4. a pack of another source is named


def test_4_a_finished_pack_of_another_archive_is_not_kept(tmp_path, monkeypatch):
    small, big = tmp_path / "small", tmp_path / "big"
    make_image_folder(small / "ds" / "train", classes=2, per_class=2, max_side=64)
    make_image_folder(big / "ds" / "train", classes=2, per_class=5, max_side=64, seed=3)
    tar, out = tmp_path / "p365.tar", tmp_path / "data" / "p365"
    with tarfile.open(tar, "w") as tf:
        tf.add(small / "ds", arcname="ds")
    pack_args = (tar, out, *ARGS, "--within", "ds/train", "--resume")
    assert run("pack", *pack_args).exit_code == 0
    kept = snapshot(out)
    assert Manifest.load(out).source["path"] == f"{tar}:ds/train"
    tar.unlink()
    with tarfile.open(tar, "w") as tf:  # the full download, where the trial one was
        tf.add(big / "ds", arcname="ds")
    res = run("pack", *pack_args)
    assert res.exit_code == 1
    assert res.output.startswith(
        f"Error: {out} holds a finished pack of another source: it was packed from "
        f"{tar}:ds/train (4 files, "
    )
    assert (
        f"; SRC is now {tar}:ds/train (10 files, {tar.stat().st_size} bytes, newest " in res.output
    )
    assert res.output.endswith(
        "pass --overwrite to replace it with a pack "
        "of SRC (the old pack is kept until the new one is complete), or write the new pack "
        "elsewhere\n"
    )
    assert snapshot(out) == kept
    res = run("pack", tar, out, *ARGS, "--within", "ds/train", "--overwrite")
    assert res.exit_code == 0, res.output
    assert Manifest.load(out).count == 10


@pytest.mark.parametrize("change", ["added", "removed", "rewritten"])
def test_4_a_folder_that_changed_is_named_on_resume(tmp_path, change):
    src, out = tmp_path / "src", tmp_path / "out"
    paths = make_image_folder(src, classes=2, per_class=3, max_side=64)
    assert run("pack", src, out, *ARGS).exit_code == 0
    kept = snapshot(out)
    if change == "added":
        (paths[0].parent / "extra.png").write_bytes(paths[0].read_bytes())
    elif change == "removed":
        paths[-1].unlink()
    else:  # the same name, new contents
        paths[0].write_bytes(paths[0].read_bytes() + b"\0")  # a byte more, an old mtime
        os.utime(paths[0], ns=(1, 1))
    res = run("pack", src, out, *ARGS, "--resume")
    assert res.exit_code == 1
    assert (
        f"Error: {out} holds a finished pack of another source: it was packed from {src} (6 files"
        in res.output
    )
    assert "pass --overwrite to replace it with a pack of SRC" in res.output
    assert snapshot(out) == kept


def test_4_the_same_source_moved_is_the_same_pack(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    make_image_folder(src, classes=2, per_class=3, max_side=64)
    assert run("pack", src, out, *ARGS).exit_code == 0
    src.rename(tmp_path / "moved")
    res = run("pack", tmp_path / "moved", out, *ARGS, "--resume")
    assert (res.exit_code, res.output) == (
        0,
        f"{out} already holds a finished pack of 6 images; nothing to do.\n",
    )


# ------------------------------------------------- 7. a pack swapped in while a reader opens it


def _images(folder: Path) -> np.ndarray:
    stream = mixshard.ShardStream(folder, 4, shuffle=False, order="global")
    return np.concatenate([b.numpy() for b in stream])


@pytest.mark.parametrize("exchange", [True, False])
def test_7_a_reader_opening_during_a_swap_gets_one_pack_whole(tmp_path, monkeypatch, exchange):
    """The new pack swapped in by `--overwrite`'s rename right after a reader read the old
    index.json: the old manifest's sizes do not fit the new shards ("truncated or altered",
    before); the reader reads the folder again and gets the new pack."""
    a, b = tmp_path / "a", tmp_path / "b"
    make_image_folder(a, classes=2, per_class=4, max_side=64, seed=1)
    make_image_folder(b, classes=2, per_class=5, max_side=64, seed=2)
    out, staging = tmp_path / "pack", replace.staging_path(tmp_path / "pack")
    mixshard.pack(a, out, size=8, workers=1)
    mixshard.pack(b, staging, size=8, workers=1)
    new = _images(staging)
    if not exchange:  # the two renames of a system without RENAME_EXCHANGE
        monkeypatch.setattr(replace, "_exchange", lambda x, y: False)
    real, swapped = Manifest.load, []

    def load_then_swap(folder):
        manifest = real(folder)
        if not swapped:
            replace.swap_in(staging, out)
            swapped.append(True)
        return manifest

    monkeypatch.setattr(Manifest, "load", staticmethod(load_then_swap))
    got = _images(out)  # read the old manifest, then found the new pack: read again
    assert swapped and got.shape == (8, 3, 8, 8) and np.array_equal(got, new)
    assert not staging.exists() and sorted(os.listdir(tmp_path)) == ["a", "b", "pack"]


# ----------------------------------------------------------------------------- 10. smaller


def test_10_ctrl_c_under_make_says_to_rerun_the_target(tmp_path):
    # a pack that waits until a Ctrl-C (SIGINT to the terminal's process group: make, its
    # shell, the pack) and exits 130 as mixshard's does; everything else runs as it is
    py = tmp_path / "py"
    pack = (
        "import sys, time\ntry:\n    print('packing', file=sys.stderr, flush=True)\n"
        "    time.sleep(60)\nexcept KeyboardInterrupt:\n"
        "    print('Interrupted.', file=sys.stderr)\n    sys.exit(130)\n"
    )
    (tmp_path / "pack.py").write_text(pack)
    py.write_text(
        f'#!/bin/sh\n[ "$1" = -m ] && exec {sys.executable} {tmp_path}/pack.py\n'
        f'exec {sys.executable} "$@"\n'
    )
    py.chmod(0o755)
    make_flat(tmp_path / "val2017", n=2)
    src, data = f"SRC={tmp_path}/val2017", f"DATA={tmp_path}/data"
    proc = subprocess.Popen(
        ["make", "-s", "-C", str(ROOT), "coco", src, data, f"PY={py}", "STAMP=", "RUNTIME="],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stderr.readline() == "packing\n"
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.communicate(timeout=60)[1]
    assert proc.returncode != 0
    assert rest.startswith(
        f"Interrupted.\nto continue: make coco {src} {data}\n"
        f"to replace it: make coco {src} {data} REPACK=1\n"
    )


def test_10_the_help_examples_have_no_stray_spaces():
    res = run("pack", "--help")
    examples = res.output.split("Examples:")[1].split("Options:")[0]
    assert "  --within" not in examples and "\\" not in examples
    assert "mixshard pack places365.tar data/p365 --within places365_standard/train\n" in examples


def test_10_a_quoted_tilde_is_named_for_what_it_is(tmp_path):
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts/make_check.py"), "coco", "~/val2017", "data", "coco"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 1
    assert res.stderr == (
        "make coco: SRC=~/val2017 starts with a literal ~ that was not expanded (bash expands "
        "it; sh, zsh and quotes leave it); write SRC=$HOME/val2017 or the full path\n"
    )


def test_files_helper_compares_all_but_the_source(tmp_path):
    src = tmp_path / "src"
    make_image_folder(src, classes=1, per_class=2, max_side=64)
    mixshard.pack(src, tmp_path / "a", size=8, workers=1)
    src.rename(tmp_path / "elsewhere")
    mixshard.pack(tmp_path / "elsewhere", tmp_path / "b", size=8, workers=1)
    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert (tmp_path / "a" / "index.json").read_bytes() != (
        tmp_path / "b" / "index.json"
    ).read_bytes()


def test_an_interrupted_pack_of_another_source_names_what_changed(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    paths = make_image_folder(src, classes=2, per_class=3, max_side=64)
    mixshard.pack(src, out, size=8, workers=1, shard_size=2, part=(0, 2))  # half a pack
    kept = snapshot(out)
    (paths[0].parent / "extra.png").write_bytes(paths[0].read_bytes())
    res = run("pack", src, out, *ARGS, "--shard-size", "2", "--resume")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {out} holds an interrupted pack of another source or other options "
        "(.mixshard-pack.part-0-of-2.jsonl: 6 source files then, 7 now: the shuffle puts every "
        "image elsewhere, so no finished shard can be kept); pack again with the same SRC and "
        "options to resume it, or pass --overwrite to start over\n"
    )
    res = run("pack", src, out, *ARGS, "--shard-size", "2", "--seed", "3", "--resume")
    assert "no finished shard can be kept; seed 0 -> 3)" in res.output
    assert snapshot(out) == kept

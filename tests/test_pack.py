"""`mixshard pack`: options, output format, determinism, bad input, errors."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
from helpers import bad_images, make_flat, make_tree, noise, read_pack, run, solid

from mixshard import Manifest, pack, scan
from mixshard.writing.pixels.image import load_image


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_pack_writes_the_documented_format(tree, tmp_path):
    out = tmp_path / "out"
    res = run("pack", tree, out, "--size", 16, "--workers", 1)
    assert res.exit_code == 0, res.output
    assert res.output.startswith("Packed 18 images (0 skipped) into 1 shard, ")
    assert res.output.rstrip().endswith(f"s: {out}; 3 classes (cat, dog, eel)")
    assert sorted(os.listdir(out)) == ["index.json", "shard-000000.tar"]
    doc = json.loads((out / "index.json").read_text())
    assert list(doc) == [
        "format",
        "version",
        "size",
        "channels",
        "dtype",
        "layout",
        "block_size",
        "count",
        "classes",
        "options",
        "skipped",
        "shards",
        "source",
    ]
    stats = [p.stat() for p in tree.rglob("*.png")]
    assert doc["source"] == {
        "path": str(tree.resolve()),
        "plan": doc["source"]["plan"],
        "files": 18,
        "bytes": sum(st.st_size for st in stats),
        "newest": max(st.st_mtime_ns for st in stats),
    }
    assert len(doc["source"]["plan"]) == 64
    assert doc["format"] == "mixshard" and doc["version"] == 1
    assert (doc["size"], doc["channels"], doc["dtype"], doc["layout"]) == (16, 3, "uint8", "NCHW")
    assert doc["count"] == 18 and doc["classes"] == ["cat", "dog", "eel"]
    assert doc["options"] == {
        "crop": "center",
        "variants": 1,
        "seed": 0,
        "resample": "bilinear",
        "shuffle": True,
        "labels": "folders",
        "shard_size": 10000,
    }
    shard = doc["shards"][0]
    data = (out / "shard-000000.tar").read_bytes()
    assert shard["bytes"] == len(data)
    assert shard["sha256"] == hashlib.sha256(data).hexdigest()
    # the block offset points at the raw pixels: gather without parsing the tar
    images, labels, keys = read_pack(out)
    block = shard["blocks"][0]
    raw = np.frombuffer(data, np.uint8, count=18 * 3 * 16 * 16, offset=block["offset"])
    assert np.array_equal(raw.reshape(18, 3, 16, 16), images)
    lab = np.frombuffer(data, np.int32, count=18, offset=block["labels_offset"])
    assert np.array_equal(lab, labels)


def test_tar_headers_are_plain_fixed_ustar(tree, tmp_path):
    run("pack", tree, tmp_path / "out", "--size", 8, "--block-size", 5, "--workers", 1)
    with tarfile.open(tmp_path / "out" / "shard-000000.tar") as tar:
        members = tar.getmembers()
    assert [m.name for m in members[:3]] == [
        "00000000.images.npy",
        "00000000.labels.npy",
        "00000000.keys.json",
    ]
    assert len(members) == 3 * 4  # 18 images in blocks of 5
    for m in members:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o644)
        assert m.pax_headers == {}
    raw = (tmp_path / "out" / "shard-000000.tar").read_bytes()
    assert raw[257:263] == b"ustar\x00"


def test_round_trip_pixels_equal_load_image(tree, tmp_path):
    out = tmp_path / "out"
    assert run("pack", tree, out, "--size", 12, "--workers", 1).exit_code == 0
    images, labels, keys = read_pack(out)
    found = scan(tree)
    assert sorted(keys) == sorted(p for p, _ in found.items)  # every image exactly once
    label_of = dict(found.items)
    for img, label, key in zip(images, labels, keys):
        assert np.array_equal(img, load_image(tree / key, 12)[0])
        assert label == label_of[key]


def test_deterministic_whatever_the_worker_count(tree, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("pack", tree, a, "--size", 8, "--shard-size", 7, "--workers", 1).exit_code == 0
    assert run("pack", tree, b, "--size", 8, "--shard-size", 7, "--workers", 2).exit_code == 0
    assert files(a) == files(b)
    assert len(files(a)) == 4  # 3 shards + index


def test_shuffle_seed_and_no_shuffle(tree, tmp_path):
    order = {}
    for name, extra in {
        "s0": [],
        "s0b": [],
        "s1": ["--seed", 1],
        "plain": ["--no-shuffle"],
    }.items():
        assert (
            run("pack", tree, tmp_path / name, "--size", 4, "--workers", 1, *extra).exit_code == 0
        )
        order[name] = read_pack(tmp_path / name)[2]
    assert order["s0"] == order["s0b"]
    assert order["s0"] != order["s1"]
    assert order["plain"] == [p for p, _ in scan(tree).items]
    assert sorted(order["s0"]) == sorted(order["plain"])


def test_shard_and_block_sizes(tree, tmp_path):
    out = tmp_path / "out"
    assert (
        run(
            "pack", tree, out, "--size", 4, "--shard-size", 8, "--block-size", 3, "--workers", 1
        ).exit_code
        == 0
    )
    m = Manifest.load(out)
    assert [s.count for s in m.shards] == [8, 8, 2]
    assert [[b.count for b in s.blocks] for s in m.shards] == [[3, 3, 2], [3, 3, 2], [2]]
    assert [b.key for s in m.shards for b in s.blocks] == [f"{k:08d}" for k in range(7)]
    assert [s.name for s in m.shards] == [f"shard-{i:06d}.tar" for i in range(3)]


def test_crop_modes_and_variants(tmp_path):
    src = tmp_path / "src"
    for i in range(4):
        noise(src / f"{i}.png", size=(90, 60), seed=i)
    full, rnd = tmp_path / "full", tmp_path / "rnd"
    assert run("pack", src, full, "--crop", "full", "--size", 10, "--workers", 1).exit_code == 0
    images, _, keys = read_pack(full)
    for img, key in zip(images, keys):
        assert np.array_equal(img, load_image(src / key, 10, "full")[0])
    res = run(
        "pack",
        src,
        rnd,
        "--crop",
        "random",
        "--variants",
        3,
        "--size",
        10,
        "--seed",
        5,
        "--workers",
        2,
    )
    assert res.exit_code == 0, res.output
    images, labels, keys = read_pack(rnd)
    assert len(images) == 12 and sorted(set(keys)) == ["0.png", "1.png", "2.png", "3.png"]
    assert all(keys.count(k) == 3 for k in set(keys))
    assert (labels == -1).all()
    for key in set(keys):
        want = load_image(src / key, 10, "random", variants=3, seed=5, key=key)
        got = images[[i for i, k in enumerate(keys) if k == key]]
        assert sorted(map(bytes, got)) == sorted(map(bytes, want))
        assert len({bytes(g) for g in got}) == 3
    assert Manifest.load(rnd).options["variants"] == 3


def test_variants_need_random_crop(tree, tmp_path):
    res = run("pack", tree, tmp_path / "o", "--variants", 2)
    assert res.exit_code == 2
    assert res.output.endswith(
        "Error: --variants 2 needs --crop random (other crops are all the same)\n"
    )
    with pytest.raises(ValueError, match="variants=2 needs crop='random'"):
        pack(tree, tmp_path / "o", variants=2)
    assert not (tmp_path / "o").exists()


def test_labels_options(tmp_path):
    src = tmp_path / "src"
    make_tree(src, classes=("a", "b"), per_class=2)
    solid(src / "loose.png", (9, 9, 9))
    res = run("pack", src, tmp_path / "auto", "--workers", 1)
    assert res.exit_code == 1 and "holds both loose images" in res.output
    res = run("pack", src, tmp_path / "none", "--labels", "none", "--size", 4, "--workers", 1)
    assert res.exit_code == 0 and res.output.startswith("Packed 5 images (0 skipped)")
    assert Manifest.load(tmp_path / "none").classes == ()
    res = run("pack", src, tmp_path / "fold", "--labels", "folders", "--size", 4, "--workers", 1)
    assert res.exit_code == 0 and res.stdout.startswith("Packed 4 images (1 skipped)")
    assert "skipped: loose.png: a loose image outside the class folders" in res.output


def test_flat_folder_like_coco(tmp_path):
    src = tmp_path / "val2017"
    make_flat(src, n=5)
    assert run("pack", src, tmp_path / "coco", "--size", 8, "--workers", 1).exit_code == 0
    m = Manifest.load(tmp_path / "coco")
    assert m.count == 5 and m.classes == () and m.options["labels"] == "none"
    assert (read_pack(tmp_path / "coco")[1] == -1).all()


def bad_tree(root: Path) -> None:
    make_tree(root, classes=("a", "b"), per_class=3)
    bad_images(root)
    os.symlink(root / "nowhere.png", root / "b" / "dangling.png")
    os.symlink(root / "a", root / "a" / "loop")
    (root / "a" / "README.txt").write_text("ignored")
    (root / "a" / ".DS_Store").write_bytes(b"\0\0")


BAD = {
    "a/empty.jpg": "empty file (0 bytes)",
    "a/loop": "symlink loop",
    "a/notes.png": "not an image PIL can read (cannot identify image file)",
    "b/bomb.png": "decompression bomb:",
    "b/cut.jpg": "corrupt or truncated:",
    "b/dangling.png": "broken symlink",
}


@pytest.mark.parametrize("workers", [1, 2])
def test_bad_files_are_skipped_and_reported(tmp_path, workers):
    src, out = tmp_path / "src", tmp_path / "out"
    bad_tree(src)
    res = run("pack", src, out, "--size", 8, "--workers", workers)
    assert res.exit_code == 0, res.output
    assert "Packed 6 images (6 skipped) into 1 shard" in res.output
    skipped = Manifest.load(out).skipped
    assert [s["path"] for s in skipped] == sorted(BAD)
    for s in skipped:
        assert s["reason"].startswith(BAD[s["path"]])
        assert f"skipped: {s['path']}: {s['reason']}" in res.output
    assert sorted(read_pack(out)[2]) == [f"{c}/img{i}.png" for c in "ab" for i in range(3)]


@pytest.mark.parametrize("shared", [True, False])
def test_worker_pixels_come_back_through_result_slots_or_pickled_the_same(
    tmp_path, monkeypatch, shared
):
    """Forked workers write their chunk's pixels into a shared result slot and send back only
    True or a skip reason per image; spawned ones (no slots) send the arrays. The same bytes
    either way, slots used again in turn, bad files skipped in place, several variants."""
    from mixshard.writing.run import localrun

    src = tmp_path / "src"
    make_tree(src, classes=("c", "d", "e"), per_class=70)  # 210 good images
    bad_images(src)  # in a/ and b/: skipped amid the good ones
    taken: list[tuple[int, list]] = []
    real_results, real_start = localrun.slot_results, localrun.start_workers

    def spy(slots, slot, flags, shape):
        taken.append((slot, flags))
        return real_results(slots, slot, flags, shape)

    monkeypatch.setattr(localrun, "slot_results", spy)
    if not shared:
        monkeypatch.setattr(
            localrun, "start_workers", lambda w, fds=(), slots=None: real_start(w, fds, None)
        )
    kw = dict(size=8, crop="random", variants=2, shard_size=100)
    pack(src, tmp_path / "one", workers=1, **kw)
    pack(src, tmp_path / "two", workers=2, **kw)
    assert files(tmp_path / "one") == files(tmp_path / "two")
    if not shared:
        assert taken == []
        return
    flags = [f for chunk in taken for f in chunk[1]]
    skipped = Manifest.load(tmp_path / "two").skipped
    assert len(skipped) >= 3 and len(flags) == 210 + len(skipped)
    assert sorted(f for f in flags if f is not True) == sorted(s["reason"] for s in skipped)
    # shards of 100, 100 and the rest: 4 + 4 + 1 chunks; 2 x workers slots, in turn
    assert [slot for slot, _ in taken] == [0, 1, 2, 3, 0, 1, 2, 3, 0]


def test_the_chunks_of_a_shard_are_its_items_in_turn_and_never_the_next_shards(tmp_path):
    from mixshard.writing.plan.packplan import make_plan

    make_tree(tmp_path / "src", classes=("a", "b"), per_class=11)
    plan = make_plan(str(tmp_path / "src"), scan(tmp_path / "src"), size=8, crop="center",
                     variants=1, shard_size=10, block_size=4, seed=0, shuffle=True)  # fmt: skip
    assert plan.n_shards == 3
    for i in range(3):
        items = plan.shard_items(i)
        assert sum((plan.chunk_items(i, s, 3) for s in range(0, len(items), 3)), ()) == items
        assert plan.chunk_items(i, len(items) - 1, 5) == items[-1:]


def test_result_slots_are_apart_and_refuse_what_does_not_fit():
    from mixshard.writing.plan.packplan import DecodeTask
    from mixshard.writing.run.decodeworkers import ResultSlots, decode_to_slot

    slots = ResultSlots(2, 10)
    slots.region(0, 10)[:] = 1
    slots.region(1, 4)[:] = 2
    assert slots.region(0, 10).tolist() == [1] * 10
    assert slots.region(1, 10).tolist() == [2] * 4 + [0] * 6
    with pytest.raises(ValueError, match="11 bytes do not fit a slot of 10"):
        slots.region(1, 11)
    with pytest.raises(RuntimeError, match="runs in a worker forked with result slots"):
        decode_to_slot(0, DecodeTask("src", ["a.png"], 8, "center", 1, 0))  # this one has none


def test_strict_fails_naming_the_files(tmp_path):
    src = tmp_path / "src"
    make_tree(src, classes=("a",), per_class=3)
    (src / "a" / "zero.png").write_bytes(b"")
    res = run("pack", src, tmp_path / "out", "--strict", "--workers", 1)
    assert res.exit_code == 1
    assert res.output == (
        "Error: --strict: 1 file(s) could not be read: a/zero.png (empty file (0 bytes)). Fix "
        "or remove them (then pack again), or pack without --strict to skip them\n"
    )
    assert not (tmp_path / "out" / "index.json").exists()
    os.symlink(src / "missing.png", src / "a" / "link.png")  # found by the scan: fails at once
    res = run("pack", src, tmp_path / "out2", "--strict")
    assert res.exit_code == 1 and "a/link.png (broken symlink)" in res.output
    assert not (tmp_path / "out2").exists()


def test_source_errors(tmp_path):
    res = run("pack", tmp_path / "nope", tmp_path / "out")
    assert (res.exit_code, res.output) == (1, f"Error: source folder not found: {tmp_path}/nope\n")
    (tmp_path / "empty").mkdir()
    res = run("pack", tmp_path / "empty", tmp_path / "out")
    assert res.exit_code == 1
    assert res.output.startswith(
        f"Error: no images found in {tmp_path}/empty (searched "
        "recursively). Accepted extensions: .jpg, .jpeg, .png"
    )
    assert not (tmp_path / "out").exists()


def test_output_errors(tree, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = run("pack", tree, out)
    assert res.exit_code == 1
    refused = (
        f"Error: output folder {out} is not empty and holds no mixshard pack (notes.txt); "
        "nothing was written. Choose an empty or new output folder\n"
    )
    assert res.output == refused
    res = run("pack", tree, out, "--resume")  # the same refusal: OUT holds no journal or pack
    assert (res.exit_code, res.output) == (1, refused)
    assert os.listdir(out) == ["notes.txt"]
    res = run("pack", tree, out, "--overwrite")
    assert res.exit_code == 1 and "holds files mixshard did not write (notes.txt)" in res.output
    assert (out / "notes.txt").read_text() == "mine"
    (tmp_path / "afile").write_text("x")
    res = run("pack", tree, tmp_path / "afile" / "out")
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: cannot write to output folder {tmp_path}/afile/out: ")
    res = run("pack", tree, tmp_path / "afile")
    assert res.exit_code == 1 and "exists and is not a folder" in res.output
    res = run("pack", tree, tmp_path / "x", "--resume", "--overwrite")
    assert res.exit_code == 2
    assert res.output.endswith("Error: --resume and --overwrite exclude each other; pick one\n")
    with pytest.raises(ValueError, match="resume and overwrite exclude each other"):
        pack(tree, tmp_path / "x", resume=True, overwrite=True)


def test_overwrite_replaces_an_earlier_pack(tree, tmp_path):
    out = tmp_path / "out"
    assert run("pack", tree, out, "--size", 4, "--shard-size", 5, "--workers", 1).exit_code == 0
    assert len(Manifest.load(out).shards) == 4
    assert run("pack", tree, out, "--size", 4, "--workers", 1).exit_code == 1
    res = run("pack", tree, out, "--size", 4, "--workers", 1, "--overwrite")
    assert res.exit_code == 0
    assert sorted(os.listdir(out)) == ["index.json", "shard-000000.tar"]


def test_full_disk_is_a_clean_error(tree, tmp_path, monkeypatch):
    import mixshard.writing.out.tarwriter as fmt

    def no_space(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fmt.ShardWriter, "_write", no_space)
    out = tmp_path / "out"
    res = run("pack", tree, out, "--workers", 1)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: cannot write {out}/shard-000000.tar: No space left on device; free some "
        "space, then pack again with --resume to continue (finished shards are "
        "kept)\n"
    )
    assert "index.json" not in os.listdir(out)
    assert not [n for n in os.listdir(out) if n.endswith((".tar", ".partial"))]


def test_quiet_and_progress(tree, tmp_path):
    res = run("pack", tree, tmp_path / "o", "--size", 4, "--quiet", "--workers", 1)
    assert res.exit_code == 0 and res.output.count("\n") == 1
    seen = []
    pack(tree, tmp_path / "p", size=4, shard_size=5, workers=1, progress=seen.append)
    assert seen[0].done == 0 and seen[-1].done == seen[-1].total == 18
    assert [p.done for p in seen] == sorted(p.done for p in seen)


def test_help_texts_have_examples():
    for cmd in ["pack", "verify", "inspect"]:
        res = run(cmd, "--help")
        assert res.exit_code == 0 and "Example" in res.output, cmd
    res = run("pack", "--help")
    for opt in [
        "--size",
        "--crop",
        "--variants",
        "--shard-size",
        "--block-size",
        "--workers",
        "--seed",
        "--no-shuffle",
        "--labels",
        "--strict",
        "--resume",
        "--overwrite",
        "--quiet",
    ]:
        assert opt in res.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_image_is_skipped(tmp_path):
    src = tmp_path / "src"
    make_tree(src, classes=("a",), per_class=2)
    (src / "a" / "img1.png").chmod(0)
    res = run("pack", src, tmp_path / "out", "--workers", 1)
    assert res.exit_code == 0
    assert Manifest.load(tmp_path / "out").skipped == (
        {"path": "a/img1.png", "reason": "unreadable: Permission denied"},
    )

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import make_flat, make_tree, solid

from mixshard.core.errors import SourceError
from mixshard.writing.sources.scanning import natural_key, scan


def test_natural_sort_orders_numbers_by_value():
    names = ["img10.png", "img2.png", "img1.png", "Img3.png", "img02.png"]
    assert sorted(names, key=natural_key) == [
        "Img3.png",
        "img1.png",
        "img02.png",
        "img2.png",
        "img10.png",
    ]


def test_imagefolder_classes_and_recursive_items(tmp_path):
    for rel in ["c10/a.png", "c2/sub/deep/b10.png", "c2/sub/deep/b9.png", "c2/a.PNG", "c1/x.jpeg"]:
        solid(tmp_path / rel, (1, 2, 3))
    found = scan(tmp_path)
    assert found.labels == "folders"
    assert found.classes == ["c1", "c10", "c2"]  # torchvision's order: plain sorted
    assert found.items == [  # items: natural order
        ("c1/x.jpeg", 0),
        ("c2/a.PNG", 2),
        ("c2/sub/deep/b9.png", 2),
        ("c2/sub/deep/b10.png", 2),
        ("c10/a.png", 1),
    ]
    assert found.skipped == []


def test_flat_folder_is_one_unlabeled_set(tmp_path):
    rels = make_flat(tmp_path, n=4)
    found = scan(tmp_path)
    assert found.labels == "none" and found.classes == []
    assert found.items == [(r, -1) for r in rels]


def test_every_extension_in_any_case_and_non_images_ignored(tmp_path):
    exts = [".jpg", ".JPEG", ".png", ".Bmp", ".gif", ".webp", ".TIF", ".tiff", ".ppm", ".pgm"]
    for i, ext in enumerate(exts):
        (tmp_path / f"f{i}{ext}").write_bytes(b"x")
    (tmp_path / "README.txt").write_text("hi")
    (tmp_path / ".DS_Store").write_bytes(b"\0")
    (tmp_path / ".hidden.jpg").write_bytes(b"x")
    found = scan(tmp_path)
    assert [p for p, _ in found.items] == [f"f{i}{e}" for i, e in enumerate(exts)]
    assert found.skipped == []


def test_mixed_tree_is_an_error_naming_both(tmp_path):
    solid(tmp_path / "loose.png", (0, 0, 0))
    solid(tmp_path / "cls" / "a.png", (0, 0, 0))
    with pytest.raises(SourceError) as err:
        scan(tmp_path)
    msg = str(err.value)
    assert "loose images (1, e.g. loose.png)" in msg
    assert "class folders (1, e.g. cls/)" in msg
    assert "labels='folders'" in msg and "labels='none'" in msg


def test_labels_none_and_folders_on_a_mixed_tree(tmp_path):
    solid(tmp_path / "loose.png", (0, 0, 0))
    solid(tmp_path / "cls" / "a.png", (0, 0, 0))
    none = scan(tmp_path, labels="none")
    assert none.items == [("cls/a.png", -1), ("loose.png", -1)]
    folders = scan(tmp_path, labels="folders")
    assert folders.items == [("cls/a.png", 0)]
    assert folders.skipped == [
        {"path": "loose.png", "reason": "a loose image outside the class folders"}
    ]


def test_labels_folders_on_a_flat_folder_is_an_error(tmp_path):
    make_flat(tmp_path, n=2)
    with pytest.raises(SourceError, match="no subfolders with images"):
        scan(tmp_path, labels="folders")


def test_missing_file_and_empty_sources(tmp_path):
    with pytest.raises(SourceError, match="source folder not found: .*nope"):
        scan(tmp_path / "nope")
    (tmp_path / "f.png").write_bytes(b"x")
    with pytest.raises(SourceError, match="must be a folder of images, got a file"):
        scan(tmp_path / "f.png")
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "notes.txt").write_text("x")
    with pytest.raises(SourceError) as err:
        scan(empty)
    assert "no images found in" in str(err.value)
    assert ".jpg, .jpeg, .png, .bmp, .gif, .webp, .tif, .tiff, .ppm, .pgm" in str(err.value)


def test_symlinks_broken_loops_and_special_files(tmp_path):
    make_tree(tmp_path, classes=("a",), per_class=1)
    os.symlink(tmp_path / "gone.png", tmp_path / "a" / "broken.png")
    os.symlink(tmp_path / "a" / "l2.jpg", tmp_path / "a" / "l1.jpg")
    os.symlink(tmp_path / "a" / "l1.jpg", tmp_path / "a" / "l2.jpg")
    os.symlink(tmp_path / "a", tmp_path / "a" / "back")  # directory loop
    os.symlink(tmp_path / "a" / "img0.png", tmp_path / "a" / "alias.png")  # fine: followed
    os.mkfifo(tmp_path / "a" / "pipe.jpg")
    os.symlink(tmp_path / "gone", tmp_path / "a" / "broken_dir")  # no image extension: ignored
    found = scan(tmp_path)
    assert found.items == [("a/alias.png", 0), ("a/img0.png", 0)]
    assert found.skipped == [
        {"path": "a/back", "reason": "symlink loop"},
        {"path": "a/broken.png", "reason": "broken symlink"},
        {"path": "a/l1.jpg", "reason": "symlink loop"},
        {"path": "a/l2.jpg", "reason": "symlink loop"},
        {"path": "a/pipe.jpg", "reason": "not a regular file"},
    ]


def test_followed_directory_symlink(tmp_path):
    other = tmp_path / "elsewhere"
    solid(other / "x.png", (1, 1, 1))
    src = tmp_path / "src"
    make_tree(src, classes=("a",), per_class=1)
    os.symlink(other, src / "a" / "linked")
    assert [p for p, _ in scan(src).items] == ["a/img0.png", "a/linked/x.png"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_unreadable_folder_is_reported(tmp_path: Path):
    make_tree(tmp_path, classes=("a", "b"), per_class=1)
    (tmp_path / "b").chmod(0)
    try:
        found = scan(tmp_path)
    finally:
        (tmp_path / "b").chmod(0o755)
    assert found.skipped == [{"path": "b", "reason": "unreadable folder: Permission denied"}]


def test_plain_files_are_not_stat_ed_one_by_one(tmp_path, monkeypatch):
    """Their kind comes from the folder listing: on a network file system a `stat` of each of
    1.8 million files is a round trip each. Symlinks are still followed (and checked)."""
    from mixshard.writing.sources import scanning

    make_tree(tmp_path, classes=("a", "b"), per_class=10)
    (tmp_path / "a" / "notes.txt").write_text("not an image")
    os.symlink(tmp_path / "b" / "img0.png", tmp_path / "a" / "alias.png")
    calls: list[str] = []
    real = os.stat

    def counted(path, *args, **kwargs):
        calls.append(os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(scanning.os, "stat", counted)
    found = scan(tmp_path)
    assert len(found.items) == 21 and ("a/alias.png", 0) in found.items
    # of the 22 files only the symlink (the rest are checks of the folders: index.json, ...)
    assert [c for c in calls if c.endswith((".png", ".txt"))] == [str(tmp_path / "a/alias.png")]
    assert len(calls) < 10

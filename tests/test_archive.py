"""`pack` straight from a .tar, .tar.gz or .zip: byte-identical to packing the extracted folder
(whatever the workers, resumed after a kill, as job-array parts), and every hostile member."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from helpers import bad_images, files, make_tree, noise, run
from test_resume import stop_after

import mixshard
from mixshard import Manifest, SourceError
from mixshard.core.errors import PackInterrupted

ARGS = ["--size", "12", "--shard-size", "16", "--block-size", "4"]


def tree(root: Path) -> Path:
    """An extracted dataset: `ds/train/<class>/...` with bad images, an empty class, hidden
    files, a non-image file and names that sort naturally (img2 before img10)."""
    train = root / "ds" / "train"
    make_tree(train, classes=("a", "b", "c"), per_class=14)
    bad_images(train)
    for i in (2, 10):
        noise(train / "c" / f"img{i}.jpg", size=(40, 50), seed=i)
    (train / "d_empty").mkdir()
    (train / ".hidden").mkdir()
    noise(train / ".hidden" / "x.png")
    noise(train / "a" / ".x.png")
    (train / "a" / "README.txt").write_text("not an image")
    noise(root / "ds" / "val" / "a" / "v.png")
    return train


def archive(root: Path, kind: str) -> Path:
    """`root/ds` as a tar, tar.gz or zip holding `ds/...` (members in file-system order)."""
    path = root / f"ds.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted((root / "ds").rglob("*"), reverse=True):  # not sorted order
                zf.write(p, p.relative_to(root))
    else:
        with tarfile.open(path, "w:gz" if kind == "tar.gz" else "w") as tf:
            tf.add(root / "ds", arcname="ds")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    """The extracted tree and its folder pack (the reference bytes)."""
    root = tmp_path_factory.mktemp("archive")
    train = tree(root)
    ref = root / "ref"
    assert run("pack", train, ref, *ARGS, "--workers", 1).exit_code == 0
    return root, ref


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "zip"])
@pytest.mark.parametrize("workers", [1, 2])
def test_an_archive_packs_byte_identical_to_its_extracted_folder(data, tmp_path, kind, workers):
    root, ref = data
    out = tmp_path / "out"
    res = run("pack", archive(root, kind), out, *ARGS, "--within", "ds/train", "--workers", workers)
    assert res.exit_code == 0, res.output
    assert "Packed 44 images (6 skipped)" in res.output
    assert files(out) == files(ref)
    skipped = {s["path"]: s["reason"] for s in Manifest.load(out).skipped}
    assert skipped["b/bomb.png"].startswith("decompression bomb:")
    assert skipped["d_empty"] == "empty class folder: no images (its label stays reserved)"
    assert Manifest.load(out).classes == (".hidden", "a", "b", "c", "d_empty")


def test_the_archive_root_and_a_missing_folder_are_named(data, tmp_path):
    root, _ = data
    tar = archive(root, "tar")
    res = run("pack", tar, tmp_path / "out", *ARGS)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {tar} holds one folder, ds/, of dataset splits (train, val): pass --within "
        "ds/train to pack one split, as if the archive had been extracted and that folder given\n"
    )
    res = run("pack", tar, tmp_path / "out", *ARGS, "--within", "ds/test")
    assert res.exit_code == 1
    assert res.output == f"Error: {tar} holds no folder 'ds/test'; its top level holds: ds\n"
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="within='train' picks a folder inside an archive, but"):
        mixshard.pack(root / "ds", tmp_path / "out", within="train")
    # within='.' is the root, as given: its one folder holds train and val, which are refused
    # as one class unless labels='folders' says they really are
    res = run("pack", tar, tmp_path / "root", *ARGS, "--within", ".", "--labels", "none")
    assert (res.exit_code, res.output) == (
        1,
        f"Error: {tar} holds dataset splits one level down (ds/train, ds/val), not classes; "
        "pass one split as the source instead, e.g. --within ds/train (or pass --labels "
        "folders if they really are classes)\n",
    )
    res = run("pack", tar, tmp_path / "root", *ARGS, "--within", ".", "--labels", "folders")
    assert res.exit_code == 0 and "Packed 45 images" in res.output


def test_job_array_parts_from_an_archive(data, tmp_path):
    root, ref = data
    tar, out = archive(root, "tar"), tmp_path / "out"
    for k in (1, 0, 2):
        res = run("pack", tar, out, *ARGS, "--within", "ds/train", "--part", f"{k}/3")
        assert res.exit_code == 0, res.output
    assert run("pack", tar, out, *ARGS, "--within", "ds/train", "--finish").exit_code == 0
    assert files(out) == files(ref)


def test_kill_9_then_resume_from_an_archive(tmp_path):
    src = tmp_path / "ds" / "train"
    for i in range(300):
        noise(src / f"c{i % 3}" / f"{i}.png", size=(96, 72), seed=i)
    ref, out = tmp_path / "ref", tmp_path / "out"
    assert run("pack", src, ref, *ARGS, "--workers", 1).exit_code == 0
    tar = archive(tmp_path, "tar")
    args = [str(tar), str(out), *ARGS, "--within", "ds/train", "--workers", "2", "-q"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mixshard", "pack", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    os.killpg(proc.pid, signal.SIGSTOP)
    stop_after(proc, out, 3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    res = run("pack", *args[:-3], "--workers", 1, "--resume")
    assert res.exit_code == 0, res.output
    assert "reused from earlier runs" in res.output
    assert files(out) == files(ref)


def member(tf: tarfile.TarFile, name: str, data: bytes = b"", **attrs) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    tf.addfile(info, io.BytesIO(data))


def test_hostile_tar_members_are_skipped_and_never_read(tmp_path):
    good = noise(tmp_path / "g.png").read_bytes()
    tar = tmp_path / "x.tar"
    with tarfile.open(tar, "w", format=tarfile.GNU_FORMAT) as tf:
        member(tf, "set/ok.png", good)
        member(tf, "set/../../escape.png", good)
        member(tf, "/etc/abs.png", good)
        member(tf, "set/sym.png", type=tarfile.SYMTYPE, linkname="ok.png")
        member(tf, "set/hard.png", type=tarfile.LNKTYPE, linkname="set/ok.png")
        member(tf, "set/dev.png", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        member(tf, "set/fifo.jpg", type=tarfile.FIFOTYPE)
        member(tf, "set/caf\udce9.png", good)  # a name that is not UTF-8
        member(tf, "set/twice.png", b"first, not an image")
        member(tf, "set/twice.png", good)  # extraction keeps the last
    out = tmp_path / "out"
    res = run("pack", tar, out, "--size", 8, "--within", "set", "--workers", 1)
    assert res.exit_code == 0, res.output
    m = Manifest.load(out)
    assert m.count == 4  # ok, caf\xe9, twice and hard (read as ok.png: its own test is in
    # test_hostile_packing.py)
    assert sorted(s["path"] for s in m.skipped) == sorted(
        ["/etc/abs.png", "set/../../escape.png", "dev.png", "fifo.jpg", "sym.png"]
    )
    reasons = {s["path"]: s["reason"] for s in m.skipped}
    assert reasons["/etc/abs.png"] == "unsafe member name (absolute or with '..'): not read"
    assert reasons["sym.png"] == "a link inside the archive: not followed"
    assert reasons["dev.png"] == reasons["fifo.jpg"] == "not a regular file"
    assert not (tmp_path / "escape.png").exists()


def test_a_truncated_archive_is_named_before_out_is_touched(data, tmp_path):
    root, _ = data
    for kind in ("tar", "tar.gz", "zip"):
        whole = archive(root, kind).read_bytes()
        cut = tmp_path / f"cut.{kind}"
        cut.write_bytes(whole[: len(whole) // 2])
        with pytest.raises(SourceError) as err:
            mixshard.pack(cut, tmp_path / "out", within="ds/train")
        assert str(err.value).startswith(f"{cut} is truncated or damaged (")
        assert str(err.value).endswith(
            "download it again (or check it against its published checksum)"
        )
        assert not (tmp_path / "out").exists()


def test_an_archive_cut_while_packing_keeps_finished_shards(data, tmp_path, monkeypatch):
    root, ref = data
    tar = archive(root, "tar")
    from mixshard.writing.sources import archive as archive_mod

    real = archive_mod.MemberReader.fetch
    calls = []

    def cut_later(self, key, ref):
        calls.append(key)
        if len(calls) > 20:  # the archive "ends" after the first shard's images
            os.truncate(tar, 10240)
        return real(self, key, ref)

    monkeypatch.setattr(archive_mod.MemberReader, "fetch", cut_later)
    out = tmp_path / "out"
    with pytest.raises(PackInterrupted) as err:
        mixshard.pack(tar, out, size=12, shard_size=16, block_size=4, workers=1, within="ds/train")
    assert str(err.value).startswith(f"{tar} ends inside member ")
    assert str(err.value).endswith("replaced while packing; finished shards are kept")
    assert (out / "shard-000000.tar").read_bytes() == (ref / "shard-000000.tar").read_bytes()
    assert not (out / "index.json").exists()


def test_a_damaged_zip_member_is_skipped(tmp_path):
    good = noise(tmp_path / "g.png").read_bytes()
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("set/a.png", good)
        zf.writestr("set/b.png", good)
    raw = bytearray(path.read_bytes())
    at = raw.index(good) + len(good) // 2
    raw[at] ^= 0xFF  # the first member's CRC no longer matches
    path.write_bytes(bytes(raw))
    out = tmp_path / "out"
    mixshard.pack(path, out, size=8, within="set", workers=1)
    m = Manifest.load(out)
    assert m.count == 1
    assert m.skipped[0]["path"] == "a.png"
    assert m.skipped[0]["reason"].startswith("corrupt archive member: Bad CRC-32")


def test_a_compressed_tar_named_tar_and_a_plain_file(data, tmp_path):
    root, ref = data
    misnamed = tmp_path / "ds.tar"
    misnamed.write_bytes(archive(root, "tar.gz").read_bytes())  # gzip inside, .tar outside
    out = tmp_path / "out"
    mixshard.pack(misnamed, out, size=12, shard_size=16, block_size=4, within="ds/train")
    assert files(out) == files(ref)
    image = noise(tmp_path / "one.jpg")
    res = run("pack", image, tmp_path / "x")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: source must be a folder of images, got a file: {image} (an archive of one is "
        "read when its name ends in .tar, .tar.gz, .tgz, .zip)\n"
    )

"""`writing/sources/tarscan.py` lists a tar as `tarfile` does, or leaves it to `tarfile`."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from mixshard.writing.sources import archive, archivelist, tarscan
from mixshard.writing.sources.tarscan import Unusual, tar_members

FORMATS = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT, "ustar": tarfile.USTAR_FORMAT}
LONG = "deep/" + "x" * 90 + "/" + "y" * 60 + ".jpg"  # over 100 bytes: a long name in each format


def add(tf: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE,
        **kw) -> None:  # fmt: skip
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
    for key, value in kw.items():
        setattr(info, key, value)
    tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def members(tf: tarfile.TarFile, fmt: str) -> None:
    add(tf, "ds/", kind=tarfile.DIRTYPE)
    add(tf, "ds/a/1.jpg", b"\xff\xd8\xff" + bytes(700))
    add(tf, "ds/a/empty.jpg", b"")
    add(tf, "ds/a/block.jpg", bytes(1024))  # exactly two blocks of data
    add(tf, "ds/a/link.jpg", kind=tarfile.SYMTYPE, linkname="1.jpg")
    add(tf, "ds/a/hard.jpg", kind=tarfile.LNKTYPE, linkname="ds/a/1.jpg")
    add(tf, "ds/a/fifo.jpg", kind=tarfile.FIFOTYPE)
    add(tf, "ds/a/dev.jpg", kind=tarfile.CHRTYPE, devmajor=1, devminor=3)
    add(tf, "ds/b/été.jpg", b"caf\xc3\xa9")
    add(tf, "ds/b/" + LONG, b"long" * 50)
    add(tf, "ds/b/t.jpg", b"sub-second time", mtime=1.5)
    add(tf, "../escape.jpg", b"x")
    add(tf, "/abs.jpg", b"y")
    if fmt != "pax":  # a name that is not UTF-8 (PAX would write it as such)
        add(tf, "ds/b/caf\udce9.jpg", b"latin-1 name")


def reference(path) -> list[tuple[str, str, int, int, str]]:
    with tarfile.open(path, "r:") as tf:
        return [
            (i.name, archivelist.tar_kind(i), i.offset_data, i.size, i.islnk() and i.linkname or "")
            for i in tf
        ]


def fast(path) -> list[tuple[str, str, int, int, str]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return list(tar_members(fd))
    finally:
        os.close(fd)


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_members_are_the_ones_tarfile_lists(tmp_path, fmt):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=FORMATS[fmt], encoding="utf-8",
                      errors="surrogateescape") as tf:  # fmt: skip
        members(tf, fmt)
    expected = reference(path)
    assert len(expected) == (13 if fmt == "pax" else 14)
    assert fast(path) == expected
    kinds = {name: kind for name, kind, _, _, _ in expected}
    assert (kinds["ds/a/link.jpg"], kinds["ds/a/hard.jpg"]) == ("link", "hardlink")
    assert {e[0]: e[4] for e in expected}["ds/a/hard.jpg"] == "ds/a/1.jpg"
    assert kinds["ds/a/fifo.jpg"] == kinds["ds/a/dev.jpg"] == "other"
    assert kinds["ds"] == "dir" and kinds["ds/b/" + LONG] == "file"


def test_a_pack_lists_the_same_images_with_or_without_tarfile(tmp_path, monkeypatch):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        members(tf, "gnu")
    quick = archive.open_source(path, "ds")
    used = []

    def unusual(fd: int) -> list:
        used.append(fd)
        raise Unusual("as if")

    monkeypatch.setattr(archivelist, "tar_members", unusual)
    slow = archive.open_source(path, "ds")
    assert used and quick == slow
    assert sorted(quick[0].refs) == sorted(["a/1.jpg", "a/block.jpg", "a/empty.jpg", "a/hard.jpg",
                                            "b/" + LONG, "b/caf\udce9.jpg", "b/t.jpg",
                                            "b/été.jpg"])  # fmt: skip
    assert quick[0].refs["a/hard.jpg"] == quick[0].refs["a/1.jpg"]  # a hard link reads its target


def corrupt(data: bytearray, fmt: str) -> None:
    """Damage the header of the second member (`ds/a/1.jpg`) in ways tarscan leaves alone."""
    second = 512  # `ds/` has no data
    if fmt == "checksum":
        data[second + 5] ^= 0x20
    elif fmt == "base256":
        data[second + 124 : second + 136] = b"\x80" + bytes(10) + b"\x05"
    elif fmt in ("sparse", "global"):
        data[second + 156 : second + 157] = b"S" if fmt == "sparse" else b"g"
    elif fmt == "octal":
        data[second + 124 : second + 136] = b"12x4567\0\0\0\0\0"
    if fmt == "checksum":
        return
    data[second + 148 : second + 156] = b" " * 8  # the checksum of what is there now
    chk = sum(data[second : second + 512])
    data[second + 148 : second + 156] = b"%06o\0 " % chk


@pytest.mark.parametrize("damage", ["checksum", "base256", "sparse", "global", "octal", "cut"])
def test_unusual_headers_are_left_to_tarfile(tmp_path, damage):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        members(tf, "gnu")
    data = bytearray(path.read_bytes())
    if damage == "cut":
        data = data[: 512 * 3 + 100]  # inside the second member's data
    else:
        corrupt(data, damage)
    path.write_bytes(bytes(data))
    with pytest.raises(Unusual):
        fast(path)


def test_an_empty_file_and_an_archive_of_zeros(tmp_path):
    (tmp_path / "empty.tar").write_bytes(b"")
    with pytest.raises(Unusual):
        fast(tmp_path / "empty.tar")
    (tmp_path / "zeros.tar").write_bytes(bytes(10240))
    assert fast(tmp_path / "zeros.tar") == reference(tmp_path / "zeros.tar") == []


def record(key: str, value: bytes) -> bytes:
    body = f" {key}=".encode() + value + b"\n"
    n = len(body) + 1
    n += len(str(n)) - 1
    return str(n).encode() + body


def test_pax_records_it_does_not_know_are_left_to_tarfile():
    assert tarscan._pax(record("path", b"a/b") + record("size", b"42")) == {
        b"path": b"a/b",
        b"size": b"42",
    }
    for bad in (
        record("hdrcharset", b"BINARY"),
        record("GNU.sparse.map", b"0,512"),
        b"99 path=short\n",  # longer than the header
        b"x3 path=a\n",  # not a length
    ):
        with pytest.raises(Unusual):
            tarscan._pax(bad)


def test_pax_sizes_old_folders_and_an_archive_without_its_end_marker(tmp_path):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("ds/a/sized.jpg")
        info.size, info.pax_headers = 600, {"size": "600"}
        tf.addfile(info, io.BytesIO(bytes(600)))
        add(tf, "ds/old/", kind=tarfile.AREGTYPE)  # a folder as an old tar wrote it
        add(tf, "ds/a/last.jpg", b"z" * 10)
    expected = reference(path)
    assert fast(path) == expected and expected[1][:2] == ("ds/old", "dir")
    assert expected[0][3] == 600
    data = path.read_bytes()
    end = expected[-1][2] + 512  # the last member's data, padded: no end-of-archive blocks
    path.write_bytes(data[:end])
    assert fast(path) == reference(path) == expected


def test_a_pax_path_that_is_not_utf8_and_extended_headers_in_a_row(tmp_path):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        add(tf, "ds/" + "n" * 120 + ".jpg", b"long")  # a PAX path record
    data = bytearray(path.read_bytes())
    at = data.index(b"path=ds/") + len("path=ds/")
    data[at] = 0xE9  # latin-1, not UTF-8
    (tmp_path / "b.tar").write_bytes(bytes(data))
    with pytest.raises(Unusual):
        fast(tmp_path / "b.tar")
    twice = bytes(path.read_bytes()[:1024]) * 2 + bytes(path.read_bytes()[1024:])
    (tmp_path / "c.tar").write_bytes(twice)  # a PAX header, then another
    with pytest.raises(Unusual):
        fast(tmp_path / "c.tar")

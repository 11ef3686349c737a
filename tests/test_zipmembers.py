"""`writing/sources/zipmembers.py` reads a zip member's bytes as `zipfile` does, or leaves it
to it."""

from __future__ import annotations

import os
import stat
import zipfile

import pytest

from mixshard.core.errors import ImageDecodeError
from mixshard.writing.sources.zipmembers import zip_data, zip_kind


@pytest.fixture()
def zipped(tmp_path):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("s/stored.jpg"), b"\xff\xd8\xff" + os.urandom(3000))
        zf.writestr("s/deflated.jpg", b"ab" * 5000, compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr("s/bz.jpg", b"cd" * 500, compress_type=zipfile.ZIP_BZIP2)
        zf.writestr("s/xz.jpg", b"ef" * 500, compress_type=zipfile.ZIP_LZMA)
        zf.writestr("s/été.jpg", b"utf-8 name")
        zf.writestr("s/empty.jpg", b"")
    return path


def fast_read(path, info):
    fd = os.open(path, os.O_RDONLY)
    try:
        return zip_data(fd, info)
    finally:
        os.close(fd)


def read_all(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        with zipfile.ZipFile(path) as zf:
            return [(zip_data(fd, i), zf.read(i)) for i in zf.infolist()]
    finally:
        os.close(fd)


def test_stored_and_deflated_members_read_as_zipfile_reads_them(zipped):
    got = read_all(zipped)
    assert [fast == slow for fast, slow in got] == [True, True, True, False, True, True]
    assert got[3][0] is None  # lzma: left to zipfile


@pytest.mark.parametrize("damage", ["data", "name", "header"])
def test_a_damaged_member_is_left_to_zipfile(zipped, damage):
    data = bytearray(zipped.read_bytes())
    with zipfile.ZipFile(zipped) as zf:
        info = zf.getinfo("s/stored.jpg")
    start = info.header_offset
    if damage == "data":
        data[start + 30 + len("s/stored.jpg") + 100] ^= 1  # the CRC no longer matches
    elif damage == "name":
        data[start + 30] = ord("t")  # the local name differs from the directory's
    else:
        data[start : start + 4] = b"PK\0\0"
    zipped.write_bytes(bytes(data))
    assert fast_read(zipped, info) is None
    with zipfile.ZipFile(zipped) as zf, pytest.raises(zipfile.BadZipFile):
        zf.read(info)


def test_a_damaged_deflate_stream_and_a_link(tmp_path):
    path = tmp_path / "b.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("d.jpg", os.urandom(2000) + b"a" * 4000, compress_type=zipfile.ZIP_DEFLATED)
        link = zipfile.ZipInfo("l.jpg")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "d.jpg")
    with zipfile.ZipFile(path) as zf:
        info, link = zf.infolist()
    assert (zip_kind(info), zip_kind(link)) == ("file", "link")
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len("d.jpg")
    data[start : start + 8] = b"\xff" * 8  # not a deflate stream any more
    path.write_bytes(bytes(data))
    assert fast_read(path, info) is None


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2])
def test_a_member_inflating_past_its_declared_size_is_refused(tmp_path, method):
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("b.png", bytes(8 << 20), compress_type=method)
    raw = bytearray(path.read_bytes())
    local, central = raw.index(b"b.png") - 30, raw.rindex(b"b.png") - 46
    raw[local + 22 : local + 26] = (100).to_bytes(4, "little")  # declares 100 bytes
    raw[central + 24 : central + 28] = (100).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("b.png")
    assert info.file_size == 100
    with pytest.raises(ImageDecodeError) as err:
        fast_read(path, info)
    assert err.value.reason == (
        "corrupt archive member: it inflates past its declared size of 100 bytes (a zip "
        "bomb?); not read further"
    )


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2])
def test_a_large_member_that_is_no_image_is_refused_from_its_first_bytes(tmp_path, method):
    import tracemalloc

    path = tmp_path / "z.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("zeros.png", bytes(32 << 20), compress_type=method)  # 32 MB, declared
        zf.writestr("png.png", b"\x89PNG\r\n\x1a\n" + bytes(2 << 20), compress_type=method)
    with zipfile.ZipFile(path) as zf:
        zeros, png = zf.infolist()
    tracemalloc.start()
    try:
        with pytest.raises(ImageDecodeError) as err:
            fast_read(path, zeros)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.reason == "not an image PIL can read (cannot identify image file)"
    assert peak < 3 << 20  # one compressed chunk at most, never the 32 MB
    assert fast_read(path, png) == b"\x89PNG\r\n\x1a\n" + bytes(2 << 20)  # read whole


def test_a_stream_whose_output_outlasts_its_input_is_read_whole(tmp_path):
    """All the compressed bytes fit one read, and inflating them goes on after they are
    consumed (zeros: ~1,000 bytes out per byte in); sniffing stops after 16 bytes."""
    path = tmp_path / "z.zip"
    data = b"\x89PNG\r\n\x1a\n" + bytes(5 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.png", data)
    with zipfile.ZipFile(path) as zf:
        (info,) = zf.infolist()
    assert info.compress_size < 1 << 20
    assert fast_read(path, info) == data

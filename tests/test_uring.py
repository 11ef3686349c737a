"""The global order's reads through io_uring (`reading/uring.py`) and without it: the same
bytes, the same errors, rings closed with the pack, a forked child's own rings."""

from __future__ import annotations

import ctypes
import errno
import os
import select
import shutil
import signal

import numpy as np
import pytest
from helpers import read_pack

import mixshard
from mixshard.core.errors import ShardError
from mixshard.reading import uring
from mixshard.reading.local import LocalPack

HAVE_RING = uring.RingPool().available and uring._SYSCALL is not None
try:
    uring.Ring().close()
except OSError:
    HAVE_RING = False
needs_ring = pytest.mark.skipif(not HAVE_RING, reason="io_uring is not available here")


@pytest.fixture(scope="module")
def pack_dir(pack96):
    return pack96


def open_pack(folder, ring: bool) -> LocalPack:
    pack = LocalPack(folder, mixshard.Manifest.load(folder))
    pack._rings.available = ring and HAVE_RING
    return pack


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("ring", [True, False], ids=["uring", "pread"])
def test_a_batch_reads_the_stored_images_either_way(pack_dir, ring):
    images = read_pack(pack_dir)[0]
    pack = open_pack(pack_dir, ring)
    index = np.random.default_rng(3).permutation(96)[:52]
    out = np.empty((len(index), 3, 8, 8), np.uint8)
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, images[index])
    many = np.random.default_rng(4).integers(0, 96, 700)  # more than one ring's 256 entries
    out = np.empty((700, 3, 8, 8), np.uint8)
    assert pack.read_images(many, out) is None
    assert np.array_equal(out, images[many])
    assert pack.read_images(np.zeros(0, np.int64), out) is None
    pack.close()


@needs_ring
def test_the_ring_is_used_and_given_back_and_closed_with_the_pack(pack_dir, monkeypatch):
    pack = open_pack(pack_dir, True)
    before = _fds()
    made = []
    real = uring.Ring.__init__
    monkeypatch.setattr(uring.Ring, "__init__", lambda self: made.append(1) or real(self))
    out = np.empty((5, 3, 8, 8), np.uint8)
    for _ in range(3):
        pack.read_images(np.array([0, 30, 60, 90, 5]), out)
    assert len(made) == 1  # one ring, used again by each call
    assert _fds() == before + 1 + 4  # the ring and the four shards
    pack.close()
    assert _fds() == before


@pytest.mark.parametrize("ring", [True, False], ids=["uring", "pread"])
def test_a_shard_cut_short_is_named_either_way(pack_dir, tmp_path, ring):
    folder = tmp_path / "pack"
    shutil.copytree(pack_dir, folder)
    pack = open_pack(folder, ring)
    pack.read_images(np.arange(96), np.empty((96, 3, 8, 8), np.uint8))  # every block checked
    shard = folder / pack.shards[3].name
    os.truncate(shard, pack.block_offset[-1] + 10)  # inside the last block's images
    with pytest.raises(ShardError) as err:
        pack.read_images(np.array([1, 95]), np.empty((2, 3, 8, 8), np.uint8))
    assert str(shard) in str(err.value)
    assert any(w in str(err.value) for w in ("ends early", "changed after the pack was opened"))


class _FakeEnter:
    """`_SYSCALL` whose first `io_uring_enter` fails with `code` before doing anything."""

    def __init__(self, code: int) -> None:
        self.code, self.calls, self.real = code, 0, uring._SYSCALL

    def __call__(self, number, *args):  # noqa: ANN001, ANN204
        if number.value == uring._ENTER:
            self.calls += 1
            if self.calls == 1:
                ctypes.set_errno(self.code)
                return -1
        return self.real(number, *args)


@needs_ring
@pytest.mark.parametrize("code", [errno.EINTR, errno.EBADF])
def test_an_interrupted_call_is_made_again_and_a_failed_one_falls_back(pack_dir, monkeypatch, code):
    images = read_pack(pack_dir)[0]
    pack = open_pack(pack_dir, True)
    fake = _FakeEnter(code)
    monkeypatch.setattr(uring, "_SYSCALL", fake)
    index = np.array([7, 50, 3, 88])
    out = np.zeros((4, 3, 8, 8), np.uint8)
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, images[index])
    if code == errno.EINTR:
        assert fake.calls == 2 and len(pack._rings._idle) == 1  # the same ring, asked again
    else:
        assert fake.calls == 1 and len(pack._rings._idle) == 0  # dropped; read by pread
        assert pack._rings.available  # a failed call is not a refused ring


def test_a_refused_ring_reads_one_pread_each_from_then_on(pack_dir, monkeypatch):
    images = read_pack(pack_dir)[0]
    pack = open_pack(pack_dir, True)
    pack._rings.available = True

    def refuse(self) -> None:
        raise OSError(errno.EPERM, "refused by a seccomp filter")

    monkeypatch.setattr(uring.Ring, "__init__", refuse)
    out = np.empty((3, 3, 8, 8), np.uint8)
    assert pack.read_images(np.array([2, 40, 80]), out) is None
    assert np.array_equal(out, images[[2, 40, 80]])
    assert not pack._rings.available


def test_rings_are_off_when_asked(monkeypatch):
    monkeypatch.setenv("MIXSHARD_IO_URING", "0")
    assert not uring.RingPool().available
    monkeypatch.setenv("MIXSHARD_IO_URING", "1")
    assert uring.RingPool().available == (uring._SYSCALL is not None)


@needs_ring
def test_a_forked_child_makes_its_own_rings(pack_dir):
    """The parent's rings are shared memory: a child that used them would corrupt the
    parent's reads. The child reads with new rings; the parent's go on working."""
    images = read_pack(pack_dir)[0]
    pack = open_pack(pack_dir, True)
    out = np.empty((4, 3, 8, 8), np.uint8)
    pack.read_images(np.array([0, 1, 2, 3]), out)
    parent_ring = pack._rings._idle[0]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reports whether its reads were right and its ring new
        try:
            ok = pack.read_images(np.array([9, 60]), out[:2]) is None
            ok = ok and np.array_equal(out[:2], images[[9, 60]])
            ok = ok and pack._rings._idle and pack._rings._idle[0] is not parent_ring
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    ready = select.select([r], [], [], 60)[0]  # a child stuck on a lock must not hang the suite
    if not ready:
        os.kill(pid, signal.SIGKILL)
    answer = os.read(r, 1) if ready else b"no answer within 60 s"
    os.close(r)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert pack.read_images(np.array([70, 71]), out[:2]) is None
    assert np.array_equal(out[:2], images[[70, 71]])
    assert pack._rings._idle == [parent_ring]


def test_without_a_ring_a_read_that_fails_is_handed_back():
    out = np.zeros((2, 16), np.uint8)
    r, w = os.pipe()
    os.close(w)
    pool = uring.RingPool()
    pool.available = False
    rows, offsets = np.array([1, 0]), np.array([0, 0])
    assert uring.read_rows(pool, out, rows, np.array([-1, r], np.int32), offsets, 16) == [0, 1]
    os.close(r)  # a bad descriptor (EBADF), then a pipe (ESPIPE): both for the caller


@needs_ring
def test_a_ring_refused_for_now_is_asked_for_again(pack_dir, monkeypatch):
    images = read_pack(pack_dir)[0]
    pack = open_pack(pack_dir, True)
    real, refused = uring._SYSCALL, []

    def no_memory(number, *args):  # noqa: ANN001, ANN202
        if number.value == uring._SETUP and not refused:
            refused.append(1)
            ctypes.set_errno(errno.ENOMEM)
            return -1
        return real(number, *args)

    monkeypatch.setattr(uring, "_SYSCALL", no_memory)
    out = np.empty((2, 3, 8, 8), np.uint8)
    for _ in range(2):
        assert pack.read_images(np.array([4, 44]), out) is None
        assert np.array_equal(out, images[[4, 44]])
    assert refused == [1] and pack._rings.available and len(pack._rings._idle) == 1

"""The global order's copies out of mapped shards (`reading/pack/mapped.py`, `_mapped.c`): the same
bytes as `pread`, mapped only once warm and when the pack fits, and a shard truncated under a
mapping is a `ShardError`, never a SIGBUS that ends the process."""

from __future__ import annotations

import mmap
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from helpers import copy_pack, read_pack

import mixshard
from mixshard.core.errors import ShardError
from mixshard.reading import stream as stream_mod
from mixshard.reading.batches import plan
from mixshard.reading.pack import mapped, warming
from mixshard.reading.pack.reader import PackReader

needs_mapping = pytest.mark.skipif(mapped._mapped is None, reason="_mapped.c was not built")


@pytest.fixture(scope="module")
def pack_dir(pack96):
    return pack96


def open_pack(folder) -> PackReader:
    return PackReader(folder, mixshard.Manifest.load(folder))


def warmed(folder) -> PackReader:
    """A pack after its warm pass, mapped as the read plan `"auto"` maps it."""
    pack = open_pack(folder)
    pack.warm(threading.Event(), plan.maps_after_warm("auto", pack.manifest.total_bytes))
    return pack


def test_the_extension_is_built():
    assert mapped._mapped is not None, (
        "mixshard/reading/pack/_mapped.c was not compiled at install (no C compiler or Python "
        "headers?): the global order reads every image with pread"
    )


@needs_mapping
def test_shards_are_mapped_by_the_warm_pass_and_read_the_same_bytes(pack_dir):
    images = read_pack(pack_dir)[0]
    pack = open_pack(pack_dir)
    index = np.random.default_rng(5).permutation(96)[:60]
    out = np.empty((60, 3, 8, 8), np.uint8)
    assert pack.mapped_shards == 0  # nothing is mapped before the warm pass has read it in
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, images[index])
    pack.warm(threading.Event())  # warm only: mapped when the plan asks
    assert pack.mapped_shards == 0
    pack.close()
    pack.warm(threading.Event(), then_map=True)
    assert pack.mapped_shards == 4 == len(pack.shards)
    out[:] = 0
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, images[index])
    many = np.random.default_rng(6).integers(0, 96, 700)  # repeats, every shard
    big = np.empty((700, 3, 8, 8), np.uint8)
    assert pack.read_images(many, big) is None
    assert np.array_equal(big, images[many])
    pack.close()
    assert pack.mapped_shards == 0
    assert pack.read_images(index, out) is None  # read with pread again, then mapped again
    pack.warm(threading.Event(), then_map=True)
    assert pack.mapped_shards == 4
    pack.close()


@needs_mapping
def test_a_pack_is_mapped_whole_or_not_at_all(pack_dir, monkeypatch):
    images = read_pack(pack_dir)[0]
    real, calls = mapped._mmap, []

    def third_fails(*args):  # the third shard's mapping refused (vm.max_map_count reached)
        calls.append(args)
        return mapped._MAP_FAILED if len(calls) == 3 else real(*args)

    unmapped = []
    monkeypatch.setattr(mapped, "_mmap", third_fails)
    monkeypatch.setattr(mapped, "_munmap", lambda a, n: unmapped.append(n) or 0)
    pack = open_pack(pack_dir)
    assert not pack.map_all()
    assert pack.mapped_shards == 0 and len(unmapped) == 2  # the two made are undone
    index = np.random.default_rng(7).permutation(96)
    out = np.empty((96, 3, 8, 8), np.uint8)
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, images[index])
    monkeypatch.undo()
    assert pack.map_all() and pack.map_all(plan.MISSES_ALLOWED)
    assert pack.mapped_shards == 4
    out[:] = 0
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, images[index])
    pack.close()


@needs_mapping
@pytest.mark.parametrize("why", ["MIXSHARD_MMAP=0", "too large"])
def test_no_mapping_when_turned_off_or_the_pack_does_not_fit(pack_dir, monkeypatch, why):
    if why == "too large":  # the pack's bytes over half the available memory
        bytes_ = mixshard.Manifest.load(pack_dir).total_bytes
        monkeypatch.setattr(plan, "available_memory", lambda: 2 * bytes_ - 1)
    else:
        monkeypatch.setenv("MIXSHARD_MMAP", "0")
    pack = warmed(pack_dir)
    assert pack.mapped_shards == 0
    pack.close()
    monkeypatch.undo()
    bytes_ = mixshard.Manifest.load(pack_dir).total_bytes
    monkeypatch.setattr(plan, "available_memory", lambda: 2 * bytes_)  # just fits
    pack = warmed(pack_dir)
    assert pack.mapped_shards == 4
    pack.close()


@needs_mapping
def test_a_shard_that_cannot_be_mapped_is_read(pack_dir, tmp_path, monkeypatch):
    folder = copy_pack(pack_dir, tmp_path / "pack")
    images = read_pack(folder)[0]
    pack = open_pack(folder)
    replaced = folder / "shard-000001.tar"  # a new file of the same bytes: not the one opened
    data = replaced.read_bytes()
    replaced.unlink()
    replaced.write_bytes(data)
    pack.warm(threading.Event(), then_map=True)
    assert pack.mapped_shards == 0  # whole or none: left to the reads, which name it
    with pytest.raises(ShardError, match="shard-000001.tar changed after the pack was opened"):
        pack.read_images(np.arange(96), np.empty((96, 3, 8, 8), np.uint8))
    pack.close()

    def refused(*args, **kwargs):  # libc's mmap failing (ENOMEM: vm.max_map_count reached)
        return mapped._MAP_FAILED

    monkeypatch.setattr(mapped, "_mmap", refused)
    pack = warmed(pack_dir)
    assert pack.mapped_shards == 0
    out = np.empty((96, 3, 8, 8), np.uint8)
    assert pack.read_images(np.arange(96), out) is None
    assert np.array_equal(out, images)
    pack.close()


@needs_mapping
def test_a_shard_truncated_under_its_mapping_is_a_shard_error(pack_dir, tmp_path):
    folder = copy_pack(pack_dir, tmp_path / "pack")
    images = read_pack(folder)[0]
    pack = warmed(folder)
    assert pack.mapped_shards == 4
    shard = folder / "shard-000002.tar"
    tail = np.arange(int(pack.block_start[pack.block_shard == 2][-1]), 72)  # its last block
    out = np.empty((len(tail), 3, 8, 8), np.uint8)
    assert pack.read_images(tail, out) is None  # read (and its block checked) once
    os.truncate(shard, 4096)  # the rest of its pages leave the page cache: a fault past them
    with pytest.raises(ShardError) as err:
        pack.read_images(tail, out)  # out of the mapping: the fault is caught
    assert str(err.value).startswith(f"shard {shard} changed after the pack was opened (")
    ok = np.arange(0, 48)  # shards 0 and 1 still read, through their mappings
    out = np.empty((48, 3, 8, 8), np.uint8)
    assert pack.read_images(ok, out) is None
    assert np.array_equal(out, images[ok])
    pack.close()


@needs_mapping
def test_a_shard_rewritten_in_place_is_named_once_every_block_was_checked(pack_dir, tmp_path):
    # every block checked: a batch skips the first-read checks, not the files' identity
    folder = copy_pack(pack_dir, tmp_path / "pack")
    images = read_pack(folder)[0]
    pack = warmed(folder)
    out = np.empty((96, 3, 8, 8), np.uint8)
    assert pack.read_images(np.arange(96), out) is None
    shard = folder / "shard-000003.tar"
    shard.write_bytes(shard.read_bytes())  # the same bytes in the same file, as a writer would
    os.utime(shard, ns=(1, 1))  # (a new mtime, even within the clock's tick)
    with pytest.raises(ShardError, match="shard-000003.tar changed after the pack was opened"):
        pack.read_images(np.array([5, 80]), out)
    assert pack.read_images(np.arange(72), out) is None  # the other shards are still read
    assert np.array_equal(out[:72], images[:72])
    pack.close()


@needs_mapping
def test_copy_rows_checks_its_arrays_and_the_mapping_ends(pack_dir):
    pack = warmed(pack_dir)
    maps, size = pack._maps, pack.manifest.image_bytes
    out = np.zeros((4, 3, 8, 8), np.uint8)
    first = int(pack.block_offset[0])
    rows, slots = np.arange(2), np.zeros(2, np.int64)
    with maps.held():
        status, j = maps.copy(out, rows, slots, np.array([first, first + size]), size)
        assert (status, j) == (0, 2)
        assert np.array_equal(out[:2], read_pack(pack_dir)[0][:2])
        end = pack.shards[0].bytes
        status, j = maps.copy(out, rows, slots, np.array([first, end - size + 1]), size)
        assert (status, j) == (1, 1)  # past the end of the mapping: not copied
        status, j = maps.copy(out, rows, slots, np.array([-1, first]), size)
        assert (status, j) == (1, 0)
        for bad_rows, bad_slots in ((np.array([0, 4]), slots), (rows, np.array([0, 9]))):
            with pytest.raises(ValueError, match="copy_rows: arrays do not match"):
                maps.copy(out, bad_rows, bad_slots, np.array([first, first]), size)
    pack.close()
    with pytest.raises(ValueError, match="copy_rows: arrays do not match"):  # unmapped
        maps.copy(out, rows, slots, np.array([first, first]), size)


@needs_mapping
@pytest.mark.parametrize("row_bytes", [1, 63, 64, 65, 2047, 2048, 2049, 3 * 84 * 84])
def test_copy_rows_copies_every_byte_of_any_row_size_into_unaligned_rows(row_bytes):
    """The copy streams 64-byte pieces past the caches from a 16-byte-aligned start, in chunks
    with the next row prefetched: the bytes before, between and after them land too."""
    rng = np.random.default_rng(row_bytes)
    source = rng.integers(0, 256, 2 * 10 * row_bytes + 5, np.uint8)
    halves = np.array([source.ctypes.data, source.ctypes.data + 10 * row_bytes], np.uint64)
    maps, offsets = np.array([1, 0, 1, 0, 0]), np.array([5, 3 * row_bytes, 0, 1, 9 * row_bytes])
    rows = np.array([4, 0, 2, 1, 3])
    space = np.zeros(5 * row_bytes + 3, np.uint8)
    out = space[3:]  # rows start at every alignment
    lengths = np.array([10 * row_bytes, 10 * row_bytes + 5], np.int64)
    copied = mapped._mapped.copy_rows(out, rows, maps, offsets, halves, lengths, row_bytes)
    assert copied == (0, 5)
    for row, m, at in zip(rows, maps, offsets):
        start = m * 10 * row_bytes + at
        assert np.array_equal(
            out[row * row_bytes : (row + 1) * row_bytes], source[start : start + row_bytes]
        )
    assert not space[:3].any()


@needs_mapping
def test_threads_read_while_the_pack_is_closed_and_mapped_again(pack_dir):
    images = read_pack(pack_dir)[0]
    pack = warmed(pack_dir)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        out = np.empty((32, 3, 8, 8), np.uint8)
        try:
            while not stop.is_set():
                index = rng.integers(0, 96, 32)
                pack.read_images(index, out)
                assert np.array_equal(out, images[index])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for _ in range(20):  # unmapped under the readers, then mapped again
        pack.close()
        pack.warm(threading.Event())
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    pack.close()


@needs_mapping
def test_a_forked_child_reads_through_the_inherited_mappings_and_an_unpickled_pack_maps_none(
    pack_dir,
):
    images = read_pack(pack_dir)[0]
    pack = warmed(pack_dir)
    index = np.random.default_rng(8).permutation(96)[:40]
    pid = os.fork()
    if pid == 0:  # the child: the same bytes, then its own mappings closed
        code = 1
        try:
            out = np.empty((40, 3, 8, 8), np.uint8)
            same = pack.read_images(index, out) is None and np.array_equal(out, images[index])
            was = pack.mapped_shards
            pack.close()
            code = 0 if same and was == 4 and pack.mapped_shards == 0 else 1
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    assert pack.mapped_shards == 4  # the child's close unmapped its copies only
    out = np.empty((40, 3, 8, 8), np.uint8)
    assert pack.read_images(index, out) is None
    assert np.array_equal(out, images[index])
    again = pickle.loads(pickle.dumps(pack))
    assert again.mapped_shards == 0
    pack.close()


# A SIGBUS outside a guarded copy reaches the handler that was there before (here faulthandler's,
# which names the fault and ends the process): after the copies ("before", "after": faulthandler
# enabled before the first copy or between two), or while another thread is inside a copy and
# ours is installed ("during"). A handler installed between copies is chained by the next copy.
OUTSIDE = """
    import ctypes, faulthandler, mmap, os, sys, threading, time
    import numpy as np
    from mixshard.reading.pack import _mapped
    path, order = sys.argv[1], sys.argv[2]
    if order != "after":
        faulthandler.enable()
    with open(path, "wb") as f:
        f.write(bytes(3 * 4096))
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, 3 * 4096, mmap.MAP_SHARED, mmap.PROT_READ)
    base = np.frombuffer(m, np.uint8).ctypes.data
    out = np.zeros(4096, np.uint8)
    def copy(n, at):
        one = lambda v: np.full(n, v, np.int64)
        return _mapped.copy_rows(
            out, one(0), one(0), one(at), np.array([base], np.uint64), np.array([3 * 4096]), 4096
        )
    print(copy(1, 4096), flush=True)
    if order == "after":
        faulthandler.enable()
    os.truncate(path, 4096)
    print(copy(1, 4096), flush=True)  # the fault, caught
    if order == "during":  # a thread copying (the first page, still there) the whole time
        threading.Thread(target=copy, args=(20_000_000, 0), daemon=True).start()
        time.sleep(0.3)
    ctypes.string_at(base + 8192, 1)  # a fault outside any copy
    print("survived", flush=True)
"""


@needs_mapping
@pytest.mark.parametrize("order", ["before", "after", "during"])
def test_a_fault_outside_a_copy_goes_to_the_handler_before_ours(tmp_path, order):
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(OUTSIDE), str(tmp_path / "f"), order],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.splitlines() == ["(0, 1)", "(2, 0)"]
    assert done.returncode == -7  # SIGBUS: the default action, after faulthandler's report
    assert "Fatal Python error: Bus error" in done.stderr
    assert done.stderr.count("Fatal Python error") == 1


@needs_mapping
def test_the_loader_reads_the_same_batches_mapped_or_not(pack_dir, monkeypatch):
    def two_epochs(read: str) -> list[np.ndarray]:
        batches = mixshard.loader(pack_dir, 8, order="global", num_workers=2, seed=3, read=read)
        return [b.numpy().copy() for _ in range(2) for b in batches]

    mapped_run, auto_run, plain_run = two_epochs("mapped"), two_epochs("auto"), two_epochs("pread")
    assert len(mapped_run) == len(plain_run) == len(auto_run) == 24
    assert all(np.array_equal(a, b) for a, b in zip(mapped_run, plain_run))
    assert all(np.array_equal(a, b) for a, b in zip(auto_run, plain_run))


@needs_mapping
@pytest.mark.parametrize(
    ("status", "message"),
    [(1, "ends early (truncated)"), (2, "a page of it could not be read (a disk error)")],
)
def test_a_copy_that_stops_on_an_unchanged_shard_names_it(pack_dir, monkeypatch, status, message):
    # past the shard's end (index.json offsets beyond it) or a fault on a file that did not
    # change (a disk error paging it in): what the copy reports, said as the reads say it
    pack = warmed(pack_dir)
    monkeypatch.setattr(pack._maps, "copy", lambda *args: (status, 0))
    index = np.arange(0, 96, 7)
    shard = pack_dir / pack.shards[int(pack.block_shard[pack.block_of(index[:1])][0])].name
    with pytest.raises(ShardError) as err:
        pack.read_images(index, np.empty((len(index), 3, 8, 8), np.uint8))
    assert str(err.value).startswith(f"{'shard' if status == 1 else 'cannot read shard'} {shard}")
    assert message in str(err.value)
    pack.close()


# ---------------------------------------------------------------- the block order of a warm pack


def test_cache_misses_counts_sampled_bytes_out_of_the_page_cache(tmp_path, monkeypatch):
    size, step = 16 << 20, 1 << 20
    assert warming.cache_samples(size, step) == 17 and warming.cache_samples(0) == 0
    cached, cold = tmp_path / "cached", tmp_path / "cold"
    cached.write_bytes(os.urandom(size))
    try:  # written around the page cache: none of it is there
        fd = os.open(cold, os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except (AttributeError, OSError):  # pragma: no cover - a file system without O_DIRECT
        cold = None
    else:
        try:
            os.write(fd, mmap.mmap(-1, size))  # page-aligned memory, as O_DIRECT wants
        finally:
            os.close(fd)
    for path, expected in ((cached, 0), (cold, 17)):  # 16 MB, and the last byte
        if path is not None:
            fd = os.open(path, os.O_RDONLY)
            assert warming.cache_misses(fd, size, 100, step) == expected
            os.close(fd)
    out = set(range(4 << 20, size, 4096))  # the pages not in the cache, as the kernel says

    def preadv(fd, buffers, offset, flags):
        assert flags == os.RWF_NOWAIT
        if offset // 4096 * 4096 in out:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return 1

    monkeypatch.setattr(warming.os, "preadv", preadv)
    assert warming.cache_misses(0, size, 100, step) == 13  # 4-15 MB and the last byte
    assert warming.cache_misses(0, size, 3, step) == 4  # counting stops past `most`
    assert warming.cache_misses(0, 4 << 20, 100, step) == 0
    assert warming.cache_misses(0, 0, 0) == 0
    out.clear()
    assert warming.cache_misses(0, size, 0, step) == 0

    def unsupported(fd, buffers, offset, flags):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(warming.os, "preadv", unsupported)  # a file system that cannot tell
    assert warming.cache_misses(0, size, 5, step) == 6
    monkeypatch.delattr(os, "RWF_NOWAIT")  # a platform that cannot (macOS)
    assert warming.cache_misses(0, size, 5, step) == 6


def evicted(path) -> bool:
    """Drop `path` from the page cache; whether it left (not on tmpfs; this kernel tells)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        size = os.fstat(fd).st_size  # both sampled bytes (the first and last) out, and told
        return warming.cache_misses(fd, size, size, step=size) == 2
    finally:
        os.close(fd)


def test_a_warm_pass_ends_with_every_page_in_the_page_cache(tmp_path, monkeypatch):
    # A kernel reads at most max(read_ahead_kb, max_sectors_kb) of one WILLNEED (128 KB by
    # default) and drops the rest, which a wait for the chunk's last byte did not see.
    path, size = tmp_path / "shard", 4 << 20
    path.write_bytes(os.urandom(size))
    fd = os.open(path, os.O_RDONLY)
    assert warming.read_whole(fd) >= 4096 and warming.read_whole(fd) % 4096 == 0
    os.close(fd)
    if not evicted(path):
        pytest.skip("this file system keeps the file in memory, or cannot tell")
    real = os.posix_fadvise  # a device at the default read-ahead, whatever this machine's is
    clamped = lambda fd, at, n, advice: real(fd, at, min(n, 128 << 10), advice)  # noqa: E731
    monkeypatch.setattr(warming.os, "posix_fadvise", clamped)
    monkeypatch.setattr(warming, "read_whole", lambda fd: 128 << 10)  # as sysfs says there
    assert warming.warm_files([(path, size)], threading.Event())
    fd = os.open(path, os.O_RDONLY)
    # every page, but for a few: a kernel short of memory drops readahead pages it cannot
    # allocate at once (failed once in a full suite beside other work, passed alone); the
    # bug this pins left most pages out (72% of a pack at 32 MB chunks)
    pages = size // 4096
    assert warming.cache_misses(fd, size, pages, step=4096) <= pages // 50
    os.close(fd)


def block_run(folder, workers: int, read: str) -> tuple[list[np.ndarray], int]:
    """Three epochs of the block order (images and labels as rows), and the shards mapped."""
    loader = mixshard.loader(
        folder,
        8,
        order="block",
        window=3,
        run=2,
        num_workers=workers,
        seed=4,
        labels=True,
        read=read,
    )
    rows = [
        np.concatenate([images.numpy().reshape(8, -1), labels.numpy()[:, None]], 1)
        for _ in range(3)
        for images, labels in loader
    ]
    mapped_now = loader.stream.pack.mapped_shards
    loader.close()
    return rows, mapped_now


@needs_mapping
@pytest.mark.parametrize("workers", [0, 2])
def test_the_block_order_of_a_warm_pack_is_copied_out_of_mappings_as_the_same_batches(
    pack_dir, monkeypatch, workers
):
    mapped_run, mapped_now = block_run(pack_dir, workers, "auto")
    fed_run, fed_now = block_run(pack_dir, workers, "feed")
    assert (mapped_now, fed_now) == (4, 0)
    assert len(mapped_run) == len(fed_run) == 36
    assert all(np.array_equal(a, b) for a, b in zip(mapped_run, fed_run))
    stored = read_pack(pack_dir)[0].reshape(96, -1)
    epoch = np.concatenate(mapped_run[:12])[:, :-1].astype(np.uint8)
    assert sorted(map(bytes, epoch)) == sorted(map(bytes, stored))  # each image once


def reads_ahead(folder, **kw) -> tuple[bool, int]:
    """Whether a block-order reader of `folder` reads blocks ahead, and the shards mapped."""
    stream = mixshard.ShardStream(folder, 8, order="block", **kw)
    reader = stream.reader(range(0, 4))
    ahead = (reader.reads_ahead, reader.feed is not None)
    assert ahead[0] == ahead[1]
    reader.get(0)
    reader.close()
    return ahead[0], stream.pack.mapped_shards


@needs_mapping
def test_the_block_order_reads_ahead_unless_the_whole_pack_is_in_memory_and_fits(
    pack_dir, monkeypatch
):
    assert reads_ahead(pack_dir) == (False, 4)
    asked: list[int] = []

    def third_missed(fd: int, size: int, most: int) -> int:
        asked.append(most)
        return 1 if len(asked) == 3 else 0

    with monkeypatch.context() as patch:  # a sampled byte out of the page cache: none mapped
        patch.setattr(mapped, "cache_misses", third_missed)
        assert reads_ahead(pack_dir) == (True, 0)
    assert asked == [0, 0, 0]  # 1% of 8 samples allowed: none; the rest are not asked

    willneed: list[int] = []

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        willneed.append(advice)

    asked.clear()
    with monkeypatch.context() as patch:  # a few misses allowed: mapped, the holes read ahead
        patch.setattr(plan, "MISSES_ALLOWED", 0.25)  # 2 of the 8 samples
        patch.setattr(mapped, "cache_misses", lambda fd, size, most: asked.append(most) or 1)
        patch.setattr(mapped.os, "posix_fadvise", advise)
        assert reads_ahead(pack_dir) == (True, 0)  # a third miss: no
        assert asked == [2, 1, 0]
        patch.setattr(mapped, "cache_misses", lambda fd, size, most: int(most == 2))
        assert reads_ahead(pack_dir) == (False, 4)
    assert willneed == [os.POSIX_FADV_WILLNEED] * 3  # the shards with a miss
    with monkeypatch.context() as patch:  # larger than memory: its blocks are read and dropped
        patch.setattr(stream_mod, "available_memory", lambda: 1024)
        assert reads_ahead(pack_dir) == (True, 0)
    with monkeypatch.context() as patch:  # fits the page cache, not half the memory: not mapped
        bytes_ = mixshard.Manifest.load(pack_dir).total_bytes
        patch.setattr(plan, "available_memory", lambda: 2 * bytes_ - 1)
        assert reads_ahead(pack_dir) == (True, 0)
    with monkeypatch.context() as patch:
        patch.setenv("MIXSHARD_MMAP", "0")
        assert reads_ahead(pack_dir) == (True, 0)


@needs_mapping
def test_the_read_plan_is_named_or_chosen(pack_dir, tmp_path):
    stream = mixshard.ShardStream(pack_dir, 8, order="global", read="mapped")
    reader = stream.reader(range(0, 2))
    assert (reader.way, stream.pack.mapped_shards) == ("mapped", 4)  # at open, not after warm
    reader.close()
    for order, read, plan_ in (("global", "pread", "pread"), ("block", "feed", "feed")):
        stream = mixshard.ShardStream(pack_dir, 8, order=order, read=read)
        reader = stream.reader(range(0, 2))
        assert (reader.way, reader.reads_ahead, stream.pack.mapped_shards) == (
            plan_,
            read == "feed",
            0,
        )
        reader.get(0)
        reader.close()
    with pytest.raises(ValueError, match="read must be one of auto, mapped, feed, pread, got 'io'"):
        mixshard.ShardStream(pack_dir, 8, read="io")
    with pytest.raises(ValueError, match="read='feed' reads whole blocks: it needs order='block'"):
        mixshard.ShardStream(pack_dir, 8, order="global", read="feed")

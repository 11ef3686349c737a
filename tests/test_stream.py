"""ShardStream / loader: shapes, epochs, orders, splits, determinism, resume, HTTP, bad input."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import copy_pack, free_port, make_tree, read_pack, serve_folder, small_pack

import mixshard
from mixshard import ManifestError, MixshardError, ShardError, ShardStream
from mixshard.reading import stream as stream_module
from mixshard.reading.pack.reader import PackReader

N = 96  # images; a multiple of world_size * batch_size for world sizes 1-4 and batch 8
PATTERN = "shard-{000000..000004}.tar"


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    """96 distinct images in 5 shards (20, 20, 20, 20, 16) of 8-image blocks, 3 classes."""
    root = tmp_path_factory.mktemp("stream")
    return small_pack(root, N // 3, shard_size=20, block_size=8, classes=("a", "b", "c"))


@pytest.fixture(scope="module")
def ids(pack_dir) -> dict[bytes, tuple[str, int]]:
    """Image bytes -> (key, label), from plain webdataset."""
    images, labels, keys = read_pack(pack_dir)
    table = {img.tobytes(): (key, int(label)) for img, label, key in zip(images, labels, keys)}
    assert len(table) == N
    return table


@pytest.fixture(scope="module")
def http_url(pack_dir, tmp_path_factory):
    """The pack served over HTTP, and a block cache for it."""
    with serve_folder(pack_dir) as base:
        yield {"source": base, "cache_dir": tmp_path_factory.mktemp("httpcache")}


def keys_of(batches, ids) -> list[list[str]]:
    out = []
    for batch in batches:
        images = batch[0] if isinstance(batch, tuple) else batch
        out.append([ids[img.numpy().tobytes()][0] for img in images])
    return out


def flat(lists):
    return [x for xs in lists for x in xs]


def all_keys(ids) -> list[str]:
    return sorted(k for k, _ in ids.values())


SOURCES = ["global", "block", "file", "http"]
LOCAL = ["global", "block"]


def source_kw(kind: str, pack_dir: Path, request) -> dict:
    """ShardStream arguments for a kind of source: a local pack in either order, its
    `file://` URL, or the pack over HTTP (read through the block cache)."""
    if kind == "global":
        return {"source": str(pack_dir), "order": "global"}
    if kind == "block":
        return {"source": str(pack_dir), "order": "block", "window": 2}
    if kind == "file":
        return {"source": pack_dir.as_uri()}
    return dict(request.getfixturevalue("http_url"))


@pytest.fixture(params=SOURCES)
def src(request, pack_dir) -> dict:
    return source_kw(request.param, pack_dir, request)


@pytest.fixture(params=LOCAL)
def local(request, pack_dir) -> dict:
    return source_kw(request.param, pack_dir, request)


def test_batches_are_full_uint8_nchw_and_cover_the_epoch_once(src, ids):
    stream = ShardStream(batch_size=8, labels=True, **src)
    assert len(stream) == N // 8
    batches = list(stream)
    assert len(batches) == N // 8
    for images, labels in batches:
        assert images.shape == (8, 3, 8, 8) and images.dtype == torch.uint8
        assert images.is_contiguous()
        assert labels.dtype == torch.int64 and labels.shape == (8,)
        assert labels.tolist() == [ids[i.numpy().tobytes()][1] for i in images]
    assert sorted(flat(keys_of(batches, ids))) == all_keys(ids)  # exactly once


def test_epochs_differ_and_seeds_repeat(src, ids):
    stream = ShardStream(batch_size=8, **src)
    first, second = keys_of(list(stream), ids), keys_of(list(stream), ids)
    assert first != second and sorted(flat(first)) == sorted(flat(second))
    assert keys_of(list(ShardStream(batch_size=8, **src)), ids) == first
    assert keys_of(list(ShardStream(batch_size=8, seed=1, **src)), ids) != first
    assert stream.epoch == 2


def test_block_order_reads_blocks_in_windows(pack_dir, ids):
    _, _, keys = read_pack(pack_dir)
    counts = [b.count for s in mixshard.Manifest.load(pack_dir).shards for b in s.blocks]
    blocks = [b for b, count in enumerate(counts) for _ in range(count)]
    block_of = dict(zip(keys, blocks))
    for run, window, most in ((1, 2, 4), (2, 3, 8)):  # a window is rounded up to whole runs
        stream = ShardStream(pack_dir, 8, order="block", window=window, run=run)
        assert stream.order == "block"
        for batch in keys_of(list(stream), ids):
            assert len({block_of[k] for k in batch}) <= most  # two windows at most


def test_block_order_over_tiny_shards(tmp_path):
    """A pack of one-image shards is all short blocks: a batch of 32 then takes 32 blocks,
    more than a window of 1 suggests (a ring of blocks sized for full ones used to wait
    forever for a free slot)."""
    make_tree(tmp_path / "src", classes=("a",), per_class=70)
    pack = tmp_path / "pack"
    mixshard.pack(tmp_path / "src", pack, size=8, shard_size=1, block_size=16, workers=1)
    got: list = []
    stream = ShardStream(pack, 32, order="block", window=1)
    reading = threading.Thread(target=lambda: got.extend(stream), daemon=True)
    reading.start()
    reading.join(timeout=60)
    assert not reading.is_alive(), "the block order hung"
    assert len(got) == 2 and len({bytes(i.numpy()) for b in got for i in b}) == 64


def test_auto_order_follows_available_memory(pack_dir, monkeypatch):
    assert ShardStream(pack_dir, 8).order == "block"  # 14 blocks: one window holds them all
    assert ShardStream(pack_dir, 8, window=13).order == "global"
    pack_bytes = mixshard.Manifest.load(pack_dir).total_bytes
    monkeypatch.setattr(stream_module, "available_memory", lambda: 2 * pack_bytes - 1)
    assert ShardStream(pack_dir, 8, window=13).order == "block"
    monkeypatch.setattr(stream_module, "available_memory", lambda: 2 * pack_bytes)
    assert ShardStream(pack_dir, 8, window=13).order == "global"


def test_shard_urls_and_pipe_commands_name_the_pack_url_instead(pack_dir):
    replace = (
        "(the folder or URL that holds index.json: a local folder, https://host/prefix, "
        "s3://bucket/prefix or gs://bucket/prefix)"
    )
    for given, instead in (
        (f"http://h/pack/{PATTERN}", "give http://h/pack"),
        (f"{pack_dir}/shard-000000.tar", f"give {pack_dir}"),
        (f"pipe:cat {pack_dir}/{PATTERN}", "give the pack's folder or URL"),
    ):
        with pytest.raises(MixshardError) as err:
            ShardStream(given, 8)
        assert str(err.value) == (
            f"{given}: shard URLs, brace patterns and pipe: commands are no longer read; "
            f"{instead} {replace}"
        )
    with pytest.raises(MixshardError, match="^lists of shard URLs are no longer read: give "):
        ShardStream([f"{pack_dir}/shard-000000.tar"], 8)


def test_no_shuffle_keeps_stored_order(pack_dir, ids):
    _, _, keys = read_pack(pack_dir)
    for kw in ({"order": "global"}, {"order": "block"}, {}):
        source = str(pack_dir) if kw else pack_dir.as_uri()
        got = flat(keys_of(list(ShardStream(source, 8, shuffle=False, **kw)), ids))
        assert got == keys


def test_leftover_images_differ_between_epochs(local, ids):
    stream = ShardStream(batch_size=10, **local)  # 96 = 9 * 10 + 6 left over
    everything = set(all_keys(ids))
    left = []
    for _ in range(3):
        keys = flat(keys_of(list(stream), ids))
        assert len(keys) == 90 and len(set(keys)) == 90
        left.append(everything - set(keys))
    assert left[0] != left[1] != left[2]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_get_disjoint_images_and_equal_batch_counts(src, ids, world):
    per_rank = [
        flat(keys_of(list(ShardStream(batch_size=8, rank=r, world_size=world, **src)), ids))
        for r in range(world)
    ]
    assert {len(k) for k in per_rank} == {(N // (world * 8)) * 8}
    seen = flat(per_rank)
    assert len(seen) == len(set(seen))
    if N % (world * 8) == 0:
        assert sorted(seen) == all_keys(ids)


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_workers_give_the_same_batches_locally(local, ids, kind):
    ref = keys_of(list(mixshard.loader(batch_size=8, num_workers=0, workers=kind, **local)), ids)
    assert ref == keys_of(list(ShardStream(batch_size=8, **local)), ids)
    for workers in (2, 7):  # 7 workers > 5 shards
        got = mixshard.loader(batch_size=8, num_workers=workers, workers=kind, **local)
        if kind == "process" and got.stream.order == "block":  # each reads its blocks
            assert sorted(flat(keys_of(list(got), ids))) == sorted(flat(ref))
        else:
            assert keys_of(list(got), ids) == ref


def test_plain_dataloader_over_a_stream(local, ids):
    stream = ShardStream(batch_size=8, **local)
    dl = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=2)
    alone = keys_of(list(ShardStream(batch_size=8, **local)), ids)
    if stream.order == "block":  # the workers split the reading (`roles.py`): other batches
        assert sorted(flat(keys_of(list(dl), ids))) == sorted(flat(alone))
    else:
        assert keys_of(list(dl), ids) == alone


@pytest.mark.parametrize("remote", ["file", "http"])
def test_remote_workers_cover_once_and_are_deterministic(pack_dir, request, ids, remote):
    source = source_kw(remote, pack_dir, request)["source"]
    for workers in (2, 7):
        runs = [
            keys_of(list(mixshard.loader(source, 8, num_workers=workers)), ids) for _ in range(2)
        ]
        assert runs[0] == runs[1]
        assert sorted(flat(runs[0])) == all_keys(ids)


def _loader_threads() -> set[int]:
    """Threads that make batches: a pool's (global order), a block feed's (block order)."""
    makers = ("mixshard-load", "mixshard-read", "mixshard-walk")
    return {t.ident for t in threading.enumerate() if t.name.startswith(makers)}


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_loader_epochs_continue_without_respawning(pack_dir, ids, kind):
    def makers() -> set[int]:
        # an earlier test's DataLoader workers may still be exiting: count only new ones
        return _loader_threads() if kind == "thread" else children()

    def children() -> set[int]:
        return {p.pid for p in multiprocessing.active_children() if p.pid is not None}

    loader = mixshard.loader(pack_dir, 8, num_workers=2, workers=kind)
    before = makers()
    first = keys_of(list(loader), ids)
    workers = makers() - before
    assert workers
    second = keys_of(list(loader), ids)
    now = makers() - before
    # the first epoch's workers all go on (a thread pool may start one more as it needs it)
    assert workers <= now and len(now) <= 2 + 1
    assert first != second and sorted(flat(first)) == sorted(flat(second))
    stream = ShardStream(pack_dir, 8)
    alone = [keys_of(list(stream), ids), keys_of(list(stream), ids)]
    if kind == "process" and stream.order == "block":  # the workers split the reading
        assert [sorted(flat(e)) for e in (first, second)] == [sorted(flat(e)) for e in alone]
    else:
        assert [first, second] == alone
    loader.close()


def test_infinite_never_stops_and_keeps_epochs_whole(src, ids):
    stream = ShardStream(batch_size=8, infinite=True, **src)
    with pytest.raises(TypeError, match="no length"):
        len(stream)
    it = iter(stream)
    keys = keys_of([next(it) for _ in range(3 * (N // 8) + 2)], ids)
    for epoch in range(3):
        assert sorted(flat(keys[epoch * 12 : (epoch + 1) * 12])) == all_keys(ids)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_gives_the_uninterrupted_batches(src, ids, workers):
    ref = mixshard.loader(batch_size=8, num_workers=workers, seed=3, **src)
    full = keys_of(list(ref) + list(ref), ids)
    run = mixshard.loader(batch_size=8, num_workers=workers, seed=3, **src)
    it = iter(run)
    head = keys_of([next(it) for _ in range(5)], ids)
    state = json.loads(json.dumps(run.state_dict()))
    assert state["epoch"] == 0 and state["batch"] == 5
    run.close()
    resumed = mixshard.loader(batch_size=8, num_workers=workers, seed=3, **src)
    resumed.load_state_dict(state)
    assert head + keys_of(list(resumed) + list(resumed), ids) == full
    with pytest.raises(ValueError, match="saved with seed=3"):
        mixshard.loader(batch_size=8, seed=4, **src).load_state_dict(state)


def test_state_dict_names_the_order(pack_dir):
    state = ShardStream(pack_dir, 8, order="block", window=2).state_dict()
    assert (state["order"], state["window"]) == ("block", 2)
    with pytest.raises(ValueError, match="saved with order='block', this stream has order="):
        ShardStream(pack_dir, 8, order="global").load_state_dict(state)
    with pytest.raises(ValueError, match="saved with window=2, this stream has window=3"):
        ShardStream(pack_dir, 8, order="block", window=3).load_state_dict(state)


def test_stream_state_dict_in_process(local, ids):
    stream = ShardStream(batch_size=8, infinite=True, **local)
    it = iter(stream)
    for _ in range(14):
        next(it)
    state = stream.state_dict()
    assert (state["epoch"], state["batch"]) == (1, 2)
    expected = keys_of([next(it) for _ in range(4)], ids)
    other = ShardStream(batch_size=8, infinite=True, **local)
    other.load_state_dict(state)
    assert keys_of([b for b, _ in zip(other, range(4))], ids) == expected


def test_set_epoch(local, ids):
    a, b = ShardStream(batch_size=8, **local), ShardStream(batch_size=8, **local)
    list(a)
    b.set_epoch(1)
    assert keys_of(list(a), ids) == keys_of(list(b), ids)


def test_batch_index_says_which_images_make_a_batch(pack_dir, ids):
    _, _, keys = read_pack(pack_dir)
    stream = ShardStream(pack_dir, 8, order="block", window=2)
    expected = [[keys[i] for i in stream.batch_index(k).tolist()] for k in range(N // 8)]
    assert keys_of(list(stream), ids) == expected


def test_two_process_distributed_run(pack_dir, ids, tmp_path):
    port = free_port()
    job = Path(__file__).parent / "dist_job.py"
    procs = [
        subprocess.Popen(
            [sys.executable, str(job), str(rank), "2", str(port), str(pack_dir)]
            + [str(tmp_path / f"rank{rank}.json")]
        )
        for rank in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert results[0]["batches"] == results[1]["batches"] == N // 16
    keys = [[ids[bytes.fromhex(h)][0] for h in r["images"]] for r in results]
    assert not set(keys[0]) & set(keys[1])
    assert sorted(keys[0] + keys[1]) == all_keys(ids)


# ------------------------------------------------------------------------------ bad input


def test_missing_and_invalid_manifest(tmp_path, pack_dir):
    (tmp_path / "half").mkdir()
    with pytest.raises(ManifestError, match="no index.json in .*half: not a mixshard pack"):
        ShardStream(tmp_path / "half", 8)
    bad = copy_pack(pack_dir, tmp_path / "copy")
    doc = json.loads((bad / "index.json").read_text())
    (bad / "index.json").write_text(json.dumps({**doc, "version": 3}))
    with pytest.raises(ManifestError, match="is shard format version 3; this mixshard reads"):
        ShardStream(bad, 8)
    (bad / "index.json").write_text("[1, 2")
    with pytest.raises(ManifestError, match="is not valid JSON"):
        ShardStream(bad, 8)


def test_truncated_shard_is_named_at_open(tmp_path, pack_dir):
    bad = copy_pack(pack_dir, tmp_path / "copy")
    data = (bad / "shard-000001.tar").read_bytes()
    (bad / "shard-000001.tar").write_bytes(data[:-1000])
    with pytest.raises(ShardError) as err:
        ShardStream(bad, 8)
    assert str(err.value) == (
        f"shard {bad}/shard-000001.tar is {len(data) - 1000} bytes, index.json says {len(data)} "
        f"(truncated or altered); run `mixshard verify {bad}`, then repack or restore the file"
    )


@pytest.mark.parametrize("kind", LOCAL)
def test_a_bad_block_is_found_when_read(tmp_path, pack_dir, ids, kind):
    bad = copy_pack(pack_dir, tmp_path / "copy")
    data = bytearray((bad / "shard-000001.tar").read_bytes())
    data[512:518] = b"XXXXXX"  # the first block's .npy header
    (bad / "shard-000001.tar").write_bytes(bytes(data))
    stream = ShardStream(bad, 8, order=kind, window=2)  # opening reads no block
    with pytest.raises(ShardError) as err:
        list(stream)
    assert str(err.value) == (
        f"shard {bad}/shard-000001.tar block 00000003: no .npy header where index.json says "
        f"(altered); run `mixshard verify {bad}`, then repack or restore the file"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(ShardStream(bad, 8, order=kind, window=2, on_error="skip", labels=True))
    assert [str(w.message) for w in caught] == [
        f"mixshard: skipping a bad block: shard {bad}/shard-000001.tar block 00000003: "
        "no .npy header where index.json says"
    ]
    assert len(batches) == N // 8  # every batch full: the bad block's images are replaced
    keys = flat(keys_of(batches, ids))
    _, _, stored = read_pack(pack_dir)
    assert not set(keys) & set(stored[20:28])  # block 00000003 holds images 20-27
    assert len(set(keys)) == N - 8
    for images, labels in batches:
        assert labels.tolist() == [ids[i.numpy().tobytes()][1] for i in images]


def test_reader_threads_check_a_block_once(tmp_path, pack_dir, monkeypatch):
    """Eight threads reading one bad block at once: one check, one warning."""
    from mixshard.core import layout
    from mixshard.reading.pack.reader import PackReader

    bad = copy_pack(pack_dir, tmp_path / "copy")
    data = bytearray((bad / "shard-000001.tar").read_bytes())
    data[512:518] = b"XXXXXX"  # the first block's .npy header
    (bad / "shard-000001.tar").write_bytes(bytes(data))
    checks = []
    problem = layout.header_problem

    def slow(*args):  # widen the window in which another thread could check it too
        checks.append(1)
        time.sleep(0.05)
        return problem(*args)

    monkeypatch.setattr(layout, "header_problem", slow)
    pack = PackReader(bad, mixshard.Manifest.load(bad), on_error="skip")
    block = int(np.flatnonzero(pack.block_shard == 1)[0])
    out = np.empty((8, pack.manifest.image_bytes), np.uint8)
    results: list[bool] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [
            threading.Thread(target=lambda: results.append(pack.read_block(block, out)))
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == [False] * 8 and len(checks) == 1
    assert [str(w.message) for w in caught] == [
        f"mixshard: skipping a bad block: shard {bad}/shard-000001.tar block 00000003: "
        "no .npy header where index.json says"
    ]
    pack.close()


def test_a_pack_is_warmed_once(pack_dir, monkeypatch):
    from mixshard.reading.pack.reader import PackReader

    asked = []
    real = os.posix_fadvise

    def fadvise(fd, offset, length, advice):
        asked.append((os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[1], advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    pack = PackReader(pack_dir, mixshard.Manifest.load(pack_dir))
    stop = threading.Event()
    stop.set()
    pack.warm(stop)  # stopped before the first shard: the next reader warms it again
    assert asked == []
    pack.warm(threading.Event())
    pack.warm(threading.Event())  # already warmed (each new reader asks): nothing more
    assert asked == [(s.name, os.POSIX_FADV_WILLNEED) for s in pack.shards]
    pack.close()


def test_warming_asks_for_chunks_in_order_with_few_in_flight(pack_dir, monkeypatch):
    """The whole pack asked for at once would queue it all in front of the loader's reads:
    chunks are asked for in file order, at most WARM_IN_FLIGHT not yet read, and every
    descriptor is closed after."""
    from mixshard.reading.pack import reader, warming

    monkeypatch.setattr(warming, "WARM_CHUNK", 4096)
    monkeypatch.setattr(warming, "WARM_IN_FLIGHT", 2)
    events = []
    real_fadvise, real_pread = os.posix_fadvise, os.pread

    def name(fd):
        return os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[1]

    def fadvise(fd, offset, length, advice):
        events.append(("ask", name(fd), offset, offset + length))
        return real_fadvise(fd, offset, length, advice)

    def pread(fd, n, offset):
        events.append(("wait", name(fd), offset + 1))
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    monkeypatch.setattr(os, "pread", pread)
    fds_before = len(os.listdir("/proc/self/fd"))
    pack = reader.PackReader(pack_dir, mixshard.Manifest.load(pack_dir))
    pack.warm(threading.Event())
    asks = [e[1:] for e in events if e[0] == "ask"]
    expected = [
        (s.name, lo, min(s.bytes, lo + 4096)) for s in pack.shards for lo in range(0, s.bytes, 4096)
    ]
    assert asks == expected and len(asks) > 2 * len(pack.shards)
    waits = [e[1:] for e in events if e[0] == "wait"]
    assert waits == [(n, hi) for n, _, hi in expected]  # each chunk waited for, in order
    in_flight = 0
    for e in events:
        in_flight += 1 if e[0] == "ask" else -1
        assert 0 <= in_flight <= 3  # the limit, and the chunk just asked for
    pack.close()
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_skip_bad_local_shard_with_one_warning(tmp_path, pack_dir, ids):
    bad = copy_pack(pack_dir, tmp_path / "copy")
    (bad / "shard-000002.tar").unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = ShardStream(bad, 8, on_error="skip")
        keys = flat(keys_of(list(stream), ids))
    assert [str(w.message) for w in caught] == [
        f"mixshard: skipping a bad shard: shard {bad}/shard-000002.tar is missing; run "
        f"`mixshard verify {bad}`, then repack or restore the file"
    ]
    assert len(keys) == 72 and len(set(keys)) == 72
    for name in os.listdir(bad):
        if name.endswith(".tar"):
            (bad / name).unlink()
    with pytest.warns(RuntimeWarning), pytest.raises(MixshardError, match="every shard of"):
        ShardStream(bad, 8, on_error="skip")


def test_a_pack_over_http_altered_truncated_and_unreachable(tmp_path, pack_dir):
    bad = copy_pack(pack_dir, tmp_path / "copy")
    data = (bad / "shard-000003.tar").read_bytes()
    altered = bytearray(data)
    altered[1000] ^= 1  # a pixel of block 9: only its sha256 can tell
    (bad / "shard-000003.tar").write_bytes(bytes(altered))
    with serve_folder(bad) as base:
        with pytest.raises(ShardError) as err:
            list(ShardStream(base, 8, shuffle=False, cache_dir=tmp_path / "a"))
        assert str(err.value).startswith(f"{base}/shard-000003.tar: block 9 (bytes ")
        (bad / "shard-000003.tar").write_bytes(data[: len(data) // 2])
        with pytest.raises(ManifestError) as err:
            ShardStream(base, 8, cache_dir=tmp_path / "c")
        assert str(err.value) == (
            f"index.json says shard {base}/shard-000003.tar is {len(data)} bytes, the store's "
            f"object is {len(data) // 2}; index.json does not describe this pack: repack it"
        )
    port = free_port()  # nothing listens there
    with pytest.raises(ManifestError) as err:  # the manifest cannot be read: as for a folder
        ShardStream(f"http://127.0.0.1:{port}/pack", 8)
    assert str(err.value).startswith(
        f"cannot read the manifest: cannot reach http://127.0.0.1:{port}/pack/index.json: "
    )
    assert str(err.value).endswith("check the URL and that the server is up")


def test_unknown_shard_and_too_small_pack(pack_dir):
    with pytest.raises(
        MixshardError,
        match="the pack has 96 images, fewer than world_size x "
        "batch_size = 1 x 100; use a smaller batch_size",
    ):
        list(ShardStream(pack_dir, 100))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"order": "random"}, "order must be one of auto, global, block, got 'random'"),
        ({"window": 0}, "window must be >= 1, got 0"),
        ({"world_size": 0}, "world_size must be >= 1, got 0"),
        ({"rank": 2, "world_size": 2}, r"rank must be in \[0, world_size\), got rank=2"),
        ({"rank": -1}, r"rank must be in \[0, world_size\), got rank=-1"),
        ({"on_error": "ignore"}, "on_error must be 'raise' or 'skip', got 'ignore'"),
    ],
)
def test_bad_arguments(pack_dir, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ShardStream(pack_dir, **{"batch_size": 8, **kwargs})


def test_a_rank_beyond_the_runs_world_size_names_both(pack_dir):
    stream = ShardStream(pack_dir, 8, rank=1)  # no world_size and no torch.distributed: 1
    with pytest.raises(ValueError) as err:
        _ = stream.batches_per_epoch
    assert str(err.value) == (
        "rank must be in [0, world_size), got rank=1, world_size=1 (torch.distributed's, or 1 "
        "without it)"
    )


def test_dead_worker_process_is_an_error_not_a_hang(pack_dir):
    loader = mixshard.loader(pack_dir, 8, num_workers=2, workers="process", infinite=True)
    it = iter(loader)
    next(it)
    for child in multiprocessing.active_children():
        child.kill()
    with pytest.raises(MixshardError, match="a loader worker process died"):
        for _ in range(100):
            next(it)


def test_a_thread_workers_connection_error_is_not_called_a_dead_process(pack_dir, monkeypatch):
    def reset(self, index, out):
        raise ConnectionResetError("peer reset")

    monkeypatch.setattr(PackReader, "read_images", reset)
    loader = mixshard.loader(pack_dir, 8, num_workers=2, workers="thread")
    with pytest.raises(ConnectionResetError, match="peer reset"):
        next(iter(loader))


def test_prefetch_on_cpu_passes_batches_through(pack_dir):
    batches = list(mixshard.loader(pack_dir, 8, num_workers=0))
    got = list(mixshard.prefetch(mixshard.loader(pack_dir, 8, num_workers=0), "cpu"))
    assert len(got) == len(batches) == N // 8
    assert all(torch.equal(a, b) for a, b in zip(got, batches))


@pytest.mark.cuda
def test_prefetch_cuda_copies_and_keeps_order(pack_dir):
    batches = list(mixshard.loader(pack_dir, 8, num_workers=0, labels=True))
    loader = mixshard.loader(pack_dir, 8, num_workers=2, labels=True)
    before = torch.cuda.memory_allocated()
    got = []
    for images, labels in mixshard.prefetch(loader, "cuda"):
        assert images.is_cuda and labels.is_cuda
        got.append((images.cpu(), labels.cpu()))
    assert len(got) == len(batches) == N // 8
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, batches))
    assert torch.cuda.memory_allocated() - before <= 2 * 2 * (8 * 3 * 8 * 8 + 8 * 8) + 4096


def test_closing_a_loader_stops_its_threads(pack_dir, block_feed):
    before = set(threading.enumerate())

    def ours() -> list[threading.Thread]:
        now = set(threading.enumerate()) - before
        return [t for t in now if t.name.startswith("mixshard-")]

    loader = mixshard.loader(pack_dir, 8, num_workers=2, order="block", window=2, infinite=True)
    it = iter(loader)
    for _ in range(30):
        next(it)
    assert ours()
    loader.close()
    with pytest.raises(StopIteration):  # an iteration in progress ends with close()
        next(it)
    for t in ours():
        t.join(timeout=5)
    assert ours() == []


def test_deprecated_names_still_work(pack_dir):
    stream = ShardStream(pack_dir, 8)
    with pytest.warns(DeprecationWarning, match="ShardStream.is_local is deprecated"):
        assert stream.is_local
    with pytest.warns(DeprecationWarning, match="Source.is_folder is deprecated"):
        assert stream.source.is_folder
    with pytest.warns(DeprecationWarning, match="shuffle_blocks is deprecated and ignored"):
        assert ShardStream(pack_dir, 8, shuffle_blocks=4).order == stream.order


def test_a_damaged_block_cache_file_says_to_delete_the_cache_folder(pack_dir, tmp_path):
    """A store pack's shard files are its cache's: a truncated one is fixed by deleting the
    cache folder (its blocks are fetched again), not by verifying a pack folder."""
    with serve_folder(pack_dir) as base:
        stream = ShardStream(base, 8, shuffle=False, order="block", cache_dir=tmp_path)
        assert len(list(stream)) == N // 8  # every block fetched and kept
        part, root = stream.pack.files.folder, stream.pack.files.root
        cut = part / "shard-000000.tar"
        os.truncate(cut, 100)
        with pytest.raises(ShardError) as err:
            list(stream)
    assert str(err.value) == (
        f"the cache file {cut} ends early; a file of the block cache is damaged: delete the "
        f"cache folder {root} (its blocks are fetched again) and open the pack again"
    )

"""ShardStream / loader: shapes, epochs, splits, determinism, resume, HTTP, bad input."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch
from conftest import make_tree, read_pack

import mixshard
from mixshard import ManifestError, MixshardError, ShardError, ShardStream

N = 96  # images; a multiple of world_size * batch_size for world sizes 1-4 and batch 8


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    """96 distinct images in 5 shards (20, 20, 20, 20, 16) of 8-image blocks, 3 classes."""
    root = tmp_path_factory.mktemp("stream")
    make_tree(root / "src", classes=("a", "b", "c"), per_class=N // 3)
    mixshard.pack(root / "src", root / "pack", size=8, shard_size=20, block_size=8, workers=1)
    return root / "pack"


@pytest.fixture(scope="module")
def ids(pack_dir) -> dict[bytes, tuple[str, int]]:
    """Image bytes -> (key, label), from plain webdataset."""
    images, labels, keys = read_pack(pack_dir)
    table = {img.tobytes(): (key, int(label)) for img, label, key in zip(images, labels, keys)}
    assert len(table) == N
    return table


@pytest.fixture(scope="module")
def http_url(pack_dir):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(pack_dir))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/shard-{{000000..000004}}.tar"
    server.shutdown()


def keys_of(batches, ids) -> list[list[str]]:
    out = []
    for batch in batches:
        images = batch[0] if isinstance(batch, tuple) else batch
        out.append([ids[img.numpy().tobytes()][0] for img in images])
    return out


def flat(lists):
    return [x for xs in lists for x in xs]


SOURCES = ["local", "file", "http"]


@pytest.fixture(params=SOURCES)
def source(request, pack_dir):
    if request.param == "local":
        return str(pack_dir)
    if request.param == "file":
        return str(pack_dir / "shard-{000000..000004}.tar")
    return request.getfixturevalue("http_url")


def test_batches_are_full_uint8_nchw_and_cover_the_epoch_once(source, ids):
    stream = ShardStream(source, 8, labels=True)
    assert len(stream) == N // 8
    batches = list(stream)
    assert len(batches) == N // 8
    for images, labels in batches:
        assert images.shape == (8, 3, 8, 8) and images.dtype == torch.uint8
        assert images.is_contiguous()
        assert labels.dtype == torch.int64 and labels.shape == (8,)
        assert labels.tolist() == [ids[i.numpy().tobytes()][1] for i in images]
    keys = flat(keys_of(batches, ids))
    assert sorted(keys) == sorted(k for k, _ in ids.values())  # exactly once


def test_epochs_differ_and_seeds_repeat(source, ids):
    stream = ShardStream(source, 8)
    first, second = keys_of(list(stream), ids), keys_of(list(stream), ids)
    assert first != second and sorted(flat(first)) == sorted(flat(second))
    again = ShardStream(source, 8)
    assert keys_of(list(again), ids) == first
    assert keys_of(list(ShardStream(source, 8, seed=1)), ids) != first
    assert stream.epoch == 2


def test_pipe_command_source(pack_dir, ids):
    # webdataset's `pipe:` URLs; the manifest is found by replacing the shard's path
    source = f"pipe:cat {pack_dir}/shard-{{000000..000004}}.tar"
    keys = flat(keys_of(list(ShardStream(source, 8)), ids))
    assert sorted(keys) == sorted(k for k, _ in ids.values())


def test_no_shuffle_keeps_stored_order(pack_dir, ids):
    _, _, keys = read_pack(pack_dir)
    for source in (str(pack_dir), str(pack_dir / "shard-{000000..000004}.tar")):
        got = flat(keys_of(list(ShardStream(source, 8, shuffle=False)), ids))
        assert got == keys


def test_leftover_images_differ_between_epochs(pack_dir, ids):
    stream = ShardStream(pack_dir, 10)  # 96 = 9 * 10 + 6 left over
    everything = {k for k, _ in ids.values()}
    left = []
    for _ in range(3):
        keys = flat(keys_of(list(stream), ids))
        assert len(keys) == 90 and len(set(keys)) == 90
        left.append(everything - set(keys))
    assert left[0] != left[1] != left[2]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_get_disjoint_images_and_equal_batch_counts(source, ids, world):
    per_rank = [
        flat(keys_of(list(ShardStream(source, 8, rank=r, world_size=world)), ids))
        for r in range(world)
    ]
    assert len({len(k) for k in per_rank}) == 1
    assert len(per_rank[0]) == (N // (world * 8)) * 8
    seen = flat(per_rank)
    assert len(seen) == len(set(seen))
    if N % (world * 8) == 0:
        assert sorted(seen) == sorted(k for k, _ in ids.values())


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_workers_give_the_same_batches_locally(pack_dir, ids, kind):
    ref = keys_of(list(mixshard.loader(pack_dir, 8, num_workers=0, workers=kind)), ids)
    assert ref == keys_of(list(ShardStream(pack_dir, 8)), ids)
    for workers in (2, 7):  # 7 workers > 5 shards
        got = mixshard.loader(pack_dir, 8, num_workers=workers, workers=kind)
        assert keys_of(list(got), ids) == ref


def test_plain_dataloader_over_a_stream(pack_dir, ids):
    stream = ShardStream(pack_dir, 8)
    dl = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=2)
    assert keys_of(list(dl), ids) == keys_of(list(ShardStream(pack_dir, 8)), ids)


@pytest.mark.parametrize("remote", ["file", "http"])
def test_remote_workers_cover_once_and_are_deterministic(pack_dir, http_url, ids, remote):
    source = http_url if remote == "http" else str(pack_dir / "shard-{000000..000004}.tar")
    for workers in (2, 7):
        runs = [
            keys_of(list(mixshard.loader(source, 8, num_workers=workers)), ids) for _ in range(2)
        ]
        assert runs[0] == runs[1]
        assert sorted(flat(runs[0])) == sorted(k for k, _ in ids.values())


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_loader_epochs_continue_without_respawning(pack_dir, ids, kind):
    loader = mixshard.loader(pack_dir, 8, num_workers=2, workers=kind)
    first = keys_of(list(loader), ids)
    live = loader._it  # noqa: SLF001
    second = keys_of(list(loader), ids)
    assert loader._it is live  # noqa: SLF001
    assert first != second and sorted(flat(first)) == sorted(flat(second))
    stream = ShardStream(pack_dir, 8)
    assert [first, second] == [keys_of(list(stream), ids), keys_of(list(stream), ids)]
    loader.close()


def test_infinite_never_stops_and_keeps_epochs_whole(source, ids):
    stream = ShardStream(source, 8, infinite=True)
    with pytest.raises(TypeError, match="no length"):
        len(stream)
    it = iter(stream)
    batches = [next(it) for _ in range(3 * (N // 8) + 2)]
    keys = keys_of(batches, ids)
    for epoch in range(3):
        chunk = flat(keys[epoch * 12 : (epoch + 1) * 12])
        assert sorted(chunk) == sorted(k for k, _ in ids.values())


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_gives_the_uninterrupted_batches(source, ids, workers):
    ref = mixshard.loader(source, 8, num_workers=workers, seed=3)
    full = keys_of(list(ref) + list(ref), ids)
    run = mixshard.loader(source, 8, num_workers=workers, seed=3)
    it = iter(run)
    head = keys_of([next(it) for _ in range(5)], ids)
    state = json.loads(json.dumps(run.state_dict()))
    assert state["epoch"] == 0 and state["batch"] == 5
    run.close()
    resumed = mixshard.loader(source, 8, num_workers=workers, seed=3)
    resumed.load_state_dict(state)
    tail = keys_of(list(resumed) + list(resumed), ids)
    assert head + tail == full
    with pytest.raises(ValueError, match="saved with seed=3"):
        mixshard.loader(source, 8, seed=4).load_state_dict(state)


def test_stream_state_dict_in_process(pack_dir, ids):
    stream = ShardStream(pack_dir, 8, infinite=True)
    it = iter(stream)
    [next(it) for _ in range(14)]
    state = stream.state_dict()
    assert (state["epoch"], state["batch"]) == (1, 2)
    expected = keys_of([next(it) for _ in range(4)], ids)
    other = ShardStream(pack_dir, 8, infinite=True)
    other.load_state_dict(state)
    assert keys_of([b for b, _ in zip(other, range(4))], ids) == expected


def test_set_epoch(pack_dir, ids):
    a, b = ShardStream(pack_dir, 8), ShardStream(pack_dir, 8)
    list(a)
    b.set_epoch(1)
    assert keys_of(list(a), ids) == keys_of(list(b), ids)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_distributed_run(pack_dir, ids, tmp_path):
    port = _free_port()
    job = Path(__file__).parent / "dist_job.py"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(job),
                str(rank),
                "2",
                str(port),
                str(pack_dir),
                str(tmp_path / f"rank{rank}.json"),
            ]
        )
        for rank in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert results[0]["batches"] == results[1]["batches"] == N // 16
    keys = [[ids[bytes.fromhex(h)][0] for h in r["images"]] for r in results]
    assert not set(keys[0]) & set(keys[1])
    assert sorted(keys[0] + keys[1]) == sorted(k for k, _ in ids.values())


# ------------------------------------------------------------------------------ bad input


def copy_pack(pack_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(pack_dir, dst)
    return dst


def test_missing_and_invalid_manifest(tmp_path, pack_dir):
    (tmp_path / "half").mkdir()
    with pytest.raises(ManifestError, match="no index.json in .*half: not a finished"):
        ShardStream(tmp_path / "half", 8)
    bad = copy_pack(pack_dir, tmp_path)
    doc = json.loads((bad / "index.json").read_text())
    (bad / "index.json").write_text(json.dumps({**doc, "version": 2}))
    with pytest.raises(ManifestError, match="is shard format version 2; this mixshard reads"):
        ShardStream(bad, 8)
    (bad / "index.json").write_text("[1, 2")
    with pytest.raises(ManifestError, match="is not valid JSON"):
        ShardStream(bad, 8)


def test_truncated_and_altered_local_shards(tmp_path, pack_dir):
    bad = copy_pack(pack_dir, tmp_path)
    data = (bad / "shard-000001.tar").read_bytes()
    (bad / "shard-000001.tar").write_bytes(data[:-1000])
    with pytest.raises(ShardError) as err:
        list(ShardStream(bad, 8))
    assert str(err.value) == (
        f"shard {bad}/shard-000001.tar is {len(data) - 1000} bytes, index.json says {len(data)} "
        f"(truncated or altered); run `mixshard verify {bad}`, then repack or restore the file"
    )
    (bad / "shard-000001.tar").write_bytes(data)
    moved = bytearray(data)
    moved[512:518] = b"XXXXXX"  # the first block's .npy header
    (bad / "shard-000001.tar").write_bytes(bytes(moved))
    with pytest.raises(ShardError, match="block 00000003 is not where index.json says"):
        list(ShardStream(bad, 8))


def test_skip_bad_local_shard_with_one_warning(tmp_path, pack_dir, ids):
    bad = copy_pack(pack_dir, tmp_path)
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
        list(ShardStream(bad, 8, on_error="skip"))


def test_remote_truncated_altered_and_unreachable(tmp_path, pack_dir, ids):
    bad = copy_pack(pack_dir, tmp_path)
    pattern = str(bad / "shard-{000000..000004}.tar")
    data = (bad / "shard-000003.tar").read_bytes()
    (bad / "shard-000003.tar").write_bytes(data[: len(data) // 2])
    with pytest.raises(ShardError, match="shard-000003.tar"):
        list(ShardStream(pattern, 8))
    altered = bytearray(data)
    altered[1000] ^= 1  # a pixel: only the sha256 can tell
    (bad / "shard-000003.tar").write_bytes(bytes(altered))
    with pytest.raises(ShardError, match="shard-000003.tar is .* with another sha256"):
        list(ShardStream(pattern, 8, shuffle=False))
    with pytest.warns(RuntimeWarning, match="skipping a bad shard: shard .*shard-000003.tar"):
        batches = list(ShardStream(pattern, 8, on_error="skip", shuffle=False))
    assert len(batches) >= 9
    for name in os.listdir(bad):
        if name.endswith(".tar"):
            (bad / name).write_bytes(b"garbage")
    with pytest.warns(RuntimeWarning), pytest.raises(MixshardError, match="every shard read"):
        list(ShardStream(pattern, 8, on_error="skip"))
    loader = mixshard.loader(pattern, 8, num_workers=2, on_error="skip", infinite=True)
    with pytest.raises(MixshardError, match="every shard read was bad"):
        next(iter(loader))  # an error, not an endless wait
    with pytest.raises(ValueError, match="workers='thread' needs a local pack folder"):
        mixshard.loader(pattern, 8, workers="thread")
    port = _free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/pack/shard-{{000000..000001}}.tar"
    with pytest.raises(ShardError) as err:
        ShardStream(url, 8)
    assert str(err.value).startswith(f"cannot reach http://127.0.0.1:{port}/pack/index.json: ")
    assert str(err.value).endswith("check the URL and that the server is up")


def test_unknown_shard_and_too_small_pack(pack_dir, tmp_path):
    with pytest.raises(MixshardError, match="shard-000009.tar is not listed in the manifest"):
        ShardStream(str(pack_dir / "shard-000009.tar"), 8)
    with pytest.raises(
        MixshardError,
        match="the pack has 96 images, fewer than world_size x "
        "batch_size = 1 x 100; use a smaller batch_size",
    ):
        list(ShardStream(pack_dir, 100))


def test_dead_worker_is_an_error_not_a_hang(pack_dir, monkeypatch):
    def die(self, *args):
        os._exit(7)
        yield

    monkeypatch.setattr(ShardStream, "_local_batches", die)
    loader = mixshard.loader(pack_dir, 8, num_workers=2, workers="process")
    with pytest.raises(MixshardError, match="a loader worker process died"):
        list(loader)


def test_prefetch_on_cpu_passes_batches_through(pack_dir):
    batches = list(mixshard.loader(pack_dir, 8, num_workers=0))
    got = list(mixshard.prefetch(mixshard.loader(pack_dir, 8, num_workers=0), "cpu"))
    assert all(a.data_ptr() != 0 and torch.equal(a, b) for a, b in zip(got, batches))


@pytest.mark.cuda
def test_prefetch_cuda_copies_and_keeps_order(pack_dir):
    batches = list(mixshard.loader(pack_dir, 8, num_workers=0, labels=True))
    loader = mixshard.loader(pack_dir, 8, num_workers=2, labels=True)
    before = torch.cuda.memory_allocated()
    got = []
    for images, labels in mixshard.prefetch(loader, "cuda"):
        assert images.is_cuda and labels.is_cuda
        got.append((images.cpu(), labels.cpu()))
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, batches))
    assert torch.cuda.memory_allocated() - before <= 2 * 2 * (8 * 3 * 8 * 8 + 8 * 8) + 4096

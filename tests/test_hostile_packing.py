"""Hostile input on the writing side (issue 40): a zip bomb, links planted in OUT and beside
it, an archive of huge non-images, Ctrl-C while the workers start, archive hard links.

Each case pins its outcome: the skip reason or error (class and key words), files outside
OUT byte for byte, the peak memory of a pack run in a subprocess.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from helpers import files, make_tree, noise, run

import mixshard
from mixshard import Manifest
from mixshard.core.errors import OutputError, SkippedImagesError
from mixshard.core.files import atomic_write, create_file, open_own
from mixshard.writing.sources.magic import NOT_AN_IMAGE

ROOT = Path(__file__).resolve().parents[1]

# Runs `mixshard.pack(*argv)` in a fresh process and prints its peak RSS (KiB): of the pack
# process and of its decode workers.
_PEAK = textwrap.dedent(
    """
    import json, resource, sys
    import mixshard
    src, out, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    result = mixshard.pack(src, out, size=8, within="set", workers=workers)
    print(json.dumps({
        "count": result.manifest.count,
        "self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    }))
    """
)


def peak_pack(src: Path, out: Path, workers: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(src), str(out), str(workers)],
        capture_output=True, text=True, timeout=90, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


BOMB = 64 << 20  # inflated bytes of the bomb member
DECLARED = 4000  # what its headers say


GOOD = 40  # images beside the bomb: two decode tasks, so that workers=2 starts two workers


def bomb_zip(path: Path, good: bytes, bomb: bool = True) -> Path:
    """A zip of 40 small PNGs `set/gNN.png` and (with `bomb`) `set/bomb.png`: 64 MB of zeros
    deflated to ~64 KB, whose local and central headers are patched to declare 4,000 bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(GOOD):
            zf.writestr(f"set/g{i:02d}.png", good)
        if bomb:
            with zf.open("set/bomb.png", "w") as member:
                for _ in range(BOMB >> 20):
                    member.write(bytes(1 << 20))
    if not bomb:
        return path
    raw = bytearray(path.read_bytes())
    name = b"set/bomb.png"
    local = raw.index(name) - 30
    central = raw.rindex(name) - 46
    assert raw[local : local + 4] == b"PK\x03\x04" and raw[central : central + 4] == b"PK\x01\x02"
    assert int.from_bytes(raw[local + 22 : local + 26], "little") == BOMB
    raw[local + 22 : local + 26] = DECLARED.to_bytes(4, "little")
    raw[central + 24 : central + 28] = DECLARED.to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    return path


BOMB_REASON = (
    f"corrupt archive member: it inflates past its declared size of {DECLARED} bytes "
    "(a zip bomb?); not read further"
)


def test_a_zip_bomb_is_skipped_and_costs_no_memory(tmp_path):
    good = noise(tmp_path / "g.png").read_bytes()
    bomb = bomb_zip(tmp_path / "bomb.zip", good)
    assert bomb.stat().st_size < 1 << 20
    with zipfile.ZipFile(bomb) as zf:
        assert zf.getinfo("set/bomb.png").file_size == DECLARED
    plain = bomb_zip(tmp_path / "plain.zip", good, bomb=False)

    m = mixshard.pack(bomb, tmp_path / "out", size=8, within="set", workers=1).manifest
    assert m.count == GOOD
    assert list(m.skipped) == [{"path": "bomb.png", "reason": BOMB_REASON}]
    with pytest.raises(SkippedImagesError) as err:
        mixshard.pack(bomb, tmp_path / "strict", size=8, within="set", workers=1, strict=True)
    assert str(err.value).startswith(
        f"strict: 1 file(s) could not be read: bomb.png ({BOMB_REASON})"
    )
    assert not (tmp_path / "strict").exists()

    # peak RSS of the pack process (workers=1) and of a decode worker (workers=2), against
    # the same pack without the bomb: the 64 MB it inflates to never comes into memory
    for workers, who in ((1, "self"), (2, "children")):
        base = peak_pack(plain, tmp_path / f"base{workers}", workers)
        hit = peak_pack(bomb, tmp_path / f"bomb{workers}", workers)
        assert (base["count"], hit["count"]) == (GOOD, GOOD)
        grew = (hit[who] - base[who]) << 10
        assert grew < BOMB // 4, (workers, base, hit)


# --- links planted in OUT and beside it (point 3, the packer's side) ---


@pytest.fixture()
def src(tmp_path) -> Path:
    make_tree(tmp_path / "src", classes=("a", "b"), per_class=3)
    return tmp_path / "src"


@pytest.fixture()
def victim(tmp_path) -> Path:
    """A file outside OUT that a planted link points at: it must never change."""
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_bytes(b"precious bytes\n" * 100)
    return path


def planted_message(path: Path, target: Path, what: str = "a file") -> str:
    return (
        f"{path} is a symbolic link (to {target}), where mixshard makes {what} of its own; "
        "nothing was written through it. Remove it (and find out who made it), then run this "
        "again"
    )


@pytest.mark.parametrize(
    "name",
    [
        ".mixshard-lock",
        ".mixshard-pack.jsonl.tmp",
        "index.json.tmp",
        ".mixshard-pack.jsonl",
        "shard-000000.tar.partial",
        ".mixshard-pack-members.tmp",
    ],
)
def test_a_link_planted_in_out_is_refused_and_its_target_untouched(src, victim, tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    before = victim.read_bytes()
    res = run("pack", src, out, "--size", 8, "--workers", 1, "--resume")
    assert res.exit_code == 1, res.output
    assert res.output == f"Error: {planted_message(out / name, victim)}\n"
    assert victim.read_bytes() == before
    assert os.listdir(out) == [name] and (out / name).is_symlink()


def test_a_hard_link_planted_as_the_lock_file_is_refused(src, victim, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / ".mixshard-lock")
    before = victim.read_bytes()
    with pytest.raises(OutputError) as err:
        mixshard.pack(src, out, size=8, workers=1)
    assert str(err.value).startswith(
        f"{out / '.mixshard-lock'} is a file with 2 hard links, where mixshard makes a file "
        "of its own; nothing was written through it."
    )
    assert victim.read_bytes() == before


def test_a_link_planted_while_packing_is_never_written_through(src, victim, tmp_path):
    """The names are checked before anything is written, and again when each file is made:
    a link planted once the pack runs (here: as `index.json.tmp`) is refused there."""
    out = tmp_path / "out"
    before = victim.read_bytes()

    def plant(progress):
        if progress.done and not (out / "index.json.tmp").is_symlink():
            (out / "index.json.tmp").symlink_to(victim)

    with pytest.raises(OutputError) as err:
        mixshard.pack(src, out, size=8, workers=1, progress=plant)
    assert str(err.value) == planted_message(out / "index.json.tmp", victim)
    assert victim.read_bytes() == before
    assert not (out / "index.json").exists()


def test_create_file_replaces_a_stale_file_and_refuses_links_and_fifos(tmp_path, victim):
    stale = tmp_path / "x.tmp"
    stale.write_bytes(b"left by a killed run")
    os.link(stale, tmp_path / "other")  # removing the name leaves the other link's bytes
    fd = create_file(stale)
    os.write(fd, b"new")
    os.close(fd)
    assert stale.read_bytes() == b"new"
    assert (tmp_path / "other").read_bytes() == b"left by a killed run"

    (tmp_path / "l.tmp").symlink_to(victim)
    with pytest.raises(OutputError, match="is a symbolic link"):
        create_file(tmp_path / "l.tmp")
    with pytest.raises(OutputError, match="is a symbolic link"):
        atomic_write(tmp_path / "l", b"data")
    os.mkfifo(tmp_path / "f.tmp")
    with pytest.raises(OutputError, match="is not a regular file"):
        create_file(tmp_path / "f.tmp")
    with pytest.raises(OutputError, match="is not a regular file"):
        open_own(tmp_path / "f.tmp", os.O_WRONLY)  # no reader: the open must not block
    assert victim.read_bytes() == b"precious bytes\n" * 100


@pytest.fixture()
def old_pack(src, tmp_path) -> Path:
    out = tmp_path / "out"
    mixshard.pack(src, out, size=8, workers=1)
    return out


@pytest.mark.parametrize("kind", ["new", "old"])
@pytest.mark.parametrize("target", ["folder", "file"])
def test_a_linked_staging_folder_is_refused(old_pack, victim, tmp_path, src, kind, target):
    out = old_pack
    before = files(out)
    if target == "folder":
        victim = victim.parent / "empty"
        victim.mkdir()
    link = tmp_path / f".out.mixshard-{kind}"
    link.symlink_to(victim)
    res = run("pack", src, out, "--size", 10, "--workers", 1, "--overwrite")
    assert res.exit_code == 1, res.output
    assert res.output.startswith(f"Error: {planted_message(link, victim, 'a folder')}")
    assert files(out) == before
    assert link.is_symlink()
    if target == "folder":
        assert os.listdir(victim) == []
    else:
        assert victim.read_bytes() == b"precious bytes\n" * 100


def test_overwrite_through_a_linked_out_replaces_the_pack_it_points_to(src, tmp_path):
    real = tmp_path / "disk" / "pack"
    mixshard.pack(src, real, size=8, workers=1)
    link = tmp_path / "out"
    link.symlink_to(real)
    res = run("pack", src, link, "--size", 10, "--workers", 1, "--overwrite")
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert Manifest.load(real).size == 10  # the new pack is where the link points
    assert sorted(os.listdir(tmp_path / "disk")) == ["pack"]  # no old pack left beside it
    assert not any(n.startswith(".out.mixshard") for n in os.listdir(tmp_path))
    fresh = tmp_path / "fresh"
    mixshard.pack(src, fresh, size=10, workers=1)
    assert files(real) == files(fresh)


# --- Ctrl-C while the decode workers start (point 8) ---

# Sends itself SIGINT from inside `start_workers`, as a Ctrl-C pressed while the workers are being
# forked, then says whether the start noticed, and how many workers are left after a bound.
_CTRL_C_AT_START = textwrap.dedent(
    """
    import multiprocessing, os, signal, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from mixshard.writing.run import decodeworkers
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where pytest ignores it

    real = ProcessPoolExecutor._spawn_process
    def spawn(self):
        real(self)
        if len(self._processes) == 1:  # one worker forked, more to come
            os.kill(os.getpid(), signal.SIGINT)

    # a start without Ctrl-C: the workers ignore a SIGINT of their own and go on
    pool, _ = decodeworkers.start_workers(2)
    for pid in list(pool._processes):
        os.kill(pid, signal.SIGINT)
    time.sleep(0.2)
    alive = all(p.is_alive() for p in pool._processes.values())
    print("survived" if alive and pool.submit(os.getpid).result(10) else "died")
    pool.shutdown()

    ProcessPoolExecutor._spawn_process = spawn
    try:
        pool, _ = decodeworkers.start_workers(3)
        print("lost")
    except KeyboardInterrupt:
        print("interrupted")
    deadline = time.monotonic() + 20
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    print("left", len(multiprocessing.active_children()))
    """
)


def test_ctrl_c_while_the_workers_start_is_not_lost():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C_AT_START], capture_output=True, text=True, timeout=60,
        env=env,
    )  # fmt: skip
    assert done.stdout.split() == ["survived", "interrupted", "left", "0"], done.stderr
    assert "Traceback" not in done.stderr


# The `mixshard` command with each image's decode slowed down (a pack of 40 lasts ~0.5 s),
# saying when it starts its decode workers.
_SLOW_PACK = textwrap.dedent(
    """
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where pytest ignores it
    from mixshard.writing.run import decodeworkers
    real_load, real_start = decodeworkers.load_image, decodeworkers.start_workers
    def slow(*args, **kwargs):
        time.sleep(0.02)
        return real_load(*args, **kwargs)
    def start(*args, **kwargs):
        print("starting", flush=True)
        return real_start(*args, **kwargs)
    decodeworkers.load_image, decodeworkers.start_workers = slow, start
    from mixshard.cli import cli
    cli.main(sys.argv[1:], prog_name="mixshard")
    """
)


def test_ctrl_c_at_random_moments_of_a_pack_start_always_interrupts(tmp_path):
    """Ctrl-C (SIGINT to the process group) 0-40 ms after the pack begins to start its
    workers, while they are forked: every try ends as an interrupted pack (exit 130)."""
    import random

    make_tree(tmp_path / "src", classes=("a", "b"), per_class=20)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = random.Random(40)
    for attempt in range(10):
        out = tmp_path / f"out{attempt}"
        args = ["pack", tmp_path / "src", out, "--size", 8, "--shard-size", 10, "-q"]
        child = subprocess.Popen(
            [sys.executable, "-c", _SLOW_PACK, *map(str, args), "--workers", str(2 + attempt % 3)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            assert child.stdout is not None and child.stdout.readline() == "starting\n"
            time.sleep(rng.uniform(0, 0.04))
            os.killpg(child.pid, signal.SIGINT)
            _, err = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(10)
        assert child.returncode == 130, (attempt, err)
        assert err.endswith(
            "Interrupted. Finished shards are kept: rerun the same command with --resume to "
            "continue.\n"
        ), (attempt, err)
        assert "Traceback" not in err


# --- large non-images in archives, and the scratch a .tar.gz needs (point 8) ---

ZEROS = 4 << 20  # each "PNG" of zeros: over the 1 MB past which members are sniffed first


def zeros_tree(root: Path) -> Path:
    """`root/ds/set`: three 4 MB files of zeros named .png, four real images."""
    folder = root / "ds" / "set"
    folder.mkdir(parents=True)
    for i in range(4):
        noise(folder / f"img{i}.png", seed=i)
    for i in range(3):
        (folder / f"zero{i}.png").write_bytes(bytes(ZEROS))
    return folder


def archived(root: Path, kind: str) -> Path:
    path = root / f"ds.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted((root / "ds").rglob("*")):
                zf.write(p, p.relative_to(root))
    else:
        with tarfile.open(path, "w:gz" if kind == "tar.gz" else "w") as tf:
            tf.add(root / "ds", arcname="ds")
    return path


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "zip"])
def test_huge_non_images_in_an_archive_are_skipped_from_their_first_bytes(
    tmp_path, monkeypatch, kind
):
    folder = zeros_tree(tmp_path)
    ref = tmp_path / "ref"
    mixshard.pack(folder, ref, size=8, workers=1)
    reasons = {s["path"]: s["reason"] for s in Manifest.load(ref).skipped}
    assert reasons == {f"zero{i}.png": NOT_AN_IMAGE for i in range(3)}

    from mixshard.writing import packing

    copied: list[int] = []
    real = packing.materialize

    def measured(source, out, suffix):
        made = real(source, out, suffix)
        copied.append(os.path.getsize(made.reader.path) if made is not source else 0)
        return made

    monkeypatch.setattr(packing, "materialize", measured)
    reads: list[int] = []
    pread = os.pread

    def counted(fd, n, offset):
        reads.append(n)
        return pread(fd, n, offset)

    source = archived(tmp_path, kind)
    monkeypatch.setattr(os, "pread", counted)
    out = tmp_path / "out"
    mixshard.pack(source, out, size=8, workers=1, within="ds/set")
    assert files(out) == files(ref)  # the same skips, byte for byte
    images = sum(p.stat().st_size for p in folder.glob("img*.png"))
    # a .tar.gz's scratch file holds the images and 16 bytes of each file of zeros
    assert copied == ([images + 3 * 16] if kind == "tar.gz" else [])
    assert max(reads) < ZEROS  # no file of zeros is read whole
    assert not any(n.startswith(".mixshard") for n in os.listdir(out))


def test_the_scratch_of_a_tar_gz_is_counted_in_the_free_space_check(tmp_path, monkeypatch):
    folder = zeros_tree(tmp_path)
    gz = archived(tmp_path, "tar.gz")
    from mixshard.writing.out import outdir

    images = sum(p.stat().st_size for p in folder.glob("img*.png"))
    scratch = images + 3 * ZEROS  # what the listing says it may copy: the members' sizes
    pixels = 7 * (3 * 8 * 8 + outdir.PER_IMAGE_OVERHEAD)  # 7 planned images of 8x8
    monkeypatch.setattr(outdir, "free_bytes", lambda _: pixels + scratch - 1)
    with pytest.raises(OutputError) as err:
        mixshard.pack(gz, tmp_path / "out", size=8, workers=1, within="ds/set")
    assert str(err.value).startswith(
        f"not enough free space for this pack in {tmp_path / 'out'}: its 7 images of 8x8 px "
        f"(and {scratch:,} bytes of archive members copied there while it runs) need about "
        f"{pixels + scratch:,} bytes"
    )
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(outdir, "free_bytes", lambda _: pixels + scratch)
    assert mixshard.pack(gz, tmp_path / "out", size=8, workers=1, within="ds/set").manifest


# --- hard links in a tar (point 8) ---


def linked_tree(root: Path) -> Path:
    """`root/ds/train` with hard links: within the folder, to a hidden file, and to a file
    outside it that the archive lists first (`ds/extra`)."""
    train = root / "ds" / "train"
    for sub in ("a", "b"):
        (train / sub).mkdir(parents=True)
    (root / "ds" / "extra").mkdir()
    noise(train / "a" / "x.png", seed=1)
    noise(train / ".hidden.png", seed=2)
    noise(root / "ds" / "extra" / "z.png", seed=3)
    noise(train / "b" / "own.png", seed=4)
    os.link(train / "a" / "x.png", train / "b" / "y.png")
    os.link(train / ".hidden.png", train / "a" / "h.png")
    os.link(root / "ds" / "extra" / "z.png", train / "b" / "z.png")
    return train


@pytest.mark.parametrize("kind", ["tar", "tar.gz"])
def test_hard_links_in_a_tar_pack_as_the_extracted_folder(tmp_path, kind):
    train = linked_tree(tmp_path)
    tar = archived(tmp_path, kind)
    with tarfile.open(tar) as tf:
        links = sorted(m.name for m in tf if m.islnk())
    assert links == ["ds/train/a/h.png", "ds/train/b/y.png", "ds/train/b/z.png"]
    ref, out = tmp_path / "ref", tmp_path / "out"
    mixshard.pack(train, ref, size=8, workers=1)
    mixshard.pack(tar, out, size=8, workers=1, within="ds/train")
    assert Manifest.load(out).count == 5 and Manifest.load(out).skipped == ()
    assert files(out) == files(ref)


def test_a_hard_link_chain_and_a_link_to_nothing(tmp_path):
    """A link to a link reads the file the first one reads; a link whose target the archive
    does not hold (as a file, before it) is skipped, as extraction fails on it."""
    from mixshard.writing.sources import archive

    good = noise(tmp_path / "g.png").read_bytes()
    tar = tmp_path / "x.tar"
    with tarfile.open(tar, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, data, link in [
            ("other/first.png", good, None),
            ("set/a.png", None, "other/first.png"),
            ("set/b.png", None, "set/a.png"),
            ("set/c.png", None, "nowhere.png"),
            ("set/d.png", None, "set/e.png"),  # listed before its target
            ("set/e.png", good, None),
        ]:
            info = tarfile.TarInfo(name)
            if link is None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                info.type, info.linkname = tarfile.LNKTYPE, link
                tf.addfile(info)
    source, found = archive.open_source(tar, "set")
    with tarfile.open(tar) as tf:
        first = tf.getmember("other/first.png")
    assert source.refs == {
        "a.png": (first.offset_data, len(good)),
        "b.png": (first.offset_data, len(good)),
        "e.png": source.refs["e.png"],
    }
    reasons = {s["path"]: s["reason"] for s in found.skipped}
    assert reasons == {
        "c.png": "a hard link to nowhere.png, which the archive does not hold as a file before "
        "it: not read",
        "d.png": "a hard link to set/e.png, which the archive does not hold as a file before "
        "it: not read",
    }


def test_a_ctrl_c_python_drops_is_raised_again(monkeypatch):
    """A KeyboardInterrupt raised in a `__del__` (or an import's weakref callback, where a
    Ctrl-C at the start of a pack landed 1 time in 80) is dropped by Python; `CtrlC` saw it,
    and the pack loop's next progress report raises it."""
    from mixshard.writing.run.ctrlc import CtrlC

    class Dropper:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)

    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda what: dropped.append(what.exc_type))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with CtrlC() as ctrl_c:
            Dropper()  # made and dropped at once: the interrupt goes nowhere
            assert ctrl_c.seen == 1
            with pytest.raises(KeyboardInterrupt):
                ctrl_c.check()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert dropped == [KeyboardInterrupt]  # what Python did with it

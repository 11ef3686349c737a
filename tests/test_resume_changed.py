"""`--resume` reuses a finished shard only while its source files keep the size and mtime the
journal recorded (issue 22, point 7)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import files, noise, run
from PIL import Image

from mixshard.core.constants import JOURNAL_GLOB

ARGS = ["--size", "8", "--shard-size", "5", "--block-size", "4", "--workers", "1", "--no-shuffle"]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """20 distinct PNGs: 4 shards of 5 in name order (no shuffle)."""
    root = tmp_path / "src"
    for i in range(20):
        noise(root / f"{i:02d}.png", size=(24, 16), seed=i)
    return root


def half_packed(src: Path, out: Path) -> None:
    """Shards 0 and 2 written by part 0 of 2, the other two not yet: an unfinished pack."""
    res = run("pack", src, out, *ARGS, "--part", "0/2")
    assert res.exit_code == 0, res.output
    assert sorted(p for p in os.listdir(out) if p.endswith(".tar")) == [
        "shard-000000.tar",
        "shard-000002.tar",
    ]


def fresh(src: Path, out: Path) -> dict[str, bytes]:
    assert run("pack", src, out, *ARGS).exit_code == 0
    return files(out)


def test_the_journal_records_size_and_mtime_of_each_source_file(src, tmp_path):
    out = tmp_path / "out"
    half_packed(src, out)
    (journal,) = out.glob(JOURNAL_GLOB)
    shards = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
    first = next(s for s in shards if s["plan"] == 0)
    st = (src / "00.png").stat()
    assert len(first["sources"]) == 5 and first["sources"][0] == [st.st_size, st.st_mtime_ns]


def _same_mtime_other_content(path: Path) -> None:
    st = path.stat()
    noise(path, size=(30, 20), seed=99)  # other pixels, other size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _reencoded(path: Path) -> None:
    img = Image.open(path)
    img.load()
    img.save(path, optimize=True, compress_level=1)  # the same pixels, other bytes
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


@pytest.mark.parametrize("change", [_same_mtime_other_content, _reencoded])
def test_a_shard_whose_source_file_changed_is_rewritten(src, tmp_path, change):
    out = tmp_path / "out"
    half_packed(src, out)
    change(src / "11.png")  # in shard 2 (images 10-14), which part 0 wrote
    res = run("pack", src, out, *ARGS, "--resume")
    assert res.exit_code == 0, res.output
    assert ", 1 reused from earlier runs, 1 rewritten (their source files changed)," in res.output
    assert files(out) == fresh(src, tmp_path / "ref")


def test_unchanged_sources_are_reused(src, tmp_path):
    out = tmp_path / "out"
    half_packed(src, out)
    res = run("pack", src, out, *ARGS, "--resume")
    assert res.exit_code == 0 and ", 2 reused from earlier runs, " in res.output
    assert "rewritten" not in res.output
    assert files(out) == fresh(src, tmp_path / "ref")


def test_a_journal_without_source_stamps_is_not_trusted(src, tmp_path):
    out = tmp_path / "out"
    half_packed(src, out)
    (journal,) = out.glob(JOURNAL_GLOB)
    lines = journal.read_text().splitlines()
    old = [lines[0]] + [
        json.dumps({k: v for k, v in json.loads(line).items() if k != "sources"})
        for line in lines[1:]
    ]
    journal.write_text("\n".join(old) + "\n")  # as an earlier version wrote it
    res = run("pack", src, out, *ARGS, "--resume")
    assert res.exit_code == 0 and "2 rewritten (their source files changed)" in res.output
    assert files(out) == fresh(src, tmp_path / "ref")


def test_from_an_archive_a_changed_archive_rewrites_its_shards(src, tmp_path):
    import tarfile

    archive = tmp_path / "src.tar"

    def write_tar():
        with tarfile.open(archive, "w") as tf:
            for p in sorted(src.iterdir()):
                tf.add(p, arcname=f"src/{p.name}")

    write_tar()
    same, out = tmp_path / "same", tmp_path / "out"
    for folder in (same, out):
        res = run("pack", archive, folder, *ARGS, "--within", "src", "--part", "0/2")
        assert res.exit_code == 0, res.output
    res = run("pack", archive, same, *ARGS, "--within", "src", "--resume")
    assert res.exit_code == 0 and ", 2 reused from earlier runs, " in res.output, res.output
    assert "rewritten" not in res.output
    _same_mtime_other_content(src / "11.png")
    st = archive.stat()
    write_tar()  # the archive changed: the shards packed from it are packed again
    os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    res = run("pack", archive, out, *ARGS, "--within", "src", "--resume")
    assert res.exit_code == 0 and "2 rewritten (their source files changed)" in res.output
    assert files(out) == fresh(src, tmp_path / "ref")

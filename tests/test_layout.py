"""The `.npy` header check the readers run on every block, in reader threads."""

from __future__ import annotations

import ast
import threading

import numpy as np
import pytest

from mixshard.core import layout


def _refuse(text):
    raise AssertionError("the writer's own header must not be parsed")


def test_the_writers_header_passes_without_parsing(monkeypatch):
    monkeypatch.setattr(layout.ast, "literal_eval", _refuse)
    assert (
        layout.header_problem(layout.npy_header((4, 3, 8, 8), np.uint8), (4, 3, 8, 8), np.uint8)
        is None
    )
    assert layout.header_problem(layout.npy_header((4,), np.int32), (4,), np.int32) is None


def _respaced(shape, dtype) -> bytes:
    """An equivalent header as another writer might pad it: same dict, other spacing."""
    text = (
        f"{{'shape': {tuple(shape)!r}, 'fortran_order': False, 'descr': '{np.dtype(dtype).str}'}}"
    )
    body = text.ljust(118) + "\n"
    return layout.NPY_MAGIC + len(body).to_bytes(2, "little") + body.encode("latin1")


def test_other_spellings_are_parsed_under_the_lock(monkeypatch):
    seen = []
    parse = ast.literal_eval

    def checked(text):
        seen.append(layout._PARSE_LOCK.locked())
        return parse(text)

    monkeypatch.setattr(layout.ast, "literal_eval", checked)
    assert layout.header_problem(_respaced((4, 3, 8, 8), np.uint8), (4, 3, 8, 8), np.uint8) is None
    assert layout.header_problem(_respaced((5, 3, 8, 8), np.uint8), (4, 3, 8, 8), np.uint8) == (
        "a .npy header that is not uint8[4, 3, 8, 8]"
    )
    assert seen == [True, True]


@pytest.mark.parametrize(
    "raw, problem",
    [
        (b"PK\x03\x04" + b" " * 60, "no .npy header where index.json says"),
        (layout.NPY_MAGIC + b"\x10\x00{'descr': '|u1',", "a damaged .npy header"),
    ],
)
def test_damaged_headers_are_named(raw, problem):
    assert layout.header_problem(raw, (4,), np.int32) == problem


def test_reader_threads_check_headers_at_once():
    """Reader threads check headers concurrently; each gets its own, right answer."""
    good = _respaced((4, 3, 8, 8), np.uint8)
    bad = _respaced((5, 3, 8, 8), np.uint8)
    answers: list[tuple[str | None, str | None]] = []

    def check():
        for _ in range(200):
            answers.append(
                (
                    layout.header_problem(good, (4, 3, 8, 8), np.uint8),
                    layout.header_problem(bad, (4, 3, 8, 8), np.uint8),
                )
            )

    threads = [threading.Thread(target=check) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(answers) == {(None, "a .npy header that is not uint8[4, 3, 8, 8]")}
    assert len(answers) == 1600


def test_each_block_digest_covers_exactly_its_span(tree, tmp_path):
    """The manifest's per-block sha256 is the digest of `layout.block_span` of the shard file,
    so a ranged read of one block can be checked on its own."""
    import hashlib

    from mixshard import pack
    from mixshard.core import layout
    from mixshard.core.manifest import Manifest

    pack(tree, tmp_path / "p", size=8, block_size=3, shard_size=6, workers=1)
    found = Manifest.load(tmp_path / "p")
    spans = 0
    for shard in found.shards:
        data = (tmp_path / "p" / shard.name).read_bytes()
        for b in shard.blocks:
            start, end = layout.block_span(b.offset, b.labels_offset, b.count, found.size)
            assert start % 512 == 0 and end % 512 == 0
            assert data[start : start + 512].startswith(f"{b.key}.images.npy".encode())
            assert hashlib.sha256(data[start:end]).hexdigest() == b.sha256
            spans += 1
    assert spans == sum(len(s.blocks) for s in found.shards) == 6  # 18 images, 3 per block

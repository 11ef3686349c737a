"""Hostile input on the writing side (issue 40): a zip bomb, links planted in OUT and beside
it, an archive of huge non-images, Ctrl-C while the workers start, archive hard links.

Each case pins its outcome: the skip reason or error (class and key words), files outside
OUT byte for byte, the peak memory of a pack run in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from helpers import noise

import mixshard
from mixshard.core.errors import SkippedImagesError

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

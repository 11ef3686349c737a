"""`mixshard verify` and `mixshard inspect`."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import run


@pytest.fixture
def packed(tree, tmp_path):
    out = tmp_path / "out"
    assert run("pack", tree, out, "--size", 8, "--shard-size", 6, "--workers", 1).exit_code == 0
    return out


def test_verify_ok(packed):
    res = run("verify", packed)
    assert res.exit_code == 0
    assert res.output.startswith("OK: 3 shards, 18 images, ")
    assert res.output.rstrip().endswith("match index.json")


def test_verify_names_each_bad_shard(packed):
    data = bytearray((packed / "shard-000001.tar").read_bytes())
    data[2000] ^= 0xFF
    (packed / "shard-000001.tar").write_bytes(bytes(data))
    full = (packed / "shard-000002.tar").read_bytes()
    (packed / "shard-000002.tar").write_bytes(full[:-700])
    shutil.copy(packed / "shard-000000.tar", packed / "shard-000007.tar")
    (packed / "shard-000000.tar").unlink()
    res = run("verify", packed, "--quiet")
    assert res.exit_code == 1
    assert res.stdout.splitlines() == [
        "BAD shard-000007.tar: extra: a shard file that index.json does not list",
        "BAD shard-000000.tar: missing",
        "BAD shard-000001.tar: altered: sha256 differs from index.json",
        f"BAD shard-000002.tar: truncated: {len(full) - 700} bytes, index.json says {len(full)}",
    ]
    assert res.stderr == (
        f"Error: 4 bad shard file(s) in {packed}; repack with `mixshard pack "
        f"SRC {packed} --overwrite` (or restore the files)\n"
    )


def test_a_manifest_with_moved_offsets_is_refused(packed):
    doc = json.loads((packed / "index.json").read_text())
    doc["shards"][0]["blocks"][0]["offset"] += 64
    (packed / "index.json").write_text(json.dumps(doc))
    res = run("verify", packed, "-q")
    assert res.exit_code == 1
    assert res.stderr == (
        f"Error: {packed}/index.json is inconsistent (shard-000000.tar block 00000000: offset "
        f"{doc['shards'][0]['blocks'][0]['offset']} is not where a block can start); the pack "
        "is damaged: repack it with `mixshard pack SRC OUT --overwrite`\n"
    )


def test_verify_checks_offsets_against_the_tar(tree, tmp_path):
    out = tmp_path / "out"
    assert run("pack", tree, out, "--size", 8, "--block-size", 3, "--workers", 1).exit_code == 0
    # two blocks of 3 images trade keys: a consistent layout, but not what the tar holds
    doc = json.loads((out / "index.json").read_text())
    blocks = doc["shards"][0]["blocks"]
    blocks[0]["key"], blocks[1]["key"] = blocks[1]["key"], blocks[0]["key"]
    (out / "index.json").write_text(json.dumps(doc))
    res = run("verify", out, "-q")
    assert res.exit_code == 1
    assert res.stdout == (
        f"BAD shard-000000.tar: 00000001.images.npy data starts at byte {blocks[1]['offset']}, "
        f"manifest says {blocks[0]['offset']}\n"
    )


def test_verify_and_inspect_without_a_manifest(tmp_path):
    (tmp_path / "half").mkdir()
    res = run("verify", tmp_path / "half")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: no index.json in {tmp_path}/half: not a mixshard pack (no images, packs or "
        f"journal there either); make one with `mixshard pack SRC {tmp_path}/half`\n"
    )
    res = run("inspect", tmp_path / "nothere")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: pack folder not found: {tmp_path}/nothere; make it with "
        f"`mixshard pack SRC {tmp_path}/nothere`\n"
    )
    (tmp_path / "half" / "index.json").write_text('{"format": "mixshard", "version": 7}')
    res = run("inspect", tmp_path / "half")
    assert res.exit_code == 1
    assert "is shard format version 7; this mixshard reads versions 1, 2" in res.output
    (tmp_path / "half" / "index.json").write_text("{oops")
    res = run("inspect", tmp_path / "half")
    assert res.exit_code == 1 and "is not valid JSON" in res.output


def test_inspect_text_and_json(packed):
    res = run("inspect", packed)
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert lines[0] == f"pack:     {packed} (mixshard format v1)"
    assert lines[1] == "images:   18 (8x8 RGB uint8, NCHW)"
    assert lines[2] == "classes:  3 (cat, dog, eel)"
    # how the pack was resized (issue 48)
    assert lines[3] == "crop:     center, variants 1, seed 0, shuffled yes; resized bilinear"
    assert lines[4].startswith("shards:   3 (256 images per block), ")
    assert lines[5] == "skipped:  0"
    res = run("inspect", packed, "--json")
    doc = json.loads(res.output)
    size = sum(p.stat().st_size for p in packed.glob("shard-*.tar"))
    assert doc == {
        "path": str(packed),
        "count": 18,
        "classes": 3,
        "class_names": ["cat", "dog", "eel"],
        "size": 8,
        "crop": "center",
        "variants": 1,
        "seed": 0,
        "resample": "bilinear",
        "grey": False,
        "shuffle": True,
        "labels": "folders",
        "block_size": 256,
        "shards": 3,
        "bytes": size,
        "skipped": 0,
        "version": 1,
    }


def test_python_dash_m_and_version():
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "mixshard", "--help"], capture_output=True, text=True
    )
    assert res.returncode == 0 and "Usage: mixshard" in res.stdout
    assert "pack" in res.stdout and "verify" in res.stdout and "inspect" in res.stdout
    assert run("--version").output.startswith("mixshard, version ")

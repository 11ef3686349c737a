"""A new user's first day (issue 20), the reading side: errors on what is not a pack say what it
is and what to do, every reader takes a pack folder or its index.json, MIXSHARD_DATA set to a
pack says to set it to the folder above."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import files, make_flat, make_tree, run

ARGS = ["--size", "8", "--workers", "1"]


@pytest.fixture()
def data(tmp_path) -> Path:
    """`data/` holding two packs, `coco` (flat) and `places` (3 classes)."""
    make_flat(tmp_path / "val2017", n=6)
    make_tree(tmp_path / "train", per_class=2)
    assert run("pack", tmp_path / "val2017", tmp_path / "data" / "coco", *ARGS).exit_code == 0
    assert run("pack", tmp_path / "train", tmp_path / "data" / "places", *ARGS).exit_code == 0
    return tmp_path / "data"


# ------------------------------------------------------------------ 4. advice that leads somewhere


def test_4_an_image_folder_is_not_a_pack_and_is_not_told_to_resume(tmp_path):
    src = tmp_path / "real-frames"
    make_tree(src, per_class=2)
    before = files(src / "cat")
    for command in ("inspect", "verify"):
        res = run(command, src)
        assert res.exit_code == 1
        assert res.output == (
            f"Error: no index.json in {src}: an image folder, not a pack; pack it with "
            f"`mixshard pack {src} OUT` (OUT: a new folder outside it)\n"
        )
    assert sorted(os.listdir(src)) == ["cat", "dog", "eel"] and files(src / "cat") == before


def test_4_a_folder_of_packs_lists_them(data):
    res = run("verify", data)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: no index.json in {data}: a folder of 2 pack(s), not a pack; pass one of them: "
        f"{data}/coco, {data}/places\n"
    )


def test_4_a_shard_file_names_its_pack_folder(data):
    res = run("verify", data / "coco" / "shard-000000.tar")
    assert res.exit_code == 1
    assert res.output == (  # (the library's words: reading/source.py asks what PACK is)
        f"Error: {data}/coco/shard-000000.tar: shard URLs, brace patterns and pipe: commands are "
        f"no longer read; give {data}/coco (the folder or URL that holds index.json: a local "
        "folder, https://host/prefix, s3://bucket/prefix or gs://bucket/prefix)\n"
    )


def test_4_resume_is_suggested_only_where_a_journal_is(data, tree):
    half = data / "half"
    half.mkdir()
    (half / ".mixshard-pack.jsonl").write_text('{"fingerprint": "x"}\n')
    res = run("inspect", half)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: no index.json in {half}: an interrupted pack; finish it with `mixshard pack "
        f"SRC {half} --resume` (the same SRC and options)\n"
    )
    (half / ".mixshard-pack.jsonl").unlink()
    res = run("inspect", half)
    assert res.exit_code == 1 and "--resume" not in res.output


def test_4_a_pack_as_source_says_so(data):
    before = files(data / "coco")
    res = run("pack", data / "coco", data / "coco2", *ARGS)
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {data}/coco is a mixshard pack (it holds index.json), not an image folder; "
        "pack the folder of the original images instead (an existing pack is read as it is)\n"
    )
    res = run("pack", data, data.parent / "data2", *ARGS)
    assert res.exit_code == 1
    assert res.output.startswith(
        f"Error: {data} is a folder of mixshard packs (coco, places), not an image folder"
    )
    assert sorted(os.listdir(data)) == ["coco", "places"] and files(data / "coco") == before
    assert not (data.parent / "data2").exists()


# --------------------------------------------------------- 5. the pack folder or its index.json


def test_5_every_read_command_takes_index_json(data, tmp_path):
    index = data / "coco" / "index.json"
    res = run("verify", index)
    assert res.exit_code == 0 and res.output.startswith("OK: 1 shard, 6 images")
    res = run("inspect", index)
    assert res.exit_code == 0 and "images:   6 (8x8 RGB uint8, NCHW)" in res.output
    res = run("preview", index, "-o", tmp_path / "g.png", "-n", 4)
    assert res.exit_code == 0 and (tmp_path / "g.png").exists()


def test_5_loader_and_overlay_take_index_json(data):
    import torch

    import mixshard

    index = data / "places" / "index.json"
    by_file = [b.clone() for b in mixshard.loader(index, batch_size=3, num_workers=0)]
    by_folder = [b.clone() for b in mixshard.loader(data / "places", batch_size=3, num_workers=0)]
    assert len(by_file) == 2 and all(torch.equal(a, b) for a, b in zip(by_file, by_folder))
    obs = torch.zeros(4, 6, 8, 8)
    a = mixshard.Overlay(index, device="cpu", flip=False)(obs.clone())
    b = mixshard.Overlay(data / "places", device="cpu", flip=False)(obs.clone())
    assert torch.equal(a, b)


# -------------------------------------------------------------- 7. MIXSHARD_DATA set to a pack


def test_7_mixshard_data_pointing_at_a_pack(data, monkeypatch):
    from mixshard.compat import pack_folder
    from mixshard.core.errors import MixshardError

    monkeypatch.setenv("MIXSHARD_DATA", str(data / "coco"))
    with pytest.raises(MixshardError) as err:
        pack_folder("coco")
    assert str(err.value) == (
        f"MIXSHARD_DATA={data}/coco is a pack itself (it holds index.json), not the folder that "
        f"holds the packs; set MIXSHARD_DATA to the folder above it: MIXSHARD_DATA={data}"
    )
    monkeypatch.setenv("MIXSHARD_DATA", str(data))
    assert pack_folder("coco") == data / "coco"

"""`mixshard preview`."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_tree, noise, run, solid
from PIL import Image

import mixshard
from mixshard.cli.sheet import GAP, LABEL_HEIGHT, preview_grid


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    root = tmp_path_factory.mktemp("preview")
    make_tree(root / "src", classes=("cat", "dog"), per_class=5)
    mixshard.pack(root / "src", root / "labelled", size=16, workers=1)
    mixshard.pack(root / "src", root / "plain", size=16, workers=1, labels="none")
    return root


def test_grid_layout_and_labels(packs, tmp_path):
    out = tmp_path / "grid.png"
    res = run("preview", packs / "labelled", "-o", out, "-n", 9, "--seed", 1)
    assert res.exit_code == 0
    assert res.output == f"Wrote {out}: 9 images from {packs / 'labelled'}\n"
    img = Image.open(out)
    tile = 16 * 6  # 16 px images shown at 96 px
    assert img.size == (3 * (tile + GAP) + GAP, 3 * (tile + LABEL_HEIGHT + GAP) + GAP)
    plain, shown = preview_grid(packs / "plain", 9, seed=1)
    assert shown == 9
    assert plain.size == (3 * (tile + GAP) + GAP, 3 * (tile + GAP) + GAP)
    # the same seed shows the same images; the label strip has text
    labelled = np.asarray(img)
    assert np.array_equal(
        labelled[GAP : GAP + tile, GAP : GAP + tile],
        np.asarray(plain)[GAP : GAP + tile, GAP : GAP + tile],
    )
    strip = labelled[GAP + tile : GAP + tile + LABEL_HEIGHT, GAP : GAP + tile]
    assert (strip < 128).any()


def test_n_is_capped_by_the_pack(packs, tmp_path):
    res = run("preview", packs / "plain", "-o", tmp_path / "g.png", "-n", 500)
    assert res.exit_code == 0 and "Wrote" in res.output and ": 10 images" in res.output


def test_obs_blend(packs, tmp_path):
    solid(tmp_path / "obs.png", (200, 0, 100), size=(40, 30))
    base = np.asarray(preview_grid(packs / "plain", 4, seed=2)[0]).astype(int)
    half = np.asarray(
        preview_grid(packs / "plain", 4, seed=2, obs=tmp_path / "obs.png", alpha=0.5)[0]
    ).astype(int)
    zero, _ = preview_grid(packs / "plain", 4, seed=2, obs=tmp_path / "obs.png", alpha=0.0)
    zero = np.asarray(zero)
    tile = np.s_[GAP : GAP + 96, GAP : GAP + 96]
    assert (zero[tile] == [200, 0, 100]).all()
    want = np.floor(0.5 * np.array([200, 0, 100]) + 0.5 * base[tile] + 0.5)
    assert np.array_equal(half[tile], want)


def test_errors(packs, tmp_path):
    res = run("preview", tmp_path / "none", "-o", tmp_path / "g.png")
    assert res.exit_code == 1 and res.output.startswith("Error: pack folder not found:")
    res = run("preview", packs / "plain", "-o", tmp_path / "g.png", "--obs", tmp_path / "no.png")
    assert (
        res.output
        == f"Error: cannot read the observation image {tmp_path / 'no.png'}: no such file\n"
    )
    (tmp_path / "bad.png").write_text("not an image")
    res = run("preview", packs / "plain", "-o", tmp_path / "g.png", "--obs", tmp_path / "bad.png")
    bad = tmp_path / "bad.png"
    assert (
        res.output == f"Error: cannot read the observation image {bad}: not an image PIL can read\n"
    )
    res = run("preview", packs / "plain", "-o", tmp_path / "dir" / "missing" / "g.png")
    assert res.exit_code == 1 and res.output.startswith(f"Error: cannot write {tmp_path}")
    assert run("preview", packs / "plain").exit_code == 2  # -o is required
    noise(tmp_path / "ok.png")
    res = run("preview", packs / "plain", "-o", tmp_path / "g.png", "--alpha", 2)
    assert res.exit_code == 2 and "2.0 is not in the range 0<=x<=1" in res.output

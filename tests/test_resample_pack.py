"""`pack(resample="bilinear-no-antialias")` / `--resample`: packs resized as F.interpolate
resizes (within a level), recorded in index.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import noise, read_pack, run
from PIL import Image

from mixshard import pack

torch = pytest.importorskip("torch")
NO_AA = "bilinear-no-antialias"


def interpolate(rgb: np.ndarray, size: int) -> np.ndarray:
    """`F.interpolate(bilinear, align_corners=False, antialias=False)` of `rgb` (HWC uint8)
    to `(3, size, size)`, rounded half up: int."""
    x = torch.from_numpy(np.array(rgb)).permute(2, 0, 1).unsqueeze(0).float()
    y = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return (y[0] + 0.5).floor().to(torch.int64).numpy()


def test_a_pack_without_antialias_is_f_interpolate_of_the_decoded_images(tmp_path):
    src = tmp_path / "src"
    sizes = [(200, 150), (30, 50), (120, 120), (97, 61)]  # down, up, square, odd
    for i, size in enumerate(sizes):
        noise(src / f"n{i}.png", size=size, seed=i)
        noise(src / f"j{i}.jpg", size=size, seed=10 + i, quality=95)
    pack(src, tmp_path / "out", size=40, crop="full", workers=1, resample=NO_AA)
    images, _, keys = read_pack(tmp_path / "out")
    assert len(keys) == 2 * len(sizes)
    for image, key in zip(images, keys):
        with Image.open(src / key) as im:
            want = interpolate(np.asarray(im.convert("RGB")), 40)
        diff = np.abs(image.astype(int) - want)
        assert diff.max() <= 1, key  # a JPEG decoded at full size, as PIL decodes it
        assert (diff == 0).mean() >= 0.99, key
    doc = json.loads((tmp_path / "out/index.json").read_text())
    assert doc["options"]["resample"] == NO_AA


def test_the_default_stays_pils_antialiased_filter(tmp_path):
    noise(tmp_path / "src/a.png", size=(200, 160), seed=1)
    pack(tmp_path / "src", tmp_path / "out", size=20, crop="full", workers=1)
    images, _, _ = read_pack(tmp_path / "out")
    with Image.open(tmp_path / "src/a.png") as im:
        pil = np.asarray(im.resize((20, 20), Image.Resampling.BILINEAR)).transpose(2, 0, 1)
        far = np.abs(images[0].astype(int) - interpolate(np.asarray(im), 20)).mean()
    assert np.abs(images[0].astype(int) - pil).max() <= 2
    assert far > 20  # noise shrunk 10x: averaged against two taps' picks
    doc = json.loads((tmp_path / "out/index.json").read_text())
    assert doc["options"]["resample"] == "bilinear"


def make_noise_video(path, frames: int, width: int, height: int) -> None:
    import av

    rng = np.random.default_rng(5)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for _ in range(frames):
            rgb = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def test_a_clip_pack_without_antialias_is_f_interpolate_of_each_decoded_frame(tmp_path):
    import av

    make_noise_video(tmp_path / "src/clip.mp4", 6, 96, 64)
    pack(tmp_path / "src", tmp_path / "out", size=28, clips=True, crop="full", workers=1,
         resample=NO_AA)  # fmt: skip
    images, _, _ = read_pack(tmp_path / "out")
    with av.open(str(tmp_path / "src/clip.mp4")) as c:
        decoded = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(images) == len(decoded) == 6
    for t, (image, rgb) in enumerate(zip(images, decoded)):
        diff = np.abs(image.astype(int) - interpolate(rgb, 28))
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.99, t


def test_the_cli_records_the_filter_and_refuses_another(tmp_path):
    noise(tmp_path / "src/a.png", size=(60, 40), seed=2)
    res = run("pack", tmp_path / "src", tmp_path / "out", "--size", "8", "--resample", NO_AA, "-q")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "out/index.json").read_text())["options"]["resample"] == NO_AA
    shown = run("inspect", tmp_path / "out").output.splitlines()[3]
    assert shown == "crop:     center, variants 1, seed 0, shuffled yes; resized " + NO_AA
    res = run("pack", tmp_path / "src", tmp_path / "o2", "--resample", "nearest")
    assert res.exit_code == 2
    assert "Invalid value for '--resample': 'nearest' is not one of 'bilinear', " in res.output


def test_an_unknown_filter_is_a_value_error_naming_the_choices(tmp_path):
    noise(tmp_path / "src/a.png", seed=3)
    with pytest.raises(ValueError) as err:
        pack(tmp_path / "src", tmp_path / "out", resample="area")
    assert str(err.value) == (
        "unknown resample filter 'area'; use one of bilinear, bilinear-no-antialias"
    )
    assert not (tmp_path / "out").exists()


def test_resuming_with_the_other_filter_names_the_change(tmp_path):
    from mixshard.core.errors import OutputError

    noise(tmp_path / "src/a.png", seed=4)
    pack(tmp_path / "src", tmp_path / "out", size=8, workers=1)
    with pytest.raises(OutputError, match="resample bilinear -> bilinear-no-antialias"):
        pack(tmp_path / "src", tmp_path / "out", size=8, workers=1, resume=True, resample=NO_AA)


def test_a_grey_pack_holds_the_grey_of_each_image_in_every_channel(tmp_path):
    for i, size in enumerate([(60, 40), (33, 47)]):
        noise(tmp_path / "src" / f"{i}.png", size=size, seed=20 + i)
    pack(tmp_path / "src", tmp_path / "rgb", size=16, workers=1, shuffle=False)
    res = run("pack", tmp_path / "src", tmp_path / "grey", "--size", "16", "--workers", "1",
              "--no-shuffle", "--grey", "-q")  # fmt: skip
    assert res.exit_code == 0, res.output
    rgb, _, _ = read_pack(tmp_path / "rgb")
    grey, _, _ = read_pack(tmp_path / "grey")
    for colour, g in zip(rgb, grey):
        want = np.asarray(Image.fromarray(colour.transpose(1, 2, 0)).convert("L"))  # BT.601
        assert all(np.array_equal(g[c], want) for c in range(3))
    assert json.loads((tmp_path / "grey/index.json").read_text())["options"]["grey"] is True
    assert "grey" not in json.loads((tmp_path / "rgb/index.json").read_text())["options"]
    assert run("inspect", tmp_path / "grey", "--json").output.count('"grey": true') == 1

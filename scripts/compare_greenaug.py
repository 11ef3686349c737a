"""mixshard's chroma key against GreenAug's own, run side by side: `chromakey.torch.chroma_key`
(chromakey 0.2.1, which GreenAug's `GreenAugRandom` and `GreenAugGenerative` call) and
`mixshard.compat.chroma_key`, on the same float32 images.

Data: random images (uniform, and clustered around the key colour so that the soft band
between `tola` and `tolb` is full), and the real photographs of --frames (default
../shared/real-frames: DMControl-GB's `video_hard` frames), keyed on GreenAug's `#439f82` and
on a colour taken from each photo; tolerances (10, 30), (30, 35) (GreenAug's mask config),
(0, 0), (5.5, 17.25) and per-sample tensors; with and without a background image. Printed: the
largest absolute difference of `out` and of `mask`; the exit status is 1 if either is over
1e-6. A second table compares `mixshard.masks.chroma_key` on the uint8 photos with GreenAug's
matte of `photo / 255` (information: `u / 255 * 255` is not always `u` in float32).

chromakey is no dependency of mixshard: install it beside (GreenAug's setup.py installs it from
git, eugeneteoh/chromakey at tag v0.2.1), or put its source on PYTHONPATH. Without it the
script says so and exits 0.

    python scripts/compare_greenaug.py [--frames ../shared/real-frames] [--limit 100]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mixshard import compat, masks

ROOT = Path(__file__).resolve().parent.parent
KEY = "#439f82"
TOLERANCES = ((10, 30), (30, 35), (0, 0), (5.5, 17.25))


def photos(folder: Path, limit: int) -> list[torch.Tensor]:
    """Up to `limit` photos of `folder` (any depth) as uint8 `(1, 3, H, W)`."""
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    out = []
    for path in paths[:limit]:
        arr = np.asarray(Image.open(path).convert("RGB"))
        out.append(torch.from_numpy(arr.copy()).permute(2, 0, 1).unsqueeze(0))
    return out


def random_images(seed: int) -> Iterator[torch.Tensor]:
    """float32 `(B, 3, H, W)` in [0, 1]: uniform, and near the key colour."""
    g = torch.Generator().manual_seed(seed)
    yield torch.rand(4, 3, 37, 53, generator=g)
    key = torch.tensor([0x43, 0x9F, 0x82], dtype=torch.float32).view(1, 3, 1, 1) / 255
    near = key + (torch.rand(4, 3, 64, 64, generator=g) - 0.5) * 0.4
    yield near.clamp(0, 1)


def cases(frames: list[torch.Tensor]) -> Iterator[tuple[str, torch.Tensor, list[str]]]:
    """(name, float32 images in [0, 1], key colours) for every comparison."""
    for seed in range(3):
        for i, images in enumerate(random_images(seed)):
            yield f"random {seed}.{i}", images, [KEY]
    for i, photo in enumerate(frames):
        image = photo.float() / 255
        yield f"photo {i}", image, [KEY]
        # a colour of the photo itself, so that much of it is keyed
        r, g, b = photo[0, :, photo.shape[2] // 2, photo.shape[3] // 2].tolist()
        yield f"photo {i} own key", image, [f"#{r:02x}{g:02x}{b:02x}"]


def differences(reference, images: torch.Tensor, keys: list[str]) -> tuple[float, float]:
    """The largest |out| and |mask| differences over the tolerances, with and without a
    background."""
    worst_out = worst_mask = 0.0
    n = images.shape[0]
    background = torch.rand(images.shape, generator=torch.Generator().manual_seed(n))
    for tola, tolb in TOLERANCES:
        for bg in (None, background):
            theirs = reference(images, keys * n, tola, tolb, bg)
            ours = compat.chroma_key(images, keys * n, tola, tolb, bg)
            worst_out = max(worst_out, float((theirs[0] - ours[0]).abs().max()))
            worst_mask = max(worst_mask, float((theirs[1] - ours[1]).abs().max()))
    if n == 1:  # per-sample tolerance tensors: chromakey broadcasts them against the width,
        # which for one image is the same thing
        tola, tolb = torch.tensor([12.0]), torch.tensor([28.0])
        theirs, ours = (
            reference(images, keys, tola, tolb),
            compat.chroma_key(images, keys, tola, tolb),
        )
        worst_out = max(worst_out, float((theirs[0] - ours[0]).abs().max()))
        worst_mask = max(worst_mask, float((theirs[1] - ours[1]).abs().max()))
    return worst_out, worst_mask


def uint8_matte(reference, frames: list[torch.Tensor]) -> tuple[float, int, int]:
    """`masks.chroma_key` on uint8 photos against 1 - GreenAug's mask of photo / 255: the
    largest difference, the pixels over 1e-6, the pixels compared."""
    worst, over, total = 0.0, 0, 0
    for photo in frames:
        theirs = 1 - reference(photo.float() / 255, [KEY], 10, 30)[1]
        ours = masks.chroma_key(photo, KEY, 10, 30)[:, 0]
        diff = (theirs - ours).abs()
        worst, over, total = (
            max(worst, float(diff.max())),
            over + int((diff > 1e-6).sum()),
            total + diff.numel(),
        )
    return worst, over, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=Path, default=ROOT.parent / "shared" / "real-frames")
    parser.add_argument("--limit", type=int, default=100, help="photos to compare, at most")
    args = parser.parse_args()
    try:
        from chromakey.torch import chroma_key as reference
    except ImportError:
        print(
            "chromakey (GreenAug's chroma key) is not importable: install chromakey 0.2.1 "
            "(GreenAug's setup.py installs it from git) or put its source on PYTHONPATH; "
            "nothing compared",
            file=sys.stderr,
        )
        return 0
    frames = photos(args.frames, args.limit) if args.frames.is_dir() else []
    print(f"{len(frames)} photos from {args.frames}; tolerances {TOLERANCES}")
    worst_out = worst_mask = 0.0
    count = 0
    for name, images, keys in cases(frames):
        out, mask = differences(reference, images, keys)
        worst_out, worst_mask, count = max(worst_out, out), max(worst_mask, mask), count + 1
        if out > 1e-6 or mask > 1e-6:
            print(f"  {name}: out {out:.3g}, mask {mask:.3g}", flush=True)
        elif count % 100 == 0:
            print(
                f"  {count} cases, max so far: out {worst_out:.3g}, mask {worst_mask:.3g}",
                flush=True,
            )
    print(f"compat.chroma_key vs chromakey.torch.chroma_key, {count} cases (float32):")
    print(f"  max |out| difference  {worst_out:.3g}")
    print(f"  max |mask| difference {worst_mask:.3g}")
    if frames:
        worst, over, total = uint8_matte(reference, frames)
        print(
            f"masks.chroma_key(uint8 photo) vs 1 - chromakey's mask of photo / 255: max "
            f"{worst:.3g}, {over} of {total} pixels over 1e-6"
        )
    return 0 if max(worst_out, worst_mask) <= 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())

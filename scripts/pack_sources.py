"""The inputs `scripts/bench_pack.py` measures on: real photographs turned into distinct 256 px
JPEGs (any number of views of each frame), the same as a .tar and a .zip, a copy of the first
few images (for each process's fixed cost), and a copy of the package at another git revision
(to time it against this tree in the same run)."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
from benchlib import OUT, ROOT
from PIL import Image, ImageOps

from mixshard.writing.sources.scanning import scan


def _view(img: Image.Image, view: int) -> Image.Image:
    """View `view` of a frame: the first four are the whole frame, mirrored, and two 85% crops
    (the 2,000-image set of earlier runs); later ones a seeded crop of 60-95% of each side at a
    seeded place, mirrored every other time, so that every view is a distinct image."""
    w, h = img.size
    cut = (int(w * 0.15), int(h * 0.15))
    if view < 4:
        return [
            img,
            ImageOps.mirror(img),
            img.crop((0, 0, w - cut[0], h - cut[1])),
            img.crop((*cut, w, h)),
        ][view]
    rng = np.random.default_rng([7, view])
    cw, ch = (int(w * rng.uniform(0.6, 0.95)), int(h * rng.uniform(0.6, 0.95)))
    left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    crop = img.crop((left, top, left + cw, top + ch))
    return ImageOps.mirror(crop) if view % 2 else crop


def real_source(frames: Path, count: int) -> Path:
    """`count` distinct 256 px JPEGs (q85) made from the photographs in `frames`, one view of
    every frame after another (made once, into bench-out/src)."""
    folder = OUT / "src" / f"real256-{count}"
    if (folder / ".complete").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    print(f"making {count} 256 px JPEGs from {frames} in {folder} ...", file=sys.stderr)
    paths = sorted(frames.rglob("*.jpg"))
    for made in range(count):
        view, path = divmod(made, len(paths))
        with Image.open(paths[path]) as img:
            out = folder / paths[path].parent.name / f"{paths[path].stem}_{view}.jpg"
            out.parent.mkdir(parents=True, exist_ok=True)
            small = _view(img.convert("RGB"), view).resize((256, 256), Image.Resampling.BICUBIC)
            small.save(out, quality=85)
    (folder / ".complete").touch()
    return folder


def archives(src: Path) -> tuple[Path, Path]:
    """`src` as a .tar and a .zip holding `NAME/...` (made once, beside it)."""
    tar, zip_ = src.with_suffix(".tar"), src.with_suffix(".zip")
    if not tar.exists():
        with tarfile.open(str(tar) + ".tmp", "w") as tf:
            tf.add(
                src, arcname=src.name, filter=lambda t: None if t.name.endswith(".complete") else t
            )
        os.replace(str(tar) + ".tmp", tar)
    if not zip_.exists():
        with zipfile.ZipFile(str(zip_) + ".tmp", "w", zipfile.ZIP_STORED) as zf:
            for path in sorted(src.rglob("*.jpg")):
                zf.write(path, f"{src.name}/{path.relative_to(src)}")
        os.replace(str(zip_) + ".tmp", zip_)
    return tar, zip_


def first_images(src: Path, n: int) -> Path:
    """A copy of the first `n` images of `src` (for the fixed cost of each process)."""
    folder = src.with_name(f"{src.name}-first{n}")
    if not folder.exists():
        for rel, _ in scan(src).items[:n]:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, folder / rel)
    return folder


def compiled_package() -> None:
    """Byte-compile this tree's package, as pip does when it installs one: a checkout run under
    PYTHONDONTWRITEBYTECODE=1 (this machine sets it) would otherwise compile every module of
    mixshard from source in every process, about 0.06 CPU s of start-up a user never pays."""
    compileall.compile_dir(ROOT / "mixshard", quiet=1)


# Runs the CLI of the package copy in argv[1] (setuptools' editable finder would pick this tree).
RUN_TREE = (
    "import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path "
    "if 'editable' not in repr(f).lower()]; sys.path.insert(0, sys.argv.pop(1)); "
    "runpy.run_module('mixshard', run_name='__main__', alter_sys=True)"
)


def package_at(ref: str) -> Path | None:
    """A byte-compiled copy of `mixshard/` at git revision `ref` (made once, into
    bench-out/trees), or None where git cannot show it."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", ref],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    tree = OUT / "trees" / sha
    if not (tree / "mixshard").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", sha, "mixshard"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    compileall.compile_dir(tree / "mixshard", quiet=1)
    _build_extension(tree)
    return tree


# What `pip install` compiles (pyproject.toml's ext-modules, the same flags), for a copy made by
# `git archive`: its module beside its source.
BUILD = """
from setuptools import Distribution, Extension
from setuptools.command.build_ext import build_ext
ext = Extension("mixshard.writing.pixels._resize", ["mixshard/writing/pixels/_resize.c"],
                extra_compile_args=["-O3", "-ffp-contract=off"])
cmd = build_ext(Distribution({"ext_modules": [ext]}))
cmd.inplace = 1
cmd.ensure_finalized()
cmd.run()
"""


def _build_extension(tree: Path) -> None:
    """Compile the copy's C resize where it has one (revisions from a19398a on), as its install
    would; without it the copy would time numpy's twin instead."""
    if (tree / "mixshard" / "writing" / "_resize.c").exists() and not any(
        (tree / "mixshard" / "writing").glob("_resize*.so")
    ):
        cmd = [sys.executable, "-c", BUILD]
        done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"cannot build {tree}'s C resize: {done.stderr[-2000:]}")

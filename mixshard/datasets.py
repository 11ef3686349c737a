"""Where the packs of named datasets are: `$MIXSHARD_DATA/<dataset>[-<size>]` (the make targets
write them there), else the folders a code base lists; and the error that says how to make one
that is missing. Shared by the drop-ins (`compat`, `dmcgb`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .core.constants import DEFAULT_SIZE, MANIFEST_NAME
from .core.env import data_is_a_pack, find_pack, sized_pack_name
from .core.errors import MixshardError
from .core.packpath import packs_in

ENV = "MIXSHARD_DATA"
_MAKE = {
    "places365_standard": "make places365 SRC=<...>/places365_standard DATA={data}",
    "places365_standard_val": "make places365 SRC=<...>/places365_standard DATA={data}",
    "coco": "make coco SRC=<...>/val2017 DATA={data}",
    "dmcgb-video_easy": "make dmcgb-videos SRC=<DMC-GB checkout>/src/env/data DATA={data}",
    "dmcgb-video_hard": "make dmcgb-videos SRC=<DMC-GB checkout>/src/env/data DATA={data}",
    "dbc-video": "make dbc-videos SRC=<folder of DBC's resource_files videos> DATA={data}",
}
_found: dict[tuple, str] = {}  # (roots, dataset, size) -> pack folder, once it was found


def _make_hint(dataset: str, data: str, size: tuple[int, int]) -> str:
    sized = sized_pack_name(dataset, size) if size[0] != DEFAULT_SIZE else None
    if dataset in _MAKE:
        return _MAKE[dataset].format(data=data) + (f" SIZE={size[0]}" if sized else "")
    size_arg = f" --size {size[0]}" if sized else ""
    return f"mixshard pack <image folder> {data}/{sized or dataset}{size_arg}"


def pack_folder(
    dataset: str,
    size: tuple[int, int] = (DEFAULT_SIZE, DEFAULT_SIZE),
    dirs: Sequence[str | os.PathLike] | None = None,
) -> Path:
    """The pack of `dataset` for `size` (height, width) observations, checked to be finished.

    Looked up in `$MIXSHARD_DATA`, else in `dirs` (the folders a code base lists for its
    datasets, e.g. DMC-GB2's `places_dirs`), as `<dataset>-<size>` then `<dataset>`.

    Raises:
        ValueError: `dataset` is not a plain folder name (a path, `..`, empty): nothing
            outside those folders is read.
    """
    check_dataset(dataset)
    data = os.environ.get(ENV)
    if data:
        roots = [Path(data)]
    elif dirs:
        roots = [Path(d) for d in ([dirs] if isinstance(dirs, (str, os.PathLike)) else dirs)]
    else:
        raise MixshardError(
            f"set {ENV} to the folder that holds the packed datasets (e.g. {ENV}=data, after "
            f"`make places365 SRC=<...>/places365_standard DATA=data` or `make coco "
            f"SRC=<...>/val2017 DATA=data`)"
        )
    key = (tuple(roots), dataset, size)
    if key in _found:
        return Path(_found[key])
    folder = find_pack(roots, dataset, size)
    if folder is None and data and (problem := data_is_a_pack(data, ENV)):
        raise MixshardError(problem)
    if folder is None:
        raise MixshardError(_missing(roots, dataset, size, from_env=bool(data)))
    _found[key] = str(folder.resolve())
    return Path(_found[key])


def check_dataset(dataset: object) -> None:
    """Refuse a dataset that is not the plain name of a folder (`../x`, `/etc`, `a/b`)."""
    if not isinstance(dataset, str):
        raise TypeError(f"dataset must be a str (a pack folder's name), got {type(dataset)}")
    if dataset in ("", ".", "..") or any(c in dataset for c in "/\\\0"):
        raise ValueError(
            f"dataset must be the name of a pack folder in {ENV} (such as "
            f"'places365_standard' or 'coco'), without '/' or '..'; got {dataset!r}. To blend "
            "a pack from another place, give its folder to mixshard.Overlay"
        )


def _missing(roots: list[Path], dataset: str, size: tuple[int, int], from_env: bool) -> str:
    sized = sized_pack_name(dataset, size) if size[0] != DEFAULT_SIZE else None
    root = roots[0] if from_env else next((r for r in roots if r.is_dir()), roots[0])
    where = f"{root / dataset / MANIFEST_NAME} does not exist"
    if sized:
        where = (
            f"neither {root / sized / MANIFEST_NAME} (for {size[0]}x{size[1]} observations) "
            f"nor {root / dataset / MANIFEST_NAME} exists"
        )
    if not from_env:
        where = f"{ENV} is unset and, of places_dirs {[str(r) for r in roots]}, {where}"
    elif not root.is_absolute():  # relative to wherever the training code runs
        where = f"{where} ({ENV}={root} is relative: here that is {root.resolve()})"
    packs = packs_in(root) if root.is_dir() else []
    there = (
        f"the packs in {root.resolve()}: {', '.join(packs[:10])}"
        if packs
        else f"{root.resolve()} holds no pack"
        if root.is_dir()
        else f"{root.resolve()} does not exist"
    )
    return (
        f"no packed dataset {dataset!r}: {where}; {there}. Make it from the mixshard checkout "
        f"with `{_make_hint(dataset, str(root.resolve()), size)}`, and set {ENV} to an absolute "
        "path"
    )

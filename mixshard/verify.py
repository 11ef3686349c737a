"""`verify`: re-hash every shard and check its structure against `index.json`."""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .constants import IMAGES_SUFFIX, LABELS_SUFFIX, SHARD_PREFIX, SHARD_SUFFIX, TMP_SUFFIX
from .format import Manifest, ShardInfo, sha256_file


@dataclass
class VerifyReport:
    """Outcome of `verify`: `problems` maps a shard file name to what is wrong with it."""

    manifest: Manifest
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _npy_shape(tar: tarfile.TarFile, member: tarfile.TarInfo) -> tuple[tuple, np.dtype, int]:
    f = tar.extractfile(member)
    if np.lib.format.read_magic(f) != (1, 0):
        raise ValueError(f"{member.name} is not a version 1.0 .npy")
    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    return shape, dtype, f.tell()


def _check_structure(path: Path, shard: ShardInfo, manifest: Manifest) -> str | None:
    """Each block's members exist where the manifest says, with the shapes it says."""
    try:
        with tarfile.open(path, "r:") as tar:
            members = {m.name: m for m in tar.getmembers()}
            for block in shard.blocks:
                for suffix, offset, shape, dtype in (
                    (
                        IMAGES_SUFFIX,
                        block.offset,
                        (block.count, manifest.channels, manifest.size, manifest.size),
                        np.uint8,
                    ),
                    (LABELS_SUFFIX, block.labels_offset, (block.count,), np.int32),
                ):
                    member = members.get(f"{block.key}.{suffix}")
                    if member is None:
                        return f"member {block.key}.{suffix} is missing"
                    found, found_dtype, head = _npy_shape(tar, member)
                    if found != shape or found_dtype != np.dtype(dtype):
                        return (
                            f"{block.key}.{suffix} holds {found_dtype}{list(found)}, "
                            f"manifest says {np.dtype(dtype)}{list(shape)}"
                        )
                    if member.offset_data + head != offset:
                        return (
                            f"{block.key}.{suffix} data starts at byte "
                            f"{member.offset_data + head}, manifest says {offset}"
                        )
    except (tarfile.TarError, ValueError, OSError, EOFError) as exc:
        return f"not a readable tar ({exc})"
    return None


def verify(
    folder: str | os.PathLike,
    progress: Callable[[int], None] | None = None,
    manifest: Manifest | None = None,
) -> VerifyReport:
    """Check every shard of a pack: present, right size, right sha256, right block layout.

    Args:
        folder: the pack folder.
        progress: called with the number of bytes checked after each shard.
        manifest: the already loaded `index.json`, to save reading it again.

    Returns:
        A `VerifyReport`; also lists shard files the manifest does not know (extra) and
        leftover temporary files.

    Raises:
        ManifestError: `index.json` is missing or invalid.
    """
    folder = Path(folder)
    manifest = manifest or Manifest.load(folder)
    report = VerifyReport(manifest)
    listed = {s.name for s in manifest.shards}
    for name in sorted(os.listdir(folder)):
        if name.startswith(SHARD_PREFIX) and name.endswith(SHARD_SUFFIX) and name not in listed:
            report.problems[name] = "extra: a shard file that index.json does not list"
        elif name.endswith(TMP_SUFFIX):
            report.problems[name] = "leftover temporary file of an interrupted pack"
    for shard in manifest.shards:
        path = folder / shard.name
        problem = None
        if not path.exists():
            problem = "missing"
        elif (size := path.stat().st_size) != shard.bytes:
            kind = "truncated" if size < shard.bytes else "longer than expected"
            problem = f"{kind}: {size} bytes, index.json says {shard.bytes}"
        elif sha256_file(path) != shard.sha256:
            problem = "altered: sha256 differs from index.json"
        else:
            problem = _check_structure(path, shard, manifest)
        if problem:
            report.problems[shard.name] = problem
        if progress:
            progress(shard.bytes)
    return report

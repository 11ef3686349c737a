"""Check a pack against its manifest: every shard present, of the right size and sha256, and
with every block's members where `index.json` says (torch-free)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..core.constants import IMAGES_SUFFIX, LABELS_SUFFIX, SHARD_PREFIX, SHARD_SUFFIX, TMP_SUFFIX
from ..core.files import open_regular, sha256_of
from ..core.layout import block_span
from ..core.manifest import Manifest, ShardInfo
from ..core.packpath import pack_dir
from ..core.stores import load_manifest
from .source import store_of


@dataclass
class VerifyReport:
    """Outcome of `verify`: `problems` maps a file name to what is wrong with it."""

    manifest: Manifest
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _member_problem(
    tar: tarfile.TarFile, members: dict, name: str, offset: int, shape: tuple, dtype: type
) -> str | None:
    member = members.get(name)
    if member is None or not member.isreg():
        return f"member {name} is missing"
    f = tar.extractfile(member)
    if f is None or np.lib.format.read_magic(f) != (1, 0):
        raise ValueError(f"{member.name} is not a version 1.0 .npy")
    found, _, found_dtype = np.lib.format.read_array_header_1_0(f)
    head = f.tell()
    if found != shape or found_dtype != np.dtype(dtype):
        return (
            f"{name} holds {found_dtype}{list(found)}, manifest says {np.dtype(dtype)}{list(shape)}"
        )
    if member.offset_data + head != offset:
        return f"{name} data starts at byte {member.offset_data + head}, manifest says {offset}"
    return None


def _structure_problem(f: BinaryIO, shard: ShardInfo, manifest: Manifest) -> str | None:
    """Each block's members exist where the manifest says, with the shapes it says."""
    try:
        with tarfile.open(fileobj=f, mode="r:") as tar:
            members = {m.name: m for m in tar.getmembers()}
            for b in shard.blocks:
                shape = (b.count, manifest.channels, manifest.size, manifest.size)
                problem = _member_problem(
                    tar, members, f"{b.key}.{IMAGES_SUFFIX}", b.offset, shape, np.uint8
                ) or _member_problem(
                    tar, members, f"{b.key}.{LABELS_SUFFIX}", b.labels_offset, (b.count,), np.int32
                )
                if problem:
                    return problem
    except (tarfile.TarError, ValueError, OSError, EOFError) as exc:
        return f"not a readable tar ({exc})"
    return None


def _shard_problem(path: Path, shard: ShardInfo, manifest: Manifest) -> str | None:
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    with os.fdopen(fd, "rb") as f:
        wrong = _size_problem(os.fstat(fd).st_size, shard)
        if wrong:
            return wrong
        if sha256_of(f) != shard.sha256:
            return "altered: sha256 differs from index.json"
        f.seek(0)
        return _structure_problem(f, shard, manifest) or _block_problem(f, shard, manifest)


def _block_problem(f: BinaryIO, shard: ShardInfo, manifest: Manifest) -> str | None:
    """Each block's span has the sha256 the manifest says (what a ranged read checks)."""
    for b in shard.blocks:
        if b.sha256 is None:
            continue  # a pack made before blocks had digests
        start, end = block_span(b.offset, b.labels_offset, b.count, manifest.size)
        f.seek(start)
        if hashlib.sha256(f.read(end - start)).hexdigest() != b.sha256:
            return f"block {b.key}: sha256 differs from index.json"
    return None


def _size_problem(size: int, shard: ShardInfo) -> str | None:
    if size == shard.bytes:
        return None
    kind = "truncated" if size < shard.bytes else "longer than expected"
    return f"{kind}: {size} bytes, index.json says {shard.bytes}"


def verify(
    folder: str | os.PathLike,
    progress: Callable[[int], None] | None = None,
    manifest: Manifest | None = None,
) -> VerifyReport:
    """Check every shard of a pack: present, right size, right sha256, right block layout.

    Args:
        folder: the pack folder (or its `index.json`), or an object store URL
            (`s3://bucket/prefix`): each shard is then downloaded to a temporary file, checked
            and deleted.
        progress: called with the number of bytes checked after each shard.
        manifest: the already loaded `index.json`, to save reading it again.

    Returns:
        A `VerifyReport`; also lists shard files the manifest does not know (extra) and
        leftover temporary files.

    Raises:
        ManifestError: `index.json` is missing or invalid.
        ShardError: the store denies access or cannot be reached.
    """
    store = store_of(folder)
    if store is None:
        folder = pack_dir(folder)
        manifest = manifest or Manifest.load(folder)
        listing = dict.fromkeys(os.listdir(folder), 0)  # its names (sizes: a store's only)
    else:
        manifest = manifest or load_manifest(store)
        listing = (
            store.sizes([shard.name for shard in manifest.shards])
            if store.http
            else store.listing()
        )
    report = VerifyReport(manifest)
    listed = {s.name for s in manifest.shards}
    for name in sorted(listing):
        if name.startswith(SHARD_PREFIX) and name.endswith(SHARD_SUFFIX) and name not in listed:
            report.problems[name] = "extra: a shard file that index.json does not list"
        elif name.endswith(TMP_SUFFIX):
            report.problems[name] = "leftover temporary file of an interrupted pack"
    temporary = tempfile.TemporaryDirectory(prefix="mixshard-verify-") if store else None
    with temporary or contextlib.nullcontext("") as tmp:  # a store's shard, one at a time
        for shard in manifest.shards:
            if store is None:
                problem = _shard_problem(Path(folder) / shard.name, shard, manifest)
            else:
                size = listing.get(shard.name)
                problem = "missing" if size is None else _size_problem(size, shard)
                if problem is None:
                    local = Path(tmp) / shard.name
                    store.download(shard.name, local)
                    problem = _shard_problem(local, shard, manifest)
                    local.unlink()
            if problem:
                report.problems[shard.name] = problem
            if progress:
                progress(shard.bytes)
    return report

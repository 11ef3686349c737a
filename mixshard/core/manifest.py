"""The manifest of a pack (`index.json`, shard format version 1): schema, codec and checks.

A manifest is checked for internal consistency when it is loaded: every number is an integer
in range, counts are positive and add up, shard names are plain `shard-NNNNNN.tar` names, and
every block's offsets sit exactly where the writer puts them (inside the file, increasing, not
overlapping). So a reader never serves bytes the writer did not put there, whatever the file
says.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import layout
from .checks import json_int as _int
from .checks import json_str as _str
from .clips import Clip, check_clips, clip_from_dict, clip_to_dict
from .constants import (
    CHANNELS,
    CLIP_FORMAT_VERSION,
    DTYPE,
    FORMAT_NAME,
    FORMAT_VERSION,
    LAYOUT,
    MANIFEST_NAME,
    MAX_BLOCK_BYTES,
    MAX_BLOCK_SIZE,
    MAX_MANIFEST_BYTES,
    MAX_SIZE,
    READ_VERSIONS,
    TAR_BLOCK,
)
from .errors import ManifestError
from .files import atomic_write, read_regular, writer_of
from .packpath import not_a_pack, pack_dir, tilde_hint

SHARD_NAME = re.compile(r"shard-\d{6}\.tar")
_KEY = re.compile(r"\d{8}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_REPACK = "the pack is damaged: repack it with `mixshard pack SRC OUT --overwrite`"


def dump_json(obj: Any, indent: int | None = None) -> bytes:
    """UTF-8 JSON of `obj`. A path that is not valid UTF-8 (a str with surrogate escapes, as
    `os.listdir` gives it) is written as `\\udcXX` escapes, which read back to the same str."""
    text = json.dumps(obj, indent=indent, ensure_ascii=False)
    return text.encode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class BlockInfo:
    """One block of a shard: its key, image count, and where its arrays' data start in the tar.

    `sha256` is the digest of the block's span (`layout.block_span`: its images and labels
    members, headers included), which lets a ranged read of one block be checked; packs made
    before block digests were written have none (None).
    """

    key: str
    count: int
    offset: int
    labels_offset: int
    sha256: str | None = None


@dataclass(frozen=True)
class ShardInfo:
    """One shard file as the manifest describes it."""

    name: str
    count: int
    bytes: int
    sha256: str
    blocks: tuple[BlockInfo, ...]


def shard_to_dict(shard: ShardInfo) -> dict[str, Any]:
    """The JSON form of a shard entry (also what the pack journal stores)."""
    return {
        "name": shard.name,
        "count": shard.count,
        "bytes": shard.bytes,
        "sha256": shard.sha256,
        "blocks": [_block_to_dict(b) for b in shard.blocks],
    }


def _block_to_dict(b: BlockInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "key": b.key,
        "count": b.count,
        "offset": b.offset,
        "labels_offset": b.labels_offset,
    }
    if b.sha256 is not None:
        out["sha256"] = b.sha256
    return out


def shard_from_dict(data: Any) -> ShardInfo:
    """Parse one shard entry; field types and ranges are checked, not its layout.

    Raises:
        ValueError: a missing field or a bad value, named in the message.
    """
    if not isinstance(data, dict) or not isinstance(data.get("blocks"), list):
        raise ValueError(f"a shard entry must be an object with a blocks list, got {data!r:.80}")
    name = _str(data.get("name"), "shard name", SHARD_NAME)
    blocks = []
    for b in data["blocks"]:
        if not isinstance(b, dict):
            raise ValueError(f"{name}: a block entry must be an object, got {b!r:.80}")
        blocks.append(
            BlockInfo(
                _str(b.get("key"), f"{name}: block key", _KEY),
                _int(b.get("count"), f"{name}: block count", 1),
                _int(b.get("offset"), f"{name}: block offset", 0),
                _int(b.get("labels_offset"), f"{name}: block labels_offset", 0),
                None if b.get("sha256") is None else _str(b["sha256"], f"{name}: sha256", _HEX64),
            )
        )
    return ShardInfo(
        name,
        _int(data.get("count"), f"{name}: count", 1),
        _int(data.get("bytes"), f"{name}: bytes", 0),
        _str(data.get("sha256"), f"{name}: sha256", _HEX64),
        tuple(blocks),
    )


def check_shard_layout(shard: ShardInfo, size: int, block_size: int) -> None:
    """Every block where the writer puts it: pixels after an aligned `.npy` header, labels
    right after the pixels, blocks in increasing order, all inside the file.

    Raises:
        ValueError: the first inconsistency, naming shard and block.
    """
    if not shard.blocks:
        raise ValueError(f"{shard.name} has no blocks")
    if sum(b.count for b in shard.blocks) != shard.count:
        raise ValueError(f"{shard.name}: block counts do not add up to its count {shard.count}")
    if shard.bytes % TAR_BLOCK:
        raise ValueError(f"{shard.name}: bytes {shard.bytes} is not a whole number of tar blocks")
    floor = 0  # no member header may start before this offset
    for b in shard.blocks:
        where = f"{shard.name} block {b.key}"
        if b.count > block_size:
            raise ValueError(f"{where}: count {b.count} exceeds block_size {block_size}")
        start = b.offset - layout.images_header_len(b.count, size)
        if start % TAR_BLOCK or start - TAR_BLOCK < floor:
            raise ValueError(f"{where}: offset {b.offset} is not where a block can start")
        if b.labels_offset != layout.labels_offset_for(b.offset, b.count, size):
            raise ValueError(f"{where}: labels_offset {b.labels_offset} is not after its pixels")
        floor = layout.block_end_min(b.labels_offset, b.count)
    if floor + 2 * TAR_BLOCK > shard.bytes:
        raise ValueError(f"{shard.name}: its blocks run past its {shard.bytes} bytes")


@dataclass(frozen=True)
class Manifest:
    """The contents of `index.json`: what a pack holds and where.

    `options` holds the pack options that decide the pixels (crop, variants, seed, resample,
    shuffle, labels, shard_size); `skipped` lists `{"path", "reason"}` for unreadable sources.
    `origin` names where it was read from.

    `clips` is None for an image pack; for a clip pack (format version 2) it lists the clips,
    whose frames follow one another in the pack's image order, clip after clip, covering every
    image. `source` describes what was packed (`path` and a cheap fingerprint), so a rerun on
    another source is caught; None in packs made before it was recorded.
    """

    size: int
    block_size: int
    count: int
    classes: tuple[str, ...]
    options: dict[str, Any]
    skipped: tuple[dict[str, str], ...]
    shards: tuple[ShardInfo, ...]
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION
    channels: int = CHANNELS
    dtype: str = DTYPE
    layout: str = LAYOUT
    clips: tuple[Clip, ...] | None = None
    source: dict[str, Any] | None = None
    origin: str = field(default="", compare=False, repr=False)

    @property
    def image_bytes(self) -> int:
        """Bytes of one stored image."""
        return self.channels * self.size * self.size

    @property
    def total_bytes(self) -> int:
        """Bytes of all shard files together."""
        return sum(s.bytes for s in self.shards)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document, keys in the documented order."""
        return {
            "format": self.format,
            "version": self.version,
            "size": self.size,
            "channels": self.channels,
            "dtype": self.dtype,
            "layout": self.layout,
            "block_size": self.block_size,
            "count": self.count,
            "classes": list(self.classes),
            "options": dict(self.options),
            "skipped": [dict(s) for s in self.skipped],
            "shards": [shard_to_dict(s) for s in self.shards],
            **({} if self.source is None else {"source": dict(self.source)}),
            **({} if self.clips is None else {"clips": [clip_to_dict(c) for c in self.clips]}),
        }

    def dumps(self) -> bytes:
        """Deterministic JSON bytes of the manifest."""
        return dump_json(self.to_dict(), indent=1) + b"\n"

    def save(self, folder: str | os.PathLike) -> Path:
        """Write `folder/index.json` atomically (temporary file, fsync, rename)."""
        path = Path(folder) / MANIFEST_NAME
        atomic_write(path, self.dumps())
        return path

    @classmethod
    def loads(cls, text: str | bytes, origin: str) -> Manifest:
        """Parse and check manifest text; `origin` names it in errors.

        Raises:
            ManifestError: not JSON, not a mixshard manifest of this version, or inconsistent.
        """
        raw = text.encode("utf-8") if isinstance(text, str) else text
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise ManifestError(f"{origin} is not valid JSON ({reason}); {_REPACK}") from None
        return cls.from_dict(data, origin)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> Manifest:
        """Read `index.json` from a pack folder (or the path of the file itself).

        Raises:
            ManifestError: missing, not a regular file, too large, unreadable or invalid.
        """
        where = pack_dir(folder)
        path = where / MANIFEST_NAME
        if not os.path.lexists(path):
            writer = writer_of(where)
            if writer is not None:
                raise ManifestError(
                    f"no {MANIFEST_NAME} in {where} yet: a pack is being written there ({writer}); "
                    "wait for it to finish"
                )
            if not where.exists():
                raise ManifestError(
                    f"pack folder not found: {where}{tilde_hint(where)}; make it with "
                    f"`mixshard pack SRC {where}`"
                )
            raise ManifestError(not_a_pack(where))
        try:
            text = read_regular(path, MAX_MANIFEST_BYTES)
        except OSError as exc:
            raise ManifestError(f"cannot read {path}: {exc.strerror}; {_REPACK}") from None
        return cls.loads(text, str(path))

    @classmethod
    def from_dict(cls, data: Any, origin: str) -> Manifest:
        """Check a parsed manifest and build it.

        Raises:
            ManifestError: another format or version, or any inconsistency (named).
        """
        _check_format(data, origin)
        try:
            manifest = cls._build(data, origin)
            manifest._check_consistency()
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{origin} is inconsistent ({_reason(exc)}); {_REPACK}") from None
        return manifest

    @classmethod
    def _build(cls, data: dict[str, Any], origin: str) -> Manifest:
        classes, options, skipped = data["classes"], data["options"], data["skipped"]
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise ValueError("classes must be a list of names")
        if not isinstance(options, dict) or not isinstance(skipped, list):
            raise ValueError("options must be an object and skipped a list")
        if not isinstance(data["shards"], list):
            raise ValueError("shards must be a list")
        source, clips = data.get("source"), data.get("clips")
        if source is not None and not isinstance(source, dict):
            raise ValueError("source must be an object")
        if (clips is not None) != (data["version"] == CLIP_FORMAT_VERSION):
            raise ValueError(
                f"clips are listed in version {CLIP_FORMAT_VERSION} packs, and only there"
            )
        if clips is not None and not isinstance(clips, list):
            raise ValueError("clips must be a list")
        return cls(
            size=_int(data["size"], "size", 1, MAX_SIZE),
            block_size=_int(data["block_size"], "block_size", 1, MAX_BLOCK_SIZE),
            count=_int(data["count"], "count", 1),
            classes=tuple(classes),
            options=options,
            skipped=tuple(_skip_entry(s) for s in skipped),
            shards=tuple(shard_from_dict(s) for s in data["shards"]),
            channels=_int(data["channels"], "channels", CHANNELS, CHANNELS),
            dtype=_str(data["dtype"], "dtype", re.compile(DTYPE)),
            layout=_str(data["layout"], "layout", re.compile(LAYOUT)),
            version=data["version"],
            clips=None if clips is None else tuple(clip_from_dict(c) for c in clips),
            source=source,
            origin=origin,
        )

    def _check_consistency(self) -> None:
        if not self.shards:
            raise ValueError("it lists no shards")
        names = [s.name for s in self.shards]
        if len(set(names)) != len(names):
            raise ValueError("a shard is listed twice")
        for shard in self.shards:
            check_shard_layout(shard, self.size, self.block_size)
        if sum(s.count for s in self.shards) != self.count:
            raise ValueError(f"shard counts do not add up to count {self.count}")
        if self.block_size * self.image_bytes > MAX_BLOCK_BYTES:
            raise ValueError(f"a block of {self.block_size} images of {self.size} px is too large")
        if self.clips is not None:
            check_clips(self.clips, self.count)


def _check_format(data: Any, origin: str) -> None:
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ManifestError(
            f"{origin} is not a mixshard manifest (format: {found!r:.40}, expected "
            f"{FORMAT_NAME!r}); make one with `mixshard pack SRC OUT`"
        )
    version = data.get("version")
    if version not in READ_VERSIONS or type(version) is not int:
        raise ManifestError(
            f"{origin} is shard format version {version!r:.40}; this mixshard reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}. Repack with `mixshard pack SRC OUT "
            "--overwrite` or install the mixshard that wrote it"
        )


def _skip_entry(entry: Any) -> dict[str, str]:
    if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
        raise ValueError(f"a skipped entry must map names to text, got {entry!r:.80}")
    return dict(entry)


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"field {exc.args[0]!r} is missing"
    return str(exc)

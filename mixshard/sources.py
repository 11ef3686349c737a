"""Where the images come from: a local pack folder (mmap + gather) or shard URLs (webdataset).

`LocalPack` maps every shard and gathers any set of images by the manifest's byte offsets: one
`numpy.take` per shard touched, straight into the caller's buffer, no tar parsing.
`RemoteShards` reads shards sequentially with webdataset's tar iterator, from http(s) URLs
(stdlib client with a timeout), `pipe:` commands or paths, and checks bytes and sha256 on the way.
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap
import os
import posixpath
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .constants import IMAGES_SUFFIX, KEYS_SUFFIX, LABELS_SUFFIX, MANIFEST_NAME, TAR_BLOCK
from .errors import MixshardError, ShardError
from .format import Manifest, ShardInfo

URL_TIMEOUT = 60.0  # seconds without data before an http read fails
_NPY_MAGIC = b"\x93NUMPY"


def warn_bad_shard(message: str) -> None:
    """The one warning `on_error="skip"` gives per bad shard (and never a sleep)."""
    warnings.warn(f"mixshard: skipping a bad shard: {message}", RuntimeWarning, stacklevel=3)


@dataclass
class LocalPack:
    """A pack folder opened for random access. Image `i` is the `i`-th image of the manifest's
    shards (bad shards skipped), in stored order."""

    manifest: Manifest
    shards: list[ShardInfo]
    count: int
    # per block, over all usable shards: first image index, shard slot, byte offset of pixels
    _block_start: np.ndarray
    _block_shard: np.ndarray
    _block_offset: np.ndarray
    _block_labels: np.ndarray
    _views: list[np.ndarray]  # per shard: (bytes - image_bytes + 1, image_bytes) sliding window
    _maps: list[mmap.mmap]

    @classmethod
    def open(
        cls, folder: str | os.PathLike, on_error: str = "raise", manifest: Manifest | None = None
    ) -> LocalPack:
        """Map the shards of `folder`; bad ones raise `ShardError` or are skipped with a warning.
        `manifest` saves reading `index.json` again when the caller has it."""
        folder = Path(folder)
        manifest = manifest or Manifest.load(folder)
        image_bytes = manifest.image_bytes
        shards, views, maps, starts, slots, offsets, label_offsets = [], [], [], [], [], [], []
        count = 0
        for shard in manifest.shards:
            try:
                mm = _map_shard(folder, shard)
            except ShardError as exc:
                if on_error != "skip":
                    raise
                warn_bad_shard(str(exc))
                continue
            slot = len(shards)
            shards.append(shard)
            maps.append(mm)
            buf = np.frombuffer(mm, dtype=np.uint8)
            views.append(
                as_strided(buf, (len(buf) - image_bytes + 1, image_bytes), (1, 1), writeable=False)
            )
            for block in shard.blocks:
                starts.append(count)
                slots.append(slot)
                offsets.append(block.offset)
                label_offsets.append(block.labels_offset)
                count += block.count
        if not shards:
            raise MixshardError(
                f"every shard of {folder} is bad; run `mixshard verify {folder}` and repack"
            )
        return cls(
            manifest,
            shards,
            count,
            np.asarray(starts, np.int64),
            np.asarray(slots, np.int64),
            np.asarray(offsets, np.int64),
            np.asarray(label_offsets, np.int64),
            views,
            maps,
        )

    def _locate(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        block = np.searchsorted(self._block_start, index, side="right") - 1
        within = index - self._block_start[block]
        return block, self._block_shard[block], within

    def gather(self, index: np.ndarray) -> np.ndarray:
        """Images `index` (in that order) as one new uint8 array `(len(index), 3, size, size)`.

        A single vectorised gather per shard touched: fancy indexing of a sliding-window view
        of the mapped shard, whose rows start at every byte, by the images' byte offsets.
        """
        index = np.asarray(index, dtype=np.int64)
        size = self.manifest.size
        block, slot, within = self._locate(index)
        byte = self._block_offset[block] + within * self.manifest.image_bytes
        if len(self._views) == 1 or (slot == slot[0]).all():
            flat = self._views[int(slot[0])][byte]
        else:
            flat = np.empty((len(index), self.manifest.image_bytes), np.uint8)
            for s in np.unique(slot):
                mask = slot == s
                flat[mask] = self._views[int(s)][byte[mask]]
        return flat.reshape(len(index), 3, size, size)

    def labels(self, index: np.ndarray) -> np.ndarray:
        """int64 labels of images `index` (in the given order)."""
        index = np.asarray(index, dtype=np.int64)
        block, slot, within = self._locate(index)
        byte = self._block_labels[block] + within * 4
        out = np.empty(len(index), np.int64)
        for s in np.unique(slot):
            mask = slot == s
            raw = np.frombuffer(self._maps[int(s)], dtype=np.uint8)
            pos = byte[mask][:, None] + np.arange(4)
            out[mask] = raw[pos].view("<i4").ravel()
        return out


def _map_shard(folder: Path, shard: ShardInfo) -> mmap.mmap:
    path = folder / shard.name
    fix = f"run `mixshard verify {folder}`, then repack or restore the file"
    try:
        size = path.stat().st_size
    except OSError:
        raise ShardError(f"shard {path} is missing; {fix}") from None
    if size != shard.bytes:
        raise ShardError(
            f"shard {path} is {size} bytes, index.json says {shard.bytes} "
            f"(truncated or altered); {fix}"
        )
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    for block in shard.blocks:
        # The .npy header sits between the member's 512-byte aligned start and the pixels.
        start = block.offset - block.offset % TAR_BLOCK
        if mm[start : start + 6] != _NPY_MAGIC:
            mm.close()
            raise ShardError(
                f"shard {path}: block {block.key} is not where index.json says (altered); {fix}"
            )
    return mm


# ------------------------------------------------------------------------------- remote reading


def expand_urls(source: str | list[str]) -> list[str]:
    """Brace patterns (`shard-{000000..000009}.tar`) and `::`-separated lists, as webdataset."""
    from webdataset.shardlists import expand_urls as wds_expand

    if isinstance(source, (list, tuple)):
        urls: list[str] = []
        for item in source:
            urls += wds_expand(str(item))
        return urls
    return wds_expand(str(source))


def is_folder(source: Any) -> bool:
    """True when `source` names a local pack folder (existing or not) rather than shard URLs:
    a path without a scheme, `pipe:`, brace pattern or `.tar` ending."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    text = os.fspath(source)
    return os.path.isdir(text) or not (
        "://" in text
        or text.startswith("pipe:")
        or "{" in text
        or "::" in text
        or text.split("?", 1)[0].endswith(".tar")
    )


def shard_name_of(url: str) -> str:
    """The shard file name a URL refers to; in a `pipe:` command, the last word naming a
    `.tar` file (else the last word)."""
    words = url.split() if url.startswith("pipe:") else [url]
    names = [posixpath.basename(word.split("?", 1)[0]) for word in words]
    return next((n for n in reversed(names) if n.endswith(".tar")), names[-1])


def manifest_url(shard_url: str) -> str:
    """`<base>/index.json` for the base of a shard URL; in a `pipe:` command the shard's path
    is replaced by the manifest's."""
    name = shard_name_of(shard_url)
    if not name.endswith(".tar"):
        raise MixshardError(
            f"cannot tell where index.json is for {shard_url!r}; pass manifest='<base>/index.json'"
        )
    cut = shard_url.rfind(name)
    return shard_url[:cut] + MANIFEST_NAME + shard_url[cut + len(name) :]


def open_url(url: str, timeout: float = URL_TIMEOUT) -> BinaryIO:
    """A readable binary stream for a path, `file://`, `http(s)://` or `pipe:` URL."""
    try:
        if url.startswith(("http://", "https://")):
            return urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 - user's URL
        if url.startswith("file://"):
            return open(urllib.request.url2pathname(url[7:]), "rb")
        if "://" not in url and not url.startswith("pipe:"):
            return open(url, "rb")
        from webdataset import gopen

        return gopen(url, "rb")
    except urllib.error.HTTPError as exc:
        raise ShardError(f"cannot read {url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise ShardError(
            f"cannot reach {url}: {exc.reason}; check the URL and that the server is up"
        ) from None
    except OSError as exc:
        raise ShardError(f"cannot read {url}: {exc.strerror or exc}") from None


def read_manifest(url: str) -> Manifest:
    """Fetch and parse a manifest from any URL `open_url` takes."""
    stream = open_url(url)
    try:
        data = stream.read()
    except OSError as exc:
        raise ShardError(f"cannot read {url}: {exc}") from None
    finally:
        stream.close()
    return Manifest.loads(data, url)


def resolve_urls(
    source: str | list[str], manifest: str | None = None
) -> tuple[Manifest, list[tuple[str, ShardInfo]]]:
    """The manifest of shard URLs (`<base>/index.json` unless `manifest` says where) and each
    URL paired with the shard it names.

    Raises:
        MixshardError: no URLs, or a URL whose shard the manifest does not list.
    """
    urls = expand_urls(source)
    if not urls:
        raise MixshardError(f"no shard URLs in {source!r}")
    found = read_manifest(manifest or manifest_url(urls[0]))
    by_name = {s.name: s for s in found.shards}
    pairs = []
    for url in urls:
        name = shard_name_of(url)
        if name not in by_name:
            raise MixshardError(f"shard {url} is not listed in the manifest {found.origin}")
        pairs.append((url, by_name[name]))
    return found, pairs


class _Counting:
    """File wrapper that counts and hashes what the tar reader consumes."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.bytes, self.sha = raw, 0, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.bytes += len(data)
        self.sha.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass

    def close(self) -> None:
        self.raw.close()


def _npy(data: bytes) -> np.ndarray:
    f = io.BytesIO(data)
    version = np.lib.format.read_magic(f)
    shape, _, dtype = (
        np.lib.format.read_array_header_1_0(f)
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0(f)
    )
    return np.frombuffer(data, dtype=dtype, offset=f.tell()).reshape(shape)


def read_blocks(url: str, shard: ShardInfo, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stream the blocks of one shard as `(images, labels)`; checks every block against the
    manifest and, at the end, the shard's byte count and sha256.

    Raises:
        ShardError: unreachable, truncated, altered, or not the shard the manifest describes.
    """
    from webdataset.tariterators import tar_file_iterator

    counting = _Counting(open_url(url))
    expected = iter(shard.blocks)
    current: dict[str, bytes] = {}
    key = None
    try:
        members = tar_file_iterator(counting)
        for member in members:
            k, _, suffix = member["fname"].partition(".")
            if key is not None and k != key:
                yield _block(url, key, current, next(expected, None), size)
                current = {}
            key = k
            current[suffix] = member["data"]
        if key is not None:
            yield _block(url, key, current, next(expected, None), size)
        if next(expected, None) is not None:
            raise ShardError(
                f"shard {url} ends early: fewer blocks than index.json lists (truncated or altered)"
            )
        counting.drain()
    except ShardError:
        raise
    except Exception as exc:  # noqa: BLE001 - tar, pipe and socket errors all mean "bad shard"
        raise ShardError(
            f"cannot read shard {url}: {exc} (truncated, altered or unreachable; "
            "`mixshard verify` checks a local copy)"
        ) from None
    finally:
        counting.close()
    if counting.bytes != shard.bytes or counting.sha.hexdigest() != shard.sha256:
        raise ShardError(
            f"shard {url} is {counting.bytes} bytes with another sha256 than "
            f"index.json says ({shard.bytes} bytes): altered or truncated"
        )


def _block(url: str, key: str, members: dict[str, bytes], block, size: int):
    if block is None or block.key != key or IMAGES_SUFFIX not in members:
        raise ShardError(f"shard {url}: block {key} is not what index.json lists (altered)")
    images = _npy(members[IMAGES_SUFFIX])
    labels = _npy(members[LABELS_SUFFIX]) if LABELS_SUFFIX in members else None
    if (
        images.shape != (block.count, 3, size, size)
        or images.dtype != np.uint8
        or (labels is not None and labels.shape != (block.count,))
    ):
        raise ShardError(
            f"shard {url}: block {key} holds {images.dtype}{list(images.shape)}, "
            f"index.json says uint8[{block.count}, 3, {size}, {size}] (altered)"
        )
    if labels is None:
        labels = np.full(block.count, -1, np.int32)
    if KEYS_SUFFIX in members:
        json.loads(members[KEYS_SUFFIX])  # a broken member means a damaged block
    return images, labels

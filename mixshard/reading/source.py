"""What the user passed as a pack, resolved once: a folder, or a pack's URL (a store).

`resolve_source` is the only place that asks "folder or store?". `ShardStream`, the caches, the
pool and its refill receive the `Source` it returns (and give it to each other), so a pack
on a store has its `index.json` fetched once, and every reader agrees on what it reads.
"""

from __future__ import annotations

import os
import time
import urllib.request
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..core.checks import check_optional_int
from ..core.constants import MANIFEST_NAME
from ..core.errors import ManifestError, MixshardError, ShardError
from ..core.manifest import Manifest
from ..core.packpath import pack_dir
from ..core.stores import Store, check_location, is_store_url, load_manifest, url_scheme
from .pack.reader import PackReader
from .pack.shardfiles import FileId, FolderFiles, file_id

SWAP_TRIES = 5  # reads of a pack folder whose index.json changed while it was read


@dataclass(frozen=True)
class Source:
    """A resolved pack: a `folder`, or a `store` URL (`s3://...`, `https://...`) read through a
    block cache in `cache_dir`, of `cache_limit` bytes (None: `core.files.user_cache_dir`,
    `storepack.default_limit`). `ids`: a folder's shards as found when its manifest was read
    (`consistent_pack`)."""

    folder: str | None
    manifest: Manifest
    store: str | None = None
    cache_dir: str | None = None
    cache_limit: int | None = None
    ids: dict[str, FileId | ShardError] | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        """`"folder"` or `"store"`."""
        return "store" if self.store else "folder"

    @property
    def location(self) -> str:
        """The folder or the store URL, as given."""
        return self.store or self.folder or ""

    @property
    def is_folder(self) -> bool:
        """Deprecated: every pack is read by byte offset now (it was False for shard URLs)."""
        warnings.warn(
            "Source.is_folder is deprecated: every Source is read by byte offset; use "
            "Source.kind to tell a folder from a store",
            DeprecationWarning,
            stacklevel=2,
        )
        return True

    def open_pack(self, on_error: str = "raise") -> PackReader:
        """The pack opened for reading by byte offset (a store's through its block cache)."""
        if self.store is not None:  # a `PackReader` handed its cache as the backend
            from .store.storepack import StoreFiles

            files = StoreFiles(self.store, self.manifest, self.cache_dir, self.cache_limit)
            return PackReader(files.root, self.manifest, on_error, files=files)
        return PackReader(str(self.folder), self.manifest, on_error, self.ids)

    @property
    def count(self) -> int:
        """Images it holds."""
        return self.manifest.count


def resolve_source(
    source: str | os.PathLike | list[str] | Source,
    manifest: Manifest | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | None = None,
) -> Source:
    """`source` (a pack folder or its `index.json`, a `file://` URL of one, or a pack's URL
    `s3://bucket/prefix`, `gs://...`, `https://host/prefix`) as a `Source`; a `Source` is
    returned as it is (with the cache options given here, when they are). `manifest`: the
    `Manifest` already read.

    Raises:
        ManifestError: no finished pack there.
        MixshardError: shard URLs, brace patterns or `pipe:` commands (give the pack's URL).
    """
    check_optional_int("cache_limit", cache_limit, 1)
    if isinstance(source, Source):
        if source.store is None or (cache_dir is None and cache_limit is None):
            return source
        return replace(
            source,
            cache_dir=source.cache_dir if cache_dir is None else os.fspath(cache_dir),
            cache_limit=source.cache_limit if cache_limit is None else cache_limit,
        )
    given = _pack_location(source)
    found = manifest if isinstance(manifest, Manifest) else None
    if manifest is not None and found is None:
        warnings.warn(
            "manifest= as a location applied to shard URLs, which are no longer read; it is "
            "ignored (the pack's own index.json is read)",
            DeprecationWarning,
            stacklevel=3,
        )
    if is_store_url(given):
        url = given.rstrip("/")
        if url.endswith("/" + MANIFEST_NAME):
            url = url[: -len(MANIFEST_NAME) - 1]
        found = found or load_manifest(Store(url))
        where = None if cache_dir is None else os.fspath(cache_dir)
        return Source(None, found, url, where, cache_limit)
    folder = os.fspath(pack_dir(given))  # the folder, or its index.json
    if found is not None:
        return Source(folder, found)
    found, ids = consistent_pack(folder)
    return Source(folder, found, ids=ids)


def store_of(location: str | os.PathLike) -> Store | None:
    """The `Store` of a pack's URL, or None for a folder (for the readers that take a location
    and read a store their own way: `verify` whole objects, `preview` single blocks)."""
    text = _pack_location(location)
    return Store(text.rstrip("/")) if is_store_url(text) else None


def _pack_location(source: object) -> str:
    """`source` as a folder path or a pack's URL; shard URLs and their lists are refused."""
    if isinstance(source, (list, tuple)):
        raise MixshardError(
            "lists of shard URLs are no longer read: give the pack's folder or its URL "
            "(https://host/prefix, s3://bucket/prefix, gs://bucket/prefix), which holds "
            "index.json"
        )
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"a pack is a folder or a URL, got {type(source).__name__}")
    text = os.fspath(source)
    check_location(text)
    if url_scheme(text) == "file":
        text = urllib.request.url2pathname(text[len("file://") :])
    if os.path.isdir(text):
        return text
    if text.startswith("pipe:") or "::" in text or "{" in text or text.endswith(".tar"):
        base = text.rsplit("/", 1)[0] if "/" in text and not text.startswith("pipe:") else None
        instead = f"give {base}" if base else "give the pack's folder or URL"
        raise MixshardError(
            f"{text}: shard URLs, brace patterns and pipe: commands are no longer read; "
            f"{instead} (the folder or URL that holds index.json: a local folder, "
            "https://host/prefix, s3://bucket/prefix or gs://bucket/prefix)"
        )
    return text


def consistent_pack(folder: str | os.PathLike) -> tuple[Manifest, dict[str, FileId | ShardError]]:
    """A pack folder's manifest and its shards' identities, taken from the same pack: a pack
    replaced while they are read (`mixshard pack --overwrite` swaps the new one in) is read
    again, so a reader gets the old pack or the new one, whole, never the old manifest over
    the new shards (which read as "truncated or altered").

    Raises:
        ManifestError: as `Manifest.load`, when the folder holds no readable pack.
    """
    index = Path(folder) / MANIFEST_NAME
    probe = FolderFiles(folder)
    for attempt in range(SWAP_TRIES):
        before = file_id(index)
        try:
            manifest = Manifest.load(folder)
        except ManifestError:
            if attempt == SWAP_TRIES - 1:
                raise  # no pack there (not one being swapped in: that takes microseconds)
            time.sleep(0.01 * (attempt + 1))
            continue
        ids = probe.stat_shards(manifest.shards)
        if before is not None and file_id(index) == before:
            break
    return manifest, ids

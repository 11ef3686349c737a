"""What the user passed as a pack, resolved once: a folder, a store URL (`s3://`, `gs://`),
or shard URLs with their manifest.

`resolve_source` is the only place that asks "folder or URLs?". `ShardStream`, the caches, the
pool and its refill feed receive the `Source` it returns (and give it to each other), so a pack
served over HTTP has its `index.json` fetched once, and every reader agrees on what it reads.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..core.checks import check_optional_int
from ..core.constants import MANIFEST_NAME
from ..core.errors import ManifestError, ShardError
from ..core.manifest import Manifest, ShardInfo
from ..core.packpath import pack_dir
from ..core.stores import Store, check_location, is_store_url, load_manifest
from .pack.local import LocalPack
from .pack.shardfiles import FileId, FolderFiles, file_id
from .urls.remote import is_folder, resolve_urls

SWAP_TRIES = 5  # reads of a pack folder whose index.json changed while it was read


@dataclass(frozen=True)
class Source:
    """A resolved pack: a `folder`; or `urls`, `(url, shard)` pairs (maybe part of a pack); or
    a `store` URL (`s3://...`) read through a block cache in `cache_dir`, of `cache_limit`
    bytes (None: `storepack.default_cache_dir`, `storepack.default_limit`). `ids`: a folder's
    shards as found when its manifest was read (`consistent_pack`)."""

    folder: str | None
    urls: tuple[tuple[str, ShardInfo], ...] | None
    manifest: Manifest
    store: str | None = None
    cache_dir: str | None = None
    cache_limit: int | None = None
    ids: dict[str, FileId | ShardError] | None = field(default=None, compare=False, repr=False)

    @property
    def is_folder(self) -> bool:
        """True for a pack read by byte offset: a folder, or a store through its cache."""
        return self.folder is not None or self.store is not None

    @property
    def kind(self) -> str:
        return "store" if self.store else "folder" if self.folder is not None else "urls"

    def open_pack(self, on_error: str = "raise") -> LocalPack:
        """The pack opened for reading by byte offset (a store's through its block cache).

        Raises:
            TypeError: a source of shard URLs (they are streamed whole).
        """
        if self.store is not None:  # a `LocalPack` handed its cache as the backend
            from .store.storepack import StoreFiles

            files = StoreFiles(self.store, self.manifest, self.cache_dir, self.cache_limit)
            return LocalPack(files.root, self.manifest, on_error, files=files)
        if self.folder is None:
            raise TypeError("shard URLs are streamed, not opened by byte offset")
        return LocalPack(self.folder, self.manifest, on_error, self.ids)

    @property
    def count(self) -> int:
        """Images it holds (the manifest's, or the listed shards' for URLs)."""
        if self.urls is None:
            return self.manifest.count
        return sum(shard.count for _, shard in self.urls)


def resolve_source(
    source: str | os.PathLike | list | Source,
    manifest: str | Manifest | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | None = None,
) -> Source:
    """`source` (a pack folder or its `index.json`, a store URL `s3://bucket/prefix`, shard
    URLs, brace patterns, `pipe:` commands, a list of them) as a `Source`; a `Source` is
    returned as it is (with the cache options given here, when they are). `manifest`: the
    `Manifest` already read, or where the URLs' manifest is when not `<base>/index.json`.

    Raises:
        ManifestError: the folder holds no finished pack, or the URLs' manifest cannot be read.
        MixshardError: no URLs, or a URL whose shard the manifest does not list.
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
    if isinstance(source, str):
        check_location(source)
    if isinstance(source, str) and is_store_url(source):
        url = source.rstrip("/")
        if url.endswith("/" + MANIFEST_NAME):
            url = url[: -len(MANIFEST_NAME) - 1]
        found = manifest if isinstance(manifest, Manifest) else load_manifest(Store(url))
        where = None if cache_dir is None else os.fspath(cache_dir)
        return Source(None, None, found, url, where, cache_limit)
    if not isinstance(source, list) and is_folder(source):
        folder = os.fspath(pack_dir(source))  # the folder, or its index.json
        if isinstance(manifest, Manifest):
            return Source(folder, None, manifest)
        found, ids = consistent_pack(folder)
        return Source(folder, None, found, ids=ids)
    given = source if isinstance(source, list) else os.fspath(source)
    found, pairs = resolve_urls(given, manifest)
    return Source(None, tuple(pairs), found)


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

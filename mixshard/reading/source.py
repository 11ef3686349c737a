"""What the user passed as a pack, resolved once: a folder, or shard URLs with their manifest.

`resolve_source` is the only place that asks "folder or URLs?". `ShardStream`, the caches, the
pool and its refill feed receive the `Source` it returns (and give it to each other), so a pack
served over HTTP has its `index.json` fetched once, and every reader agrees on what it reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Union

from ..core.manifest import Manifest, ShardInfo
from ..core.packpath import pack_dir
from .remote import is_folder, resolve_urls

UserSource = Union[str, "os.PathLike[str]", list]


@dataclass(frozen=True)
class Source:
    """A resolved pack.

    Attributes:
        folder: the pack folder, or None for shard URLs.
        urls: `(url, shard)` pairs of shard URLs (maybe part of a pack), or None for a folder.
        manifest: the pack's manifest.
        given: what the user passed (URLs as given, for DataLoader workers and messages).
    """

    folder: str | None
    urls: tuple[tuple[str, ShardInfo], ...] | None
    manifest: Manifest
    given: str | list

    @property
    def is_folder(self) -> bool:
        return self.folder is not None

    @property
    def kind(self) -> str:
        """`"folder"` or `"urls"`."""
        return "folder" if self.is_folder else "urls"

    @property
    def count(self) -> int:
        """Images it holds (the manifest's, or the listed shards' for URLs)."""
        if self.urls is None:
            return self.manifest.count
        return sum(shard.count for _, shard in self.urls)


def resolve_source(source: UserSource | Source, manifest: str | Manifest | None = None) -> Source:
    """`source` (a pack folder or its `index.json`, shard URLs, brace patterns, `pipe:`
    commands, a list of them) as a `Source`; a `Source` is returned as it is.

    Args:
        source: what the user passed.
        manifest: the `Manifest` already read, or where the manifest of URLs is when it is not
            `<base>/index.json`.

    Raises:
        ManifestError: the folder holds no finished pack, or the URLs' manifest cannot be read.
        MixshardError: no URLs, or a URL whose shard the manifest does not list.
    """
    if isinstance(source, Source):
        return source
    if not isinstance(source, list) and is_folder(source):
        folder = os.fspath(pack_dir(source))  # the folder, or its index.json
        found = manifest if isinstance(manifest, Manifest) else Manifest.load(folder)
        return Source(folder, None, found, folder)
    given = source if isinstance(source, list) else os.fspath(source)
    found, pairs = resolve_urls(given, manifest)
    return Source(None, tuple(pairs), found, given)

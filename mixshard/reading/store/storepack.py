"""A pack on an object store (`s3://`, `gs://`, `http(s)://`), read as a folder is: `StoreFiles`,
the backend a `PackReader` is handed in place of a folder's, so the orders, the rank split and
`state_dict` resume are the local ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import numpy as np
from torch.utils.data import get_worker_info

from ...core import layout
from ...core.errors import ManifestError, MixshardError, ShardError
from ...core.files import user_cache_dir
from ...core.manifest import Manifest, ShardInfo
from ...core.stores import Store
from ..pack.shardfiles import FeedReads, FileId, shard_path, stat_each
from . import eviction
from .blockcache import BlockCache
from .cachefiles import claim_part, existing, footprint, page_size

POLICY = "future"  # eviction policy of new caches ("lru": for the benchmark's comparison)


def block_spans(manifest: Manifest) -> np.ndarray:
    """Per block, `(shard slot, start, end)` of its span (`layout.block_span`)."""
    rows = [
        (s, *layout.block_span(b.offset, b.labels_offset, b.count, manifest.size))
        for s, shard in enumerate(manifest.shards)
        for b in shard.blocks
    ]
    return np.array(rows, np.int64).reshape(-1, 3)


def default_limit(need: int, root: Path) -> int:
    """`need` (the whole pack's blocks on disk), or half the free space there if less."""
    return min(need, shutil.disk_usage(existing(root)).free // 2)


class StoreFiles:
    """The store pack at `url` as `PackFiles`: its shard files are a `BlockCache`'s under
    `cache_dir/<pack identity>/`, taking at most `cache_limit` bytes of pages on disk (split
    among DataLoader workers, each opening its own part on its first read), and every read
    first holds the blocks it touches. Its damaged files are the cache's, so its errors say to
    delete the cache folder (its blocks are fetched again), not to verify a pack folder."""

    mappable = False  # a cache file holds only the blocks fetched so far

    def __init__(
        self,
        url: str,
        manifest: Manifest,
        cache_dir: str | os.PathLike | None,
        cache_limit: int | None,
    ) -> None:
        self.url = url
        digests = [b.sha256 for shard in manifest.shards for b in shard.blocks]
        if any(d is None for d in digests):  # a pack made before blocks had one
            raise ManifestError(
                f"{url}: this pack was made by an older mixshard, whose index.json has no sha256 "
                "per block, so blocks fetched one by one cannot be checked; repack it (mixshard "
                "pack SRC OUT) and serve or upload the new pack"
            )
        self.digests = [str(d) for d in digests]
        identity = hashlib.sha256(url.encode() + b"\n" + manifest.dumps()).hexdigest()[:20]
        self.root = Path(cache_dir or user_cache_dir()) / identity
        self.folder = self.root  # this process's part of it, once opened (`open_cache`)
        self.shards = [(s.name, s.bytes) for s in manifest.shards]
        self.spans = block_spans(manifest)
        self.block_bytes = int((self.spans[:, 2] - self.spans[:, 1]).sum())  # of every block
        self.need = int(footprint(self.spans, page_size(self.root)).sum())  # ... their pages
        self.limit = default_limit(self.need, self.root) if cache_limit is None else cache_limit
        self.whole_runs = self.fits()  # else a run is held a block at a time (docs/design.md)
        self.cache: BlockCache | None = None
        self._cache_pid = -1

    def fix(self) -> str:
        return (
            f"a file of the block cache is damaged: delete the cache folder {self.root} (its "
            "blocks are fetched again) and open the pack again"
        )

    def fits(self) -> bool:
        return self.need <= self.limit

    def stat_shards(self, shards: tuple[ShardInfo, ...]) -> dict[str, FileId | ShardError]:
        """Each shard checked against the store's objects (their sizes: one listing, or a
        request each over http(s)), never trusted from `index.json` alone."""
        listed = Store(self.url).sizes([s.name for s in shards])
        return stat_each(shards, lambda shard: self._stat(shard, listed))

    def _stat(self, shard: ShardInfo, listed: dict[str, int]) -> FileId:
        shard_path(self.root, shard.name)  # a plain name, or a ShardError
        found = listed.get(shard.name)
        if found is None:
            raise ShardError(f"shard {self.url}/{shard.name} is missing from the store; repack")
        if found != shard.bytes:
            raise ManifestError(
                f"index.json says shard {self.url}/{shard.name} is {shard.bytes} bytes, the "
                f"store's object is {found}; index.json does not describe this pack: repack it"
            )
        return FileId(0, 0, shard.bytes, 0)  # the cache's files are written while read

    def unreadable(self, name: str, exc: OSError) -> ShardError:
        return ShardError(f"cannot read the cache file {self.folder / name}: {exc.strerror}")

    def short(self, name: str, fd: int, fid: FileId) -> NoReturn:
        raise ShardError(f"the cache file {self.folder / name} ends early; {self.fix()}")

    def open_cache(self) -> BlockCache:
        if self.cache is None or self._cache_pid != os.getpid():
            info = get_worker_info()
            share = self.limit // (info.num_workers if info is not None else 1)
            try:
                folder, lock_fd = claim_part(self.root)
                store = Store(self.url)
                self.cache = BlockCache(
                    store, self.shards, self.spans, self.digests, folder, share, POLICY, lock_fd
                )
            except OSError as exc:  # a link planted there is refused with its own error
                raise MixshardError(
                    f"cannot use the block cache under {self.root}: {exc.strerror or exc}; give "
                    "a cache_dir= where this process can write (and a cache_limit= that fits)"
                ) from None
            self.folder = folder
            self._cache_pid = os.getpid()
        return self.cache

    def open(self, name: str, fid: FileId) -> int:
        try:
            return self.open_cache().open(name)  # never through a link
        except OSError as exc:
            path = self.folder / name
            raise ShardError(f"cannot open the cache file {path}: {exc.strerror}") from None

    def check_same(self, name: str, fd: int, fid: FileId) -> None:
        return None  # blocks are checked by digest when fetched, not by file identity

    @contextlib.contextmanager
    def held(self, blocks: list[int]) -> Iterator[None]:
        cache = self.open_cache()
        cache.hold(blocks)
        try:
            yield
        finally:
            cache.release(blocks)

    def expect(self, feed: FeedReads) -> None:
        """The cache fetches ahead, and evicts, by the blocks the feed will read, in the order
        it reads them (a process worker's role: its part of each later epoch too)."""
        info = get_worker_info()
        uses_of = eviction.future_uses(feed, info.num_workers if info is not None else 1)
        self.open_cache().schedule(uses_of, feed.batches.start // feed.per_epoch)

    def warm(self, files: list[tuple[Path, int]], stop: threading.Event) -> bool:
        """The global order (no block feed): fetch every block ahead, in stored order."""
        cache = self.open_cache()
        if not cache.scheduled:
            cache.schedule(lambda epoch: np.arange(len(self.spans)), 0)
        return False

    def __getstate__(self) -> dict:
        return {**self.__dict__, "cache": None, "_cache_pid": -1}  # each process opens its own

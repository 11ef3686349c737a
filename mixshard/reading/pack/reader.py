"""`PackReader`: a pack read by byte offset (torch-free) through a backend that opens its shard
files (`shardfiles.PackFiles`: a folder's, or a store's block cache).

Images are read straight into the caller's memory: one `pread` each or copied out of mappings
of every shard (`mapped.py`, surviving a shard truncated under it), or runs of whole blocks
(`blockrun.py`) or a span of one block's images with one `preadv`. A short read, a fault in a
mapping and a changed file all raise `ShardError`. A block's `.npy` header is checked, and its
labels kept, on its first read.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from ...core import layout, locks
from ...core.errors import MixshardError, ShardError
from ...core.manifest import Manifest, ShardInfo
from .blockrun import RunLayout
from .mapped import ShardMaps, read_rows, resident
from .rawio import read_iov
from .shardfiles import FileId, FolderFiles, OpenShards, PackFiles, warn_bad

CHECK_LOCKS = 64  # locks striped over the blocks: a block's first read is checked once


class PackReader:
    """A pack opened for random access (a folder, or a store through its block cache). Image
    `i` is the `i`-th image of the usable shards (bad ones skipped with `on_error="skip"`), in
    stored order. Thread-safe.

    Each shard's identity (device, inode, size, mtime) is recorded when the pack is opened and
    checked whenever its file is opened or read; it travels with the object when pickled, so a
    worker process that reopens the shards by name sees a pack replaced meanwhile.

    Args:
        folder: the pack folder.
        manifest: its loaded `index.json`.
        on_error: `"raise"`: a bad shard or block raises `ShardError`; `"skip"`: a shard found
            bad at open is left out, a block found bad when read is reported by `read_*`.
        ids: the shards' identities as already found (`source.consistent_pack`).
        files: the backend that opens the shard files (default: the folder's own).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        manifest: Manifest,
        on_error: str = "raise",
        ids: dict[str, FileId | ShardError] | None = None,
        files: PackFiles | None = None,
    ) -> None:
        self.files: PackFiles = FolderFiles(folder) if files is None else files
        self.manifest = manifest
        self.on_error = on_error
        self.shards: list[ShardInfo] = []
        self.ids: dict[str, FileId] = {}
        # the shards as found when the manifest was read (`source.consistent_pack`), else now
        found = self.files.stat_shards(manifest.shards) if ids is None else ids
        for shard in manifest.shards:
            fid = found[shard.name]
            if isinstance(fid, ShardError):
                if on_error != "skip":
                    raise fid
                warn_bad("shard", str(fid))
                continue
            self.ids[shard.name] = fid
            self.shards.append(shard)
        if not self.shards:
            raise MixshardError(
                f"every shard of {self.folder} is bad; run `mixshard verify {self.folder}` "
                "and repack"
            )
        blocks = [(s, b) for s, shard in enumerate(self.shards) for b in shard.blocks]
        self.block_count = np.array([b.count for _, b in blocks], np.int64)
        self.block_start = np.concatenate([[0], np.cumsum(self.block_count)[:-1]])
        self.block_shard = np.array([s for s, _ in blocks], np.int64)
        self.block_offset = np.array([b.offset for _, b in blocks], np.int64)
        self._keys = [b.key for _, b in blocks]
        self.count = int(self.block_count.sum())
        self._checked = np.zeros(len(blocks), bool)
        self.bad = np.zeros(len(blocks), bool)
        self._labels = np.zeros(self.count, np.int32)
        self._settled = False  # every block checked, none bad (`_check_blocks`)
        self._where: tuple[np.ndarray, np.ndarray] | None = None  # `_copy_mapped`
        self._warming = False
        self._fresh()

    def _fresh(self) -> None:
        """This process's locks, descriptors and mappings (not pickled)."""
        self._lock = locks.Lock()
        self._check_locks = [locks.Lock() for _ in range(CHECK_LOCKS)]
        self._files = OpenShards()
        self._maps = ShardMaps(len(self.shards))  # every shard mapped, or none (`plan.py`)

    @property
    def folder(self) -> Path:
        """Where the shard files are read (a store pack's: this process's cache part)."""
        return self.files.folder

    # ------------------------------------------------------------------ files
    def _open_checked(self, slot: int) -> int:
        name = self.shards[slot].name
        return self.files.open(name, self.ids[name])

    def _check_same(self, slot: int, fd: int) -> None:
        name = self.shards[slot].name
        self.files.check_same(name, fd, self.ids[name])

    def _pread(self, slot: int, fd: int, buf: memoryview, offset: int) -> None:
        try:
            got = os.preadv(fd, [buf], offset)
        except OSError as exc:
            raise self.files.unreadable(self.shards[slot].name, exc) from None
        if got != len(buf):
            self._short(slot, fd)

    def _short(self, slot: int, fd: int) -> None:
        name = self.shards[slot].name
        self.files.short(name, fd, self.ids[name])

    @property
    def open_shards(self) -> int:
        """Shard descriptors held open now (at most `MAX_OPEN_SHARDS` once idle)."""
        return len(self._files)

    @property
    def mapped_shards(self) -> int:
        """Shards now copied out of a mapping (`mapped.py`): all of them, or 0."""
        return len(self._maps)

    def close(self) -> None:
        """Close the cached descriptors and unmap the shards (a later read opens them again;
        a later warm pass maps them again)."""
        self._files.close()
        self._maps.close()
        with self._lock:
            self._warming = False

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in ("_files", "_maps", "_lock", "_check_locks", "_where"):
            state[name] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fresh()

    def __del__(self) -> None:
        if getattr(self, "_lock", None) is not None:  # not half-made
            self.close()

    # ------------------------------------------------------------------ blocks
    def _check_block(self, b: int, found: tuple[np.ndarray, np.ndarray] | None = None) -> bool:
        """First read of block `b`: check its images `.npy` header and labels `.npy` (header
        and data), `found` by a run's read or else read here, and keep its labels. A bad block
        raises `ShardError`, or with `on_error="skip"` is warned of once and returns False."""
        if not self._checked[b]:
            with self._check_locks[b % CHECK_LOCKS]:  # two reader threads: one check, one warning
                if not self._checked[b]:
                    self._judge(b, *(self._read_heads(b) if found is None else found))
        return not self.bad[b]

    def _read_heads(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Block `b`'s images header and labels: the first and last bytes of its run's span."""
        slot, offset = int(self.block_shard[b]), int(self.block_offset[b])
        run = RunLayout.of([offset], [int(self.block_count[b])], self.manifest.size)
        head, raw = np.empty(run.heads[0][1], np.uint8), np.empty(run.labels[0][1], np.uint8)
        with self.files.held([b]), self._files.held([slot], self._open_checked) as (fd,):
            self._pread(slot, fd, head.data, run.start)
            self._pread(slot, fd, raw.data, run.start + run.length - len(raw))
        return head, raw

    def _judge(self, b: int, head: np.ndarray, raw: np.ndarray) -> None:
        count, size = int(self.block_count[b]), self.manifest.size
        llen = layout.labels_header_len(count)
        problem = layout.header_problem(head.tobytes(), layout.images_shape(count, size), np.uint8)
        problem = problem or layout.header_problem(raw[:llen].tobytes(), (count,), np.int32)
        if problem is None:
            start = int(self.block_start[b])
            self._labels[start : start + count] = np.frombuffer(raw, "<i4", offset=llen)
        else:
            slot = int(self.block_shard[b])
            where = f"shard {self.folder / self.shards[slot].name} block {self._keys[b]}"
            if self.on_error != "skip":
                raise ShardError(f"{where}: {problem} (altered); {self.files.fix()}")
            warn_bad("block", f"{where}: {problem}")
            self.bad[b] = True
        self._checked[b] = True

    def scatter_run(
        self, blocks: list[int], addresses: list[np.ndarray], drop_cache: bool = False
    ) -> list[bool | ShardError]:
        """Blocks `blocks` (consecutive ones of one shard, in stored order) in one scattered
        read of their whole span (`blockrun.py`): image `i` of `blocks[j]` to address
        `addresses[j][i]` (uint64, room for one image; the caller keeps that memory alive and
        unused until this returns). A block's headers and labels come from the same read and
        are checked there on its first read. `drop_cache`: then drop the span from the page
        cache (a pack larger than memory: keeping it would only evict what is still to be
        read). Returns per block True, False (bad and skipped) or the `ShardError` naming it.

        Raises:
            ShardError: the span could not be read (unreadable, truncated, changed).
        """
        slot = int(self.block_shard[blocks[0]])
        if any(int(self.block_shard[b]) != slot for b in blocks):
            raise ValueError("a run of blocks must lie in one shard")
        if len(blocks) > 1 and not self.files.whole_runs:  # a block at a time
            return [self.scatter_run([b], [a], drop_cache)[0] for b, a in zip(blocks, addresses)]
        run = RunLayout.of(
            self.block_offset[blocks].tolist(),
            self.block_count[blocks].tolist(),
            self.manifest.size,
        )
        scratch = np.empty(run.scratch_bytes, np.uint8)
        iov = run.iov(addresses, scratch.ctypes.data, self.manifest.image_bytes)
        self._read_span(slot, blocks, iov, run.start, run.length, drop_cache)
        results: list[bool | ShardError] = []
        for b, (h, hn), (lo, ln) in zip(blocks, run.heads, run.labels):
            try:
                results.append(self._check_block(b, (scratch[h : h + hn], scratch[lo : lo + ln])))
            except ShardError as exc:
                results.append(exc)
        return results

    def scatter_part(
        self, b: int, first: int, addresses: np.ndarray, drop_cache: bool = False
    ) -> bool | ShardError:
        """Images `first`, `first + 1`, ... of block `b` (one per address of `addresses`,
        uint64) in one scattered read, without the rest of the block: where the parts of an
        epoch of two worker processes meet inside a block, each reads only its own images
        (every image of the pack is read once an epoch). The block's headers and
        labels are checked first, on its first read (two small reads). `drop_cache` as in
        `scatter_run`. Returns True, False (bad and skipped) or the `ShardError` naming it.

        Raises:
            ShardError: the images could not be read (unreadable, truncated, changed).
        """
        try:
            if not self._check_block(b):
                return False
        except ShardError as exc:
            return exc
        slot, size = int(self.block_shard[b]), self.manifest.image_bytes
        iov = np.empty((len(addresses), 2), np.uint64)
        iov[:, 0], iov[:, 1] = addresses, size
        start = int(self.block_offset[b]) + first * size
        self._read_span(slot, [b], iov, start, len(addresses) * size, drop_cache)
        return True

    def _read_span(
        self, slot: int, blocks: list[int], iov: np.ndarray, start: int, length: int, drop: bool
    ) -> None:
        """One scattered read of `length` bytes of shard `slot` from `start` (blocks `blocks`
        held in a store's cache meanwhile), then dropped from the page cache if `drop`."""
        with self.files.held(blocks), self._files.held([slot], self._open_checked) as (fd,):
            try:
                got = read_iov(fd, iov, start)
            except OSError as exc:
                raise self.files.unreadable(self.shards[slot].name, exc) from None
            if got != length:
                self._short(slot, fd)
            self._check_same(slot, fd)
            if drop and hasattr(os, "posix_fadvise"):  # not on macOS
                os.posix_fadvise(fd, start, got, os.POSIX_FADV_DONTNEED)

    def block_of(self, index: np.ndarray) -> np.ndarray:
        """The block of each image number."""
        return np.searchsorted(self.block_start, index, side="right") - 1

    def read_block(self, b: int, out: np.ndarray, drop_cache: bool = False) -> bool:
        """Read block `b`'s images into `out[:count]` (a C-contiguous uint8 array of rows of
        one image each), as a run of one block (`scatter_run`, `drop_cache` as there). Returns
        False when the block is bad and skipped.

        Raises:
            ValueError: `out` is not C-contiguous or has no room for the block's images.
            ShardError: the block could not be read.
        """
        size, count = self.manifest.image_bytes, int(self.block_count[b])
        if not out.flags.c_contiguous or out.nbytes < count * size:
            raise ValueError(f"out must be C-contiguous with room for {count} images of {size} B")
        addresses = out.ctypes.data + np.arange(count, dtype=np.uint64) * np.uint64(size)
        result = self.scatter_run([b], [addresses], drop_cache)[0]
        if isinstance(result, ShardError):
            raise result
        return result

    def read_images(self, index: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        """Read images `index` into `out` (uint8, `(len(index), 3, size, size)`, contiguous):
        copied out of the shards' mappings where every shard is mapped (`mapped.py`), in the
        batch's order, else one `pread` each, grouped by shard. Returns a bool mask of images
        that come from bad, skipped blocks, or None when every one was read."""
        index = np.asarray(index, dtype=np.int64)
        if not out.flags.c_contiguous or out.nbytes < len(index) * self.manifest.image_bytes:
            raise ValueError(f"out must be C-contiguous with room for {len(index)} images")
        bad = None if self._settled else self._check_blocks(index)
        rows = np.arange(len(index)) if bad is None else np.flatnonzero(~bad)
        index = index if bad is None else index[rows]
        with self._maps.held() as mapped:
            if mapped:
                self._copy_mapped(out, rows, index)
        if not mapped:
            self._read_rows(out, rows, index)
        return bad

    def _check_blocks(self, index: np.ndarray) -> np.ndarray | None:
        """Check the blocks of images `index` on their first read; returns which images come
        from bad blocks, or None. Once every block is checked and none is bad, `_settled`:
        `read_images` and `labels` skip this."""
        block = self.block_of(index)
        blocks = np.unique(block)
        for b in blocks[~self._checked[blocks]].tolist():  # a block's first read only
            self._check_block(b)
        if self.bad[blocks].any():
            return self.bad[block]
        self._settled = bool(self._checked.all()) and not self.bad.any()
        return None

    def _read_rows(self, out: np.ndarray, rows: np.ndarray, index: np.ndarray) -> None:
        """Read image `index[j]` into row `rows[j]` of `out` with `pread`, for every `j`,
        grouped by shard (as the kernel's reads go fastest); each file is checked after."""
        block, size = self.block_of(index), self.manifest.image_bytes
        order = np.argsort(self.block_shard[block], kind="stable")
        rows, block, index = rows[order], block[order], index[order]
        slot_of = self.block_shard[block]
        offset_of = self.block_offset[block] + (index - self.block_start[block]) * size
        shards = np.unique(slot_of)
        files = self._files.held(shards.tolist(), self._open_checked)
        with self.files.held(np.unique(block).tolist()), files as held:
            fds = np.array(held, np.int64)[np.searchsorted(shards, slot_of)]
            first = read_rows(out, rows, fds, offset_of, size)
            flat = out.reshape(-1).data
            for j, row in enumerate(rows[first:].tolist(), first):  # again, to raise
                view = flat[row * size : (row + 1) * size]  # the error that names it
                self._pread(int(slot_of[j]), int(fds[j]), view, int(offset_of[j]))
            for slot, fd in zip(shards.tolist(), held):
                self._check_same(slot, fd)

    def _copy_mapped(self, out: np.ndarray, rows: np.ndarray, index: np.ndarray) -> None:
        """Copy image `index[j]` into row `rows[j]` of `out`, for every `j`, out of the
        mappings (held by the caller), in the batch's order: the rows written one after the
        next; then each shard read is checked to be the file opened."""
        if self._where is None:  # each image's shard and offset (a mapped pack fits in memory)
            size, count = self.manifest.image_bytes, self.block_count
            start = np.repeat(self.block_offset - self.block_start * size, count)
            self._where = np.repeat(self.block_shard, count), start + np.arange(self.count) * size
        slots, offsets = self._where[0][index], self._where[1][index]
        shards = np.flatnonzero(np.bincount(slots, minlength=len(self.shards))).tolist()
        with self._files.held(shards, self._open_checked) as fds:
            status, j = self._maps.copy(out, rows, slots, offsets, self.manifest.image_bytes)
            if status != 0:
                slot = int(slots[j])
                fd = fds[shards.index(slot)]
                if status == 1:  # past the shard's end: as a short read
                    self._short(slot, fd)
                self._check_same(slot, fd)  # truncated or copied over under the mapping
                raise ShardError(
                    f"cannot read shard {self.folder / self.shards[slot].name}: a page of it "
                    f"could not be read (a disk error); {self.files.fix()}"
                )
            for slot, fd in zip(shards, fds):
                self._check_same(slot, fd)

    def labels(self, index: np.ndarray) -> np.ndarray:
        """int64 labels of images `index`; their blocks are checked (read) first if needed."""
        index = np.asarray(index, dtype=np.int64)
        if not self._settled:
            self._check_blocks(index)
        return self._labels[index].astype(np.int64)

    def gather(self, index: np.ndarray) -> np.ndarray:
        """Images `index` as a new uint8 array `(len(index), 3, size, size)`.

        Raises:
            ShardError: an image comes from a bad block (even with `on_error="skip"`).
        """
        out = np.empty((len(index), *layout.images_shape(1, self.manifest.size)[1:]), np.uint8)
        if self.read_images(index, out) is not None:
            raise ShardError(f"images of {self.folder} come from bad blocks")
        return out

    def warm(self, stop: threading.Event, then_map: bool = False) -> None:
        """Read every shard into the page cache, paced (`warming.py`), then map every shard
        if `then_map` (`plan.maps_after_warm`). Runs on a background thread. Once per pack:
        later calls return at once; stopped early, the next reader starts over (cached pages
        cost nothing). A store pack's backend fetches every block ahead instead."""
        with self._lock:
            if self._warming:
                return
            self._warming = True
        files = [(self.folder / shard.name, shard.bytes) for shard in self.shards]
        if not self.files.warm(files, stop):
            self._warming = False
        elif then_map:
            self.map_all()

    def map_all(self, misses: float | None = None) -> bool:
        """Map every shard (or none, `mapped.py`); with a share of `misses`, only when at most
        that share of the pack is out of the page cache (`mapped.resident`). Returns True when
        every shard is mapped: any batch is then copied out of the mappings (`read_images`)."""
        if self.mapped_shards == len(self.shards):
            return True
        if not self.files.mappable:
            return False
        sizes = [shard.bytes for shard in self.shards]
        try:
            if misses is not None and not resident(self._open_checked, sizes, misses):
                return False
            return self._maps.map_all(self._open_checked, sizes)
        except MixshardError:  # read with `pread`, which names what is wrong
            return False

"""A local pack folder opened for reading by byte offset (torch-free).

Images are read straight into the caller's memory: single images (global order: a batch per
io_uring call, `uring.py`, or copied out of a mapping of each shard the warm job has read in,
`mapped.py`), runs of whole blocks (block order, one `preadv`, `blockrun.py`). A shard is only
mapped where the copy out of it survives the file being truncated under it (`_mapped.c`): a
short read, a fault in a mapping and a changed file all raise `ShardError`. Opening does one
`stat` per shard; a block's `.npy` header is checked, and its labels kept, on its first read.
Descriptors are opened on first use, cached, and only for regular files in the pack folder.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import numpy as np

from ..core import layout, locks
from ..core.errors import MixshardError, ShardError
from ..core.manifest import Manifest, ShardInfo
from .blockrun import RunPlan
from .mapped import ShardMaps, map_cached, mapping_wanted
from .openshards import OpenShards
from .rawio import read_iov
from .shardfiles import FileId, ShardChecks, warn_bad
from .uring import RingPool, read_rows
from .warming import warm_files

CHECK_LOCKS = 64  # locks striped over the blocks: a block's first read is checked once


class LocalPack(ShardChecks):
    """A pack folder opened for random access. Image `i` is the `i`-th image of the usable
    shards (bad ones skipped with `on_error="skip"`), in stored order. Thread-safe.

    Each shard's identity (device, inode, size, mtime) is recorded when the pack is opened and
    checked whenever its file is opened or read; it travels with the object when pickled, so a
    worker process that reopens the shards by name sees a pack replaced meanwhile.

    Args:
        folder: the pack folder.
        manifest: its loaded `index.json`.
        on_error: `"raise"`: a bad shard or block raises `ShardError`; `"skip"`: a shard found
            bad at open is left out, a block found bad when read is reported by `read_*`.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        manifest: Manifest,
        on_error: str = "raise",
        ids: dict[str, FileId | ShardError] | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.manifest = manifest
        self.on_error = on_error
        self.shards: list[ShardInfo] = []
        self.ids: dict[str, FileId] = {}
        # the shards as found when the manifest was read (`source.consistent_pack`), else now
        found = self.stat_shards(manifest.shards) if ids is None else ids
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
        self._files = OpenShards()
        self._lock = locks.Lock()
        self._check_locks = [locks.Lock() for _ in range(CHECK_LOCKS)]
        self._warming = False
        self._rings = RingPool()  # io_uring for the global order's reads
        self._maps = ShardMaps(len(self.shards))  # ... or mappings, once warm (`mapped.py`)

    # ------------------------------------------------------------------ files
    def _open(self, slot: int) -> contextlib.AbstractContextManager[list[int]]:
        """`[fd]` of shard `slot`, held open while the caller uses it."""
        return self._files.held([slot], self._open_checked)

    def check_shard(self, slot: int) -> None:
        """Raise `ShardError` when shard `slot` changed since the pack was opened."""
        with self._open(slot) as (fd,):
            self._check_same(slot, fd)

    @property
    def open_shards(self) -> int:
        """Shard descriptors held open now (at most `MAX_OPEN_SHARDS` once idle)."""
        return len(self._files)

    @property
    def mapped_shards(self) -> int:
        """Shards the global order now copies out of a mapping (`mapped.py`)."""
        return len(self._maps)

    def close(self) -> None:
        """Close the cached descriptors and unmap the shards (a later read opens them again;
        a later warm pass maps them again)."""
        self._files.close()
        self._rings.close()
        self._maps.close()
        with self._lock:
            self._warming = False

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in ("_files", "_rings", "_maps", "_lock", "_check_locks"):
            state[name] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = locks.Lock()
        self._check_locks = [locks.Lock() for _ in range(CHECK_LOCKS)]
        self._files, self._rings = OpenShards(), RingPool()
        self._maps = ShardMaps(len(self.shards))

    def __del__(self) -> None:
        if getattr(self, "_lock", None) is not None:  # not half-made
            self.close()

    # ------------------------------------------------------------------ blocks
    def _check_block(self, b: int) -> bool:
        """First read of block `b`: check its `.npy` header and read its labels. Returns False
        when the block is bad and skipped."""
        if self._checked[b]:
            return not self.bad[b]
        with self._check_locks[b % CHECK_LOCKS]:  # two reader threads: one check, one warning
            if not self._checked[b]:
                self._check_block_once(b)
        return not self.bad[b]

    def _check_block_once(self, b: int) -> None:
        slot, count = int(self.block_shard[b]), int(self.block_count[b])
        size, offset = self.manifest.size, int(self.block_offset[b])
        hlen = layout.images_header_len(count, size)
        loff = layout.labels_offset_for(offset, count, size)
        llen = layout.labels_header_len(count)
        head, raw = bytearray(hlen), bytearray(llen + 4 * count)
        with self._open(slot) as (fd,):
            self._pread(slot, fd, memoryview(head), offset - hlen)
            self._pread(slot, fd, memoryview(raw), loff - llen)
        self._judge(b, bytes(head), bytes(raw))

    def _judge(self, b: int, head: bytes, raw: bytes) -> None:
        """Check block `b`'s images header `head` and labels `raw` (header and data), keep its
        labels; a bad block raises, or with `on_error="skip"` is marked bad with a warning."""
        count, size = int(self.block_count[b]), self.manifest.size
        llen = layout.labels_header_len(count)
        problem = layout.header_problem(head, layout.images_shape(count, size), np.uint8)
        problem = problem or layout.header_problem(raw[:llen], (count,), np.int32)
        if problem is None:
            start = int(self.block_start[b])
            self._labels[start : start + count] = np.frombuffer(raw, "<i4", offset=llen)
        if problem is not None:
            slot = int(self.block_shard[b])
            where = f"shard {self.folder / self.shards[slot].name} block {self._keys[b]}"
            if self.on_error != "skip":
                raise ShardError(f"{where}: {problem} (altered); {self._fix()}")
            warn_bad("block", f"{where}: {problem}")
            self.bad[b] = True
        self._checked[b] = True

    def scatter_run(
        self, blocks: list[int], addresses: list[np.ndarray], drop_cache: bool = False
    ) -> list[bool | ShardError]:
        """Blocks `blocks` (consecutive ones of one shard, in stored order) in one scattered
        read of their whole span (`blockrun.py`): image `i` of `blocks[j]` to address
        `addresses[j][i]`, as `scatter_block` does for one block; a block's headers and labels
        come from the same read and are checked there on its first read. Returns per block
        True, False (bad and skipped) or the `ShardError` that names it.

        Raises:
            ShardError: the span could not be read (unreadable, truncated, changed).
        """
        slot = int(self.block_shard[blocks[0]])
        if any(int(self.block_shard[b]) != slot for b in blocks):
            raise ValueError("a run of blocks must lie in one shard")
        plan = RunPlan.of(
            self.block_offset[blocks].tolist(),
            self.block_count[blocks].tolist(),
            self.manifest.size,
        )
        scratch = np.empty(plan.scratch_bytes, np.uint8)
        iov = plan.iov(addresses, scratch.ctypes.data, self.manifest.image_bytes)
        with self._open(slot) as (fd,):
            try:
                got = read_iov(fd, iov, plan.start)
            except OSError as exc:
                raise self._unreadable(slot, exc) from None
            if got != plan.length:
                self._short(slot, fd)
            self._check_same(slot, fd)
            if drop_cache and hasattr(os, "posix_fadvise"):  # not on macOS
                os.posix_fadvise(fd, plan.start, got, os.POSIX_FADV_DONTNEED)
        results: list[bool | ShardError] = []
        for j, b in enumerate(blocks):
            (h, hn), (lo, ln) = plan.heads[j], plan.labels[j]
            try:
                with self._check_locks[b % CHECK_LOCKS]:
                    if not self._checked[b]:
                        self._judge(
                            b, scratch[h : h + hn].tobytes(), scratch[lo : lo + ln].tobytes()
                        )
            except ShardError as exc:
                results.append(exc)
                continue
            results.append(not self.bad[b])
        return results

    def block_of(self, index: np.ndarray) -> np.ndarray:
        """The block of each image number."""
        return np.searchsorted(self.block_start, index, side="right") - 1

    def read_block(self, b: int, out: np.ndarray, drop_cache: bool = False) -> bool:
        """Read block `b`'s images into `out[:count]` (a C-contiguous uint8 array of rows of
        one image each). Returns False when the block is bad and skipped. `drop_cache`: then
        drop those bytes from the page cache (a pack larger than memory: keeping them would
        only evict what is still to be read).

        Raises:
            ValueError: `out` is not C-contiguous or has no room for the block's images.
        """
        size, count = self.manifest.image_bytes, int(self.block_count[b])
        if not out.flags.c_contiguous or out.nbytes < count * size:
            raise ValueError(f"out must be C-contiguous with room for {count} images of {size} B")
        addresses = out.ctypes.data + np.arange(count, dtype=np.uint64) * np.uint64(size)
        return self.scatter_block(b, addresses, drop_cache)

    def scatter_block(self, b: int, addresses: np.ndarray, drop_cache: bool = False) -> bool:
        """As `read_block`, but image `i` of the block goes to memory address `addresses[i]`
        (uint64; each with room for one image), all in one `preadv` (a run of one block,
        `scatter_run`). The caller keeps that memory alive and unused by others until this
        returns."""
        result = self.scatter_run([b], [addresses], drop_cache)[0]
        if isinstance(result, ShardError):
            raise result
        return result

    def read_images(self, index: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        """Read images `index` into `out` (uint8, `(len(index), 3, size, size)`, contiguous):
        copied out of the shards' mappings where the warm pass has mapped them (`mapped.py`),
        else one read each, grouped by shard, the batch's reads in one io_uring call where it
        can be used (`uring.py`), else one `pread` each. Returns a bool mask of images that
        come from bad, skipped blocks, or None when every one was read."""
        index = np.asarray(index, dtype=np.int64)
        if not out.flags.c_contiguous or out.nbytes < len(index) * self.manifest.image_bytes:
            raise ValueError(f"out must be C-contiguous with room for {len(index)} images")
        block = self.block_of(index)
        blocks = np.unique(block)
        for b in blocks[~self._checked[blocks]].tolist():  # a block's first read only
            self._check_block(b)
        bad = self.bad[block] if self.bad[blocks].any() else None
        size = self.manifest.image_bytes
        slot_of = self.block_shard[block]
        offset_of = self.block_offset[block] + (index - self.block_start[block]) * size
        good = np.arange(len(index)) if bad is None else np.flatnonzero(~bad)
        shards = np.unique(slot_of[good])  # each read's file is checked after the batch
        files = self._files.held(shards.tolist(), self._open_checked)
        with files as held, self._maps.held() as mapped:
            if mapped is not None and mapped[shards].all():  # in the batch's order: the rows
                fd_at = dict(zip(shards.tolist(), held))  # written one after the next
                self._copy_mapped(out, good, slot_of[good], offset_of[good], fd_at)
            else:  # grouped by shard, as the kernel's reads go fastest
                rows = good[np.argsort(slot_of[good], kind="stable")]
                slots, offsets = slot_of[rows], offset_of[rows]
                fd_of = np.array(held, np.int32)[np.searchsorted(shards, slots)]
                on_map = None if mapped is None else mapped[slots]
                if on_map is not None and on_map.any():  # some shards mapped, others not yet
                    fd_at = dict(zip(shards.tolist(), held))
                    self._copy_mapped(out, rows[on_map], slots[on_map], offsets[on_map], fd_at)
                    rest = ~on_map
                    rows, slots, fd_of = rows[rest], slots[rest], fd_of[rest]
                    offsets = offsets[rest]
                self._read_rows(out, rows, slots, fd_of, offsets)
            for slot, fd in zip(shards.tolist(), held):
                self._check_same(slot, fd)
        return bad

    def _read_rows(
        self,
        out: np.ndarray,
        rows: np.ndarray,
        slots: np.ndarray,
        fds: np.ndarray,
        offsets: np.ndarray,
    ) -> None:
        """Read image `j` (at `offsets[j]` of shard `slots[j]`, open as `fds[j]`) into row
        `rows[j]` of `out`, for every `j`: io_uring where it can, else one `pread` each."""
        size = self.manifest.image_bytes
        for j in read_rows(self._rings, out, rows, fds, offsets, size):  # again, to raise
            view = out.reshape(-1).data[rows[j] * size : (rows[j] + 1) * size]  # the right
            self._pread(int(slots[j]), int(fds[j]), view, int(offsets[j]))  # error

    def _copy_mapped(
        self,
        out: np.ndarray,
        rows: np.ndarray,
        slots: np.ndarray,
        offsets: np.ndarray,
        fd_at: dict[int, int],
    ) -> None:
        """As `_read_rows`, out of the shards' mappings (held by the caller); `fd_at`: each
        shard's descriptor, for the error."""
        status, j = self._maps.copy(out, rows, slots, offsets, self.manifest.image_bytes)
        if status == 0:
            return
        slot = int(slots[j])
        if status == 1:  # past the shard's end: as a short read
            self._short(slot, fd_at[slot])
        self._check_same(slot, fd_at[slot])  # truncated or copied over under the mapping
        raise ShardError(
            f"cannot read shard {self.folder / self.shards[slot].name}: a page of it could not "
            f"be read (a disk error); {self._fix()}"
        )

    def labels(self, index: np.ndarray) -> np.ndarray:
        """int64 labels of images `index`; their blocks are checked (read) first if needed."""
        index = np.asarray(index, dtype=np.int64)
        for b in np.unique(self.block_of(index)).tolist():
            self._check_block(b)
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

    def warm(self, stop: threading.Event) -> None:
        """Read every shard into the page cache, paced (`warming.py`), and map each one read
        in when the pack fits in memory (`mapped.py`). Runs on a background thread. Once per
        pack: later calls return at once; stopped early, the next reader starts over (cached
        pages cost nothing)."""
        with self._lock:
            if self._warming or not hasattr(os, "posix_fadvise"):
                return
            self._warming = True
        files = [(self.folder / shard.name, shard.bytes) for shard in self.shards]
        maps = mapping_wanted(self.manifest.total_bytes)
        if not warm_files(files, stop, self._map_shard if maps else None):
            self._warming = False

    def map_resident(self) -> bool:
        """Map every shard now when the pack is in the page cache and fits in memory
        (`mapped.map_cached`): any batch is then copied out of the mappings (`read_images`),
        as the block order does for a warm pack. Returns True when every shard is mapped."""
        if self.mapped_shards == len(self.shards):
            return True
        sizes = [shard.bytes for shard in self.shards]
        try:
            return map_cached(self._maps, self._open_checked, sizes)
        except MixshardError:  # read with `pread`, which names what is wrong
            return False

    def _map_shard(self, slot: int) -> None:
        """Map shard `slot`, now in the page cache, for the global order's copies; a shard
        that cannot be opened or mapped is read with `pread` (which names what is wrong)."""
        try:
            fd = self._open_checked(slot)
        except MixshardError:  # on the warm thread: the reads name it
            return
        try:
            self._maps.add(slot, fd, self.shards[slot].bytes)
        finally:
            os.close(fd)

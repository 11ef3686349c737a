"""Shard URLs: `http(s)://`, `file://`, paths and `pipe:` commands, read as streams.

Memory is set by the manifest, never by the server: `index.json` is read up to a fixed size,
each tar member up to the size the manifest gives its block, and every read of a shard is
bounded by an overall deadline (a minimum rate), so a server that drips bytes or sends an
endless body ends in a `ShardError`, not a hang or an out-of-memory kill. A body cut short
(a chunked transfer that ends early) is a `ShardError` too. An HTTP 5xx answer or a
connection reset when a URL is opened is tried again after `HTTP_BACKOFF` seconds, doubling,
`HTTP_ATTEMPTS` times in all; then it is the `ShardError`.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import posixpath
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np

from ...core import layout
from ...core.constants import (
    IMAGES_SUFFIX,
    KEYS_SUFFIX,
    LABELS_SUFFIX,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    TAR_BLOCK,
)
from ...core.errors import ManifestError, MixshardError, ShardError
from ...core.manifest import BlockInfo, Manifest, ShardInfo

URL_TIMEOUT = 60.0  # seconds a single read may wait for data
MIN_RATE = 256 << 10  # bytes/s a shard or manifest must average ...
RATE_GRACE = 60.0  # ... once this many seconds have passed since its first byte was asked for
READ_CHUNK = 1 << 20
HTTP_ATTEMPTS = 4  # tries of a URL that answers 5xx or resets the connection ...
HTTP_BACKOFF = 0.5  # ... the first wait between them, in seconds, doubled each time (3.5 s)
_RESETS = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


def expand_urls(source: str | list[str]) -> list[str]:
    """Brace patterns (`shard-{000000..000009}.tar`) and `::`-separated lists, as webdataset."""
    from webdataset.shardlists import expand_urls as wds_expand

    items = source if isinstance(source, (list, tuple)) else [source]
    return [url for item in items for url in wds_expand(str(item))]


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


def _transient(exc: BaseException) -> bool:
    """An HTTP answer or failure worth trying again: a 5xx, or a connection reset."""
    if isinstance(exc, urllib.error.HTTPError):
        return 500 <= exc.code < 600
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    return isinstance(exc, _RESETS)


def _open_http(url: str, timeout: float) -> BinaryIO:
    """`urlopen`, tried again on a 5xx or a reset (`HTTP_ATTEMPTS`, backing off)."""
    wait, waited = HTTP_BACKOFF, 0.0
    for attempt in range(1, HTTP_ATTEMPTS + 1):
        try:
            return urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 - user's URL
        except (OSError, http.client.HTTPException) as exc:  # HTTPError, URLError among them
            if isinstance(exc, urllib.error.HTTPError):
                exc.close()  # its connection, not kept while waiting
            if attempt < HTTP_ATTEMPTS and _transient(exc):
                time.sleep(wait)
                waited, wait = waited + wait, wait * 2
                continue
            if attempt == 1:
                raise
            raise ShardError(f"{_problem(url, exc)} ({attempt} attempts in {waited:g} s)") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _problem(url: str, exc: BaseException) -> str:
    """What went wrong opening `url`, in one line."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"cannot read {url}: HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot reach {url}: {exc.reason}; check the URL and that the server is up"
    if isinstance(exc, OSError):
        return f"cannot read {url}: {exc.strerror or exc}"
    return f"cannot read {url}: {type(exc).__name__}: {exc}"  # a reply the client refuses


def open_url(url: str, timeout: float = URL_TIMEOUT) -> BinaryIO:
    """A readable binary stream for a path, `file://`, `http(s)://` or `pipe:` URL."""
    try:
        if url.startswith(("http://", "https://")):
            return _open_http(url, timeout)
        if url.startswith("file://"):
            return open(urllib.request.url2pathname(url[7:]), "rb")  # noqa: SIM115
        if "://" not in url and not url.startswith("pipe:"):
            return open(url, "rb")  # noqa: SIM115 - closed by the caller
        from webdataset import gopen

        return gopen(url, "rb")
    except (OSError, http.client.HTTPException) as exc:
        raise ShardError(_problem(url, exc)) from None


class BoundedStream:
    """Reads from `raw` at most `limit` bytes, averaging at least `MIN_RATE` bytes/s once
    `RATE_GRACE` seconds have passed, and hashes them; `raw.read1` is used where there is one,
    so that one call never waits for more than one network read. `url`: named in errors."""

    def __init__(self, raw: BinaryIO, url: str, limit: int) -> None:
        self.raw, self.url, self.limit = raw, url, limit
        self.bytes = 0
        self.sha = hashlib.sha256()
        self._t0 = time.monotonic()
        self._read = getattr(raw, "read1", raw.read)

    def _deadline_passed(self) -> bool:
        spent = time.monotonic() - self._t0
        return spent > RATE_GRACE and self.bytes < MIN_RATE * spent

    def read(self, n: int) -> bytes:
        """Up to `n` bytes (fewer only at the end of the stream)."""
        parts: list[bytes] = []
        want = min(n, self.limit - self.bytes + 1)  # one byte over the limit tells it is over
        while want > 0:
            try:
                data = self._read(min(want, READ_CHUNK))
            except http.client.IncompleteRead as exc:
                raise ShardError(
                    f"cannot read {self.url}: the server's body ended early, after "
                    f"{self.bytes + len(exc.partial)} bytes (the connection closed inside it); "
                    "check the server, then read again"
                ) from None
            except (OSError, ValueError, http.client.HTTPException) as exc:
                raise ShardError(f"cannot read {self.url}: {exc}") from None
            if not data:
                break
            parts.append(data)
            self.bytes += len(data)
            self.sha.update(data)
            want -= len(data)
            if self.bytes > self.limit:
                raise ShardError(f"{self.url} is longer than the {self.limit} bytes expected")
            if self._deadline_passed():
                raise ShardError(
                    f"{self.url} is too slow: {self.bytes} bytes in "
                    f"{time.monotonic() - self._t0:.0f} s, below the minimum of "
                    f"{MIN_RATE / 1024:.0f} kB/s; check the server or the network"
                )
        return b"".join(parts)

    def exact(self, n: int, what: str) -> bytes:
        data = self.read(n)
        if len(data) != n:
            raise ShardError(f"{self.url} ends early, inside {what} (truncated)")
        return data

    def close(self) -> None:
        self.raw.close()


def read_manifest(url: str) -> Manifest:
    """Fetch and parse a manifest from any URL `open_url` takes (at most 256 MB)."""
    try:
        stream = BoundedStream(open_url(url), url, MAX_MANIFEST_BYTES)
        try:
            data = stream.read(MAX_MANIFEST_BYTES + 1)
        finally:
            stream.close()
    except ShardError as exc:  # a manifest's problem, as for a local pack
        raise ManifestError(f"cannot read the manifest: {exc}") from None
    return Manifest.loads(data, url)


def resolve_urls(
    source: str | list[str], manifest: str | Manifest | None = None
) -> tuple[Manifest, list[tuple[str, ShardInfo]]]:
    """The manifest of shard URLs (`<base>/index.json` unless `manifest` says where, or is the
    manifest already read) and each URL paired with the shard it names.

    Raises:
        MixshardError: no URLs, or a URL whose shard the manifest does not list.
    """
    urls = expand_urls(source)
    if not urls:
        raise MixshardError(f"no shard URLs in {source!r}")
    if isinstance(manifest, Manifest):
        found = manifest
    else:
        found = read_manifest(manifest or manifest_url(urls[0]))
    by_name = {s.name: s for s in found.shards}
    pairs = []
    for url in urls:
        name = shard_name_of(url)
        if name not in by_name:
            raise MixshardError(f"shard {url} is not listed in the manifest {found.origin}")
        pairs.append((url, by_name[name]))
    return found, pairs


def _member(stream: BoundedStream, name: str, size: int, what: str) -> bytes:
    """Read one tar member that must be called `name` and hold `size` bytes (`size` < 0: any
    size up to what is left of the shard)."""
    header = stream.exact(TAR_BLOCK, f"the header of {what}")
    try:
        info = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
    except tarfile.TarError as exc:
        raise ShardError(f"{stream.url}: a damaged tar header at {what} ({exc})") from None
    left = stream.limit - stream.bytes
    if (
        info.name != name
        or info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE)
        or (size >= 0 and info.size != size)
        or info.size > left
    ):
        raise ShardError(
            f"{stream.url}: found member {info.name!r} of {info.size} bytes where index.json "
            f"says {name!r}" + (f" of {size} bytes" if size >= 0 else "") + " (altered)"
        )
    data = stream.exact(layout.padded(info.size), what)
    return data[: info.size]


def _npy_payload(raw: bytes, shape: tuple[int, ...], dtype: type, where: str) -> np.ndarray:
    hlen = len(layout.npy_header(shape, dtype))
    problem = layout.header_problem(raw[:hlen], shape, dtype)
    if problem:
        raise ShardError(f"{where}: {problem} (altered)")
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"), offset=hlen).reshape(shape)


def read_block(stream: BoundedStream, block: BlockInfo, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The next block of a shard stream, checked against its manifest entry."""
    shape = layout.images_shape(block.count, size)
    where = f"{stream.url} block {block.key}"
    nbytes = layout.images_header_len(block.count, size) + int(np.prod(shape))
    raw = _member(stream, f"{block.key}.{IMAGES_SUFFIX}", nbytes, f"block {block.key}")
    images = _npy_payload(raw, shape, np.uint8, where)
    lbytes = layout.labels_header_len(block.count) + 4 * block.count
    raw = _member(stream, f"{block.key}.{LABELS_SUFFIX}", lbytes, f"labels of {block.key}")
    labels = _npy_payload(raw, (block.count,), np.int32, where)
    _member(stream, f"{block.key}.{KEYS_SUFFIX}", -1, f"keys of {block.key}")
    return images, labels


def read_blocks(url: str, shard: ShardInfo, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stream the blocks of one shard as `(images, labels)`; checks every block against the
    manifest and, at the end, the shard's byte count and sha256.

    Raises:
        ShardError: unreachable, truncated, altered, too slow, or not the shard the manifest
            describes.
    """
    stream = BoundedStream(open_url(url), url, shard.bytes)
    try:
        for block in shard.blocks:
            yield read_block(stream, block, size)
        while stream.read(READ_CHUNK):
            pass
    finally:
        stream.close()
    if stream.bytes != shard.bytes or stream.sha.hexdigest() != shard.sha256:
        raise ShardError(
            f"shard {url} is {stream.bytes} bytes with another sha256 than index.json says "
            f"({shard.bytes} bytes): altered or truncated"
        )

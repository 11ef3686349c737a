"""How a `Store` at an `http(s)://` prefix reads an object: through fsspec's HTTP file system
(its aiohttp session and event loop), each answer read to at most the bytes asked for.

A pack served over HTTP is read like one on S3 or GCS, by byte ranges into the block cache,
so memory is set by the manifest, never by the server: a body longer than the range or the
object it answers (an endless body, a whole object sent for a range) is a `ShardError` once it
passes the bytes asked for; a body that ends early comes back short and fails the block's
size check. A server that does not answer byte ranges is refused with what to do. An HTTP 5xx
answer or a connection dropped before the answer is tried again after `HTTP_BACKOFF` seconds,
doubling, `HTTP_ATTEMPTS` times in all; the store call's deadline (`stores.deadline`) bounds it
all, so a server that drips bytes ends in a `ShardError` too, not a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import ShardError

HTTP_ATTEMPTS = 4  # tries of a URL that answers 5xx or drops the connection ...
HTTP_BACKOFF = 0.5  # ... the first wait between them, in seconds, doubled each time (3.5 s)
READ_CHUNK = 1 << 20


class _Busy(Exception):
    """An answer worth asking again for: a 5xx, or a connection dropped before the answer."""


async def _attempts(url: str, once: Callable[[], Awaitable[Any]]) -> Any:
    """`once()`, tried again while it raises `_Busy` (`HTTP_ATTEMPTS`, backing off)."""
    wait, waited = HTTP_BACKOFF, 0.0
    for attempt in range(1, HTTP_ATTEMPTS + 1):
        try:
            return await once()
        except _Busy as exc:
            if attempt == HTTP_ATTEMPTS:
                raise ShardError(
                    f"cannot read {url}: {exc} ({attempt} attempts in {waited:g} s)"
                ) from None
            await asyncio.sleep(wait)
            waited, wait = waited + wait, wait * 2
    raise AssertionError("unreachable")  # pragma: no cover


async def _get(fs: Any, url: str, headers: dict[str, str], read: Callable) -> Any:
    """One GET of `url`; `read(response)` makes the answer of a 2xx."""
    import aiohttp

    session = await fs.set_session()
    try:
        async with session.get(fs.encode_url(url), headers=headers, **fs.kwargs) as reply:
            if reply.status == 404:
                raise FileNotFoundError(url)
            if reply.status >= 500:
                raise _Busy(f"HTTP {reply.status} {reply.reason}")
            if reply.status >= 400:
                raise ShardError(f"cannot read {url}: HTTP {reply.status} {reply.reason}")
            return await read(reply)
    except aiohttp.ClientConnectorError as exc:  # nothing listens there: asking again won't help
        raise ShardError(
            f"cannot reach {url}: {exc.os_error.strerror or exc}; check the URL and that the "
            "server is up"
        ) from None
    except (aiohttp.ServerDisconnectedError, ConnectionResetError) as exc:
        raise _Busy(f"the server closed the connection ({type(exc).__name__})") from None


async def http_size(fs: Any, url: str) -> int | None:
    """Bytes of the object at `url` (from the answer to a one-byte range), None when the
    server answers 404."""

    async def size_of(reply: Any) -> int:
        total = reply.headers.get("Content-Range", "").rpartition("/")[2]
        if reply.status == 206 and total.isdigit():
            return int(total)
        if reply.status == 200 and reply.headers.get("Content-Length", "").isdigit():
            return int(reply.headers["Content-Length"])
        raise ShardError(f"{url}: the server does not say how large the object is")

    headers = {"Range": "bytes=0-0", "Accept-Encoding": "identity"}
    try:
        return await _attempts(url, lambda: _get(fs, url, headers, size_of))
    except FileNotFoundError:
        return None


async def http_read(fs: Any, url: str, start: int | None, end: int | None, cap: int) -> bytes:
    """Bytes `[start, end)` of the object at `url` (all of it when `start` is None), read to
    at most `cap` bytes (a range's length, or the most the whole object may hold)."""

    async def body(reply: Any) -> bytes:
        if start and reply.status != 206:
            raise ShardError(
                f"{url}: the server does not answer byte ranges (HTTP Range requests), which "
                "reading a pack's blocks needs; serve the pack from one that does (nginx, "
                "Apache, S3 or GCS over https, most static hosts)"
            )
        exact = start is None or reply.status == 206  # else the range's start of the whole
        limit = cap + 1 if exact else cap  # one byte over the cap tells the body is longer
        parts, got = [], 0
        while got < limit:
            try:
                chunk = await reply.content.read(min(READ_CHUNK, limit - got))
            except Exception as exc:  # aiohttp's payload errors: a body cut short
                raise ShardError(
                    f"cannot read {url}: the server's body ended early, after {got} bytes "
                    f"({type(exc).__name__}); check the server, then read again"
                ) from None
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        data = b"".join(parts)
        if len(data) > cap:
            raise ShardError(f"{url} is longer than the {cap} bytes expected")
        return data

    headers = {"Accept-Encoding": "identity"}
    if start is not None:
        headers["Range"] = f"bytes={start}-{(end or start + cap) - 1}"
    return bytes(await _attempts(url, lambda: _get(fs, url, headers, body)))

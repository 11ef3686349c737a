"""Object stores (`s3://`, `gs://`, `http(s)://`, any other fsspec protocol): the one module
that talks to fsspec.

A `Store` is one pack's prefix in a bucket or on a web server: objects are named relative to it
(`index.json`, `shard-000000.tar`). An `http(s)://` prefix is read-only and cannot be listed:
its objects are read by `httpreads`. fsspec and its protocol package are optional extras,
imported on first use (a missing one is a one-line `MixshardError` saying what to install);
endpoints and credentials come from each ecosystem's own settings (docs/packing-to-a-store.md).
`url_scheme` and `check_location` decide what a location is, for every command: a local path,
a `file://` URL (a local path), or a store URL; any other scheme is an error, never a folder.

Every call to the store has a wall-clock deadline (`deadline`, whose figures the same page
gives): a store that stops answering is a `ShardError` naming the object once it passes, never
a thread waiting in fsspec for ever: an asynchronous protocol's call (s3fs, gcsfs) is cancelled
in fsspec's loop, any other runs on a daemon thread that is left behind.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .constants import MANIFEST_NAME, MAX_MANIFEST_BYTES
from .errors import ManifestError, MixshardError, ShardError
from .jobs import Job

LOCAL = ("file",)  # the one URL scheme of a local path
HTTP = ("http", "https")  # read by `httpreads`, through fsspec's HTTP file system
EXTRA_OF = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "http": "http", "https": "http"}
STORE_DEADLINE = 60.0  # seconds any store call may take, plus ...
STORE_MIN_RATE = 256 << 10  # ... one second per this many bytes it moves
REQUEST_TIMEOUT = 20.0  # S3: seconds a request may wait to connect or for its next bytes ...
ATTEMPTS = 3  # ... before it is tried again (all attempts within the call's deadline)
WRITES = ("put_file", "pipe_file", "rm_file")  # what an http(s):// prefix refuses
STORE_CHUNK = 8 << 20  # bytes of one ranged read when an object is hashed
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(text: Any) -> str | None:
    """The lower-case scheme of `text` when it starts with `scheme://`, else None."""
    if not isinstance(text, str):
        return None
    found = _SCHEME.match(text)
    return found.group(1).lower() if found else None


def is_store_url(text: Any) -> bool:
    """True for a URL of a pack read through the block cache (`s3://`, `gs://`, `http(s)://`,
    other fsspec protocols): one with a scheme other than `file`."""
    scheme = url_scheme(text)
    return scheme is not None and scheme not in LOCAL


def _known_protocols() -> set[str]:
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return set(EXTRA_OF)
    return set(known_implementations) | set(EXTRA_OF)


def check_location(text: Any) -> None:
    """Refuse a location whose URL scheme no reader or store handles.

    Raises:
        MixshardError: `xyz://...` where `xyz` is neither streamed by mixshard nor an fsspec
            protocol.
    """
    scheme = url_scheme(text)
    if scheme is None or scheme in LOCAL or scheme in _known_protocols():
        return
    raise MixshardError(
        f"{text}: mixshard cannot read or write {scheme}:// URLs; give a local folder, a "
        "file:// URL, or a pack's URL such as s3://bucket/prefix, gs://bucket/prefix or "
        "https://host/prefix"
    )


def _filesystem(url: str) -> tuple[Any, str]:
    """fsspec's file system for `url` and the path inside it."""
    scheme = url_scheme(url) or ""
    extra = EXTRA_OF.get(scheme, "cloud")
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise MixshardError(
            f"{url}: reading object stores needs fsspec: pip install 'mixshard[{extra}]'"
        ) from None
    options: dict[str, Any] = {}
    if extra == "s3":
        options["config_kwargs"] = {
            "connect_timeout": REQUEST_TIMEOUT,
            "read_timeout": REQUEST_TIMEOUT,
            "retries": {"max_attempts": ATTEMPTS, "mode": "standard"},
        }
    try:
        return url_to_fs(url, **options)
    except ImportError as exc:
        raise MixshardError(
            f"{url}: {scheme}:// needs a package that is not installed ({exc.name or exc}): "
            f"pip install 'mixshard[{extra}]'"
        ) from None
    except ValueError as exc:
        raise MixshardError(f"{url}: {exc}") from None


def deadline(nbytes: int = 0) -> float:
    """Seconds a store call that moves `nbytes` bytes may take."""
    return STORE_DEADLINE + max(0, nbytes) / STORE_MIN_RATE


def bounded(fs: Any, method: str | Callable, seconds: float, *args: Any, **kwargs: Any) -> Any:
    """`fs.<method>(*args, **kwargs)`, ended by `TimeoutError` after `seconds`.

    fsspec's own sync wrapper of an asynchronous method is run through `fsspec.asyn.sync` with
    a timeout, which cancels the request in fsspec's loop; any other callable (a synchronous
    protocol, a stand-in) runs on a daemon thread, left behind when it does not return in
    time (nothing else can stop a blocking call)."""
    if callable(method):  # a coroutine function of `httpreads`, run in fsspec's loop
        from fsspec.asyn import sync

        return sync(fs.loop, method, fs, *args, timeout=seconds, **kwargs)
    call = getattr(fs, method)
    inner = getattr(fs, "_" + method, None)  # the coroutine fsspec's wrapper would run
    loop = getattr(fs, "loop", None)
    wrapper = inspect.iscoroutinefunction(getattr(call, "__wrapped__", None))  # not replaced
    if wrapper and loop is not None and inspect.iscoroutinefunction(inner):
        from fsspec.asyn import sync

        return sync(loop, inner, *args, timeout=seconds, **kwargs)
    return _on_thread(lambda: call(*args, **kwargs), seconds)


def _on_thread(call: Callable[[], Any], seconds: float) -> Any:
    answer: list[Any] = []
    job = Job(lambda: answer.append(call()), "mixshard-store-call")
    job.join(seconds)
    if job.alive:
        raise TimeoutError(f"no answer within {seconds} s")
    job.raise_error()
    return answer[0]


def describe(exc: BaseException, url: str, seconds: float | None = None) -> str:
    """One line for a store error on `url`, with the fix (`seconds`: the call's deadline)."""
    if isinstance(exc, FileNotFoundError):
        return f"{url} does not exist: check the bucket and prefix (and that the pack was uploaded)"
    if isinstance(exc, PermissionError):
        return (
            f"access to {url} was denied: check the credentials (for S3, AWS_ACCESS_KEY_ID / "
            "AWS_PROFILE; for GCS, GOOGLE_APPLICATION_CREDENTIALS) and the bucket's permissions"
        )
    if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():
        waited = deadline() if seconds is None else seconds
        shown = f"{waited:.0f}" if waited >= 10 else f"{waited:.1f}".rstrip("0").rstrip(".")
        return f"{url} did not answer within {shown} s: check the endpoint or network"
    return f"cannot reach {url}: {type(exc).__name__}: {exc}"


TAG_FIELDS = ("generation", "ETag", "etag", "md5Hash")  # GCS's first: it changes with the bytes


def object_tag(info: dict) -> str | None:
    """What changes when an object is rewritten: GCS's generation, S3's ETag (None where the
    protocol has neither; then only the size tells)."""
    for field in TAG_FIELDS:
        if info.get(field) not in (None, ""):
            return str(info[field])
    return None


class Store:
    """One prefix of an object store, as the folder of a pack.

    Args:
        url: `scheme://bucket/prefix` (a trailing `/` is ignored).

    Every method raises `ShardError` (one line naming the object's URL, from `describe`) when
    the store fails or does not answer within the call's `deadline`; `size` answers None for
    an object that does not exist.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = _filesystem(self.url)
        self.root = self.root.rstrip("/")
        self.http = url_scheme(self.url) in HTTP  # read-only, not listed
        self._sizes: dict[str, int] = {}  # objects' sizes last seen, for whole reads' deadlines

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def object_url(self, name: str) -> str:
        """The URL of object `name` under this prefix."""
        return f"{self.url}/{name}"

    def _read_only(self) -> MixshardError:
        return MixshardError(
            f"{self.url}: an http(s):// pack is read-only (and cannot be listed); write the "
            "pack to a folder or an object store (s3://, gs://) and serve that"
        )

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _known(self, name: str) -> int:
        """The size last seen of object `name` (0 when none was): the bytes its whole read or
        download is given time for."""
        return self._sizes.get(name, 0)

    def _call(
        self,
        name: str,
        method: str | Callable,
        nbytes: int,
        *args: Any,
        passing: tuple[type[BaseException], ...] = (),
        **kwargs: Any,
    ) -> Any:
        """`self.fs.<method>(...)` within the deadline of a call moving `nbytes`; a failure
        is a `ShardError` naming object `name`, except the kinds in `passing` (raised as they
        are, for the caller to answer)."""
        if self.http and method in WRITES:
            raise self._read_only()
        seconds = deadline(nbytes)
        try:
            return bounded(self.fs, method, seconds, *args, **kwargs)
        except ShardError:  # from `httpreads`: it names the URL and the fix
            raise
        except passing:
            raise
        except Exception as exc:  # fsspec's protocols raise their own kinds: named in the line
            raise ShardError(describe(exc, self.object_url(name), seconds)) from None

    def read(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes `[start, end)` of object `name` (the whole object by default): one request."""
        nbytes = end - start if start is not None and end is not None else self._known(name)
        if self.http:
            from .httpreads import http_read  # asyncio: imported by a read over http(s) only

            cap = nbytes if start is not None or name in self._sizes else MAX_MANIFEST_BYTES
            return self._call(name, http_read, nbytes, self._path(name), start, end, cap)
        return bytes(self._call(name, "cat_file", nbytes, self._path(name), start=start, end=end))

    def size(self, name: str) -> int | None:
        """Bytes of object `name`, or None when there is none."""
        if self.http:
            from .httpreads import http_size

            found = self._call(name, http_size, 0, self._path(name))
            if found is not None:
                self._sizes[name] = found
            return found
        try:
            info = self._call(name, "info", 0, self._path(name), passing=(FileNotFoundError,))
        except FileNotFoundError:
            return None
        if info.get("type", "file") != "file":
            return None
        self._sizes[name] = int(info["size"])
        return self._sizes[name]

    def sizes(self, names: list[str]) -> dict[str, int]:
        """`{name: bytes}` of those of `names` that exist: one listing, or (an `http(s)://`
        prefix, which has none) a request for each name."""
        if not self.http:
            return {n: size for n, size in self.listing().items() if n in set(names)}
        return {n: size for n in names if (size := self.size(n)) is not None}

    def listing(self) -> dict[str, int]:
        """`{name: bytes}` of the objects directly under the prefix (empty when there are none)."""
        return {name: size for name, (size, _) in self.objects().items()}

    def objects(self) -> dict[str, tuple[int, str | None]]:
        """`{name: (bytes, tag)}` of the objects directly under the prefix; the tag is the
        store's version of the object (`object_tag`)."""
        if self.http:  # what a pack written there would list first
            raise self._read_only()
        self.fs.invalidate_cache(self.root)
        try:
            entries = self._call("", "ls", 0, self.root, detail=True, passing=(FileNotFoundError,))
        except FileNotFoundError:
            return {}
        out = {}
        for entry in entries:
            if entry.get("type") == "file":
                name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
                out[name] = (int(entry["size"]), object_tag(entry))
        self._sizes.update((name, size) for name, (size, _) in out.items())
        return out

    def sha256(self, name: str) -> str:
        """The sha256 of object `name`, read in ranged reads of `STORE_CHUNK` bytes (each with
        its own deadline; nothing kept)."""
        import hashlib

        total = self.size(name)
        if total is None:
            raise ShardError(describe(FileNotFoundError(name), self.object_url(name)))
        sha = hashlib.sha256()
        for start in range(0, total, STORE_CHUNK):
            sha.update(self.read(name, start, min(total, start + STORE_CHUNK)))
        return sha.hexdigest()

    def tag(self, name: str) -> str | None:
        """The store's version of object `name` (`object_tag`)."""
        return object_tag(self._call(name, "info", 0, self._path(name)))

    def download(self, name: str, local: str | Path) -> None:
        """Copy object `name` to the local file `local` (over http(s), in ranged reads of
        `STORE_CHUNK` bytes: never more than the object's size)."""
        if self.http:
            total = self.size(name)
            if total is None:
                raise ShardError(describe(FileNotFoundError(name), self.object_url(name)))
            with open(local, "wb") as out:
                for start in range(0, total, STORE_CHUNK):
                    out.write(self.read(name, start, min(total, start + STORE_CHUNK)))
            return
        self._call(name, "get_file", self._known(name), self._path(name), str(local))

    def bucket_exists(self) -> bool:
        """Whether the bucket (the first part of the path) exists."""
        return bool(self._call("", "exists", 0, self.root.split("/", 1)[0]))

    def upload(self, local: str | Path, name: str) -> None:
        """Copy local file `local` to object `name` (replacing it)."""
        try:
            nbytes = os.stat(local).st_size
        except OSError:
            nbytes = 0  # put_file says what is wrong with it
        self._call(name, "put_file", nbytes, str(local), self._path(name))
        self.fs.invalidate_cache(self.root)

    def write(self, name: str, data: bytes) -> None:
        """Make object `name` hold `data`."""
        self._call(name, "pipe_file", len(data), self._path(name), data)
        self.fs.invalidate_cache(self.root)

    def create(self, name: str, data: bytes) -> bool:
        """Make object `name` hold `data` unless it exists (atomically where the store can:
        S3's conditional write); False when it existed."""
        try:
            self._call(
                name,
                "pipe_file",
                len(data),
                self._path(name),
                data,
                mode="create",
                passing=(FileExistsError,),
            )
        except FileExistsError:
            return False
        finally:
            self.fs.invalidate_cache(self.root)
        return True

    def remove(self, name: str) -> None:
        """Delete object `name`; nothing happens when there is none."""
        with contextlib.suppress(FileNotFoundError):
            self._call(name, "rm_file", 0, self._path(name), passing=(FileNotFoundError,))
        self.fs.invalidate_cache(self.root)


def load_manifest(store: Store) -> Any:
    """The `Manifest` of the pack at `store` (its `index.json`, at most 256 MB).

    Raises:
        ManifestError: there is none (no finished pack there), it is too large, or the store
            fails; one line naming the URL.
    """
    from .manifest import Manifest

    try:
        size = store.size(MANIFEST_NAME)
    except ShardError as exc:
        raise ManifestError(f"cannot read the manifest: {exc}") from None
    url = store.object_url(MANIFEST_NAME)
    if size is None:
        raise ManifestError(
            f"{url} does not exist: no finished pack at {store.url} (a pack being uploaded "
            "gets its index.json last); check the bucket and prefix"
        )
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{url} is {size} bytes, more than a manifest may be")
    try:
        data = store.read(MANIFEST_NAME)  # given time for the size just seen
    except ShardError as exc:
        raise ManifestError(f"cannot read the manifest: {exc}") from None
    return Manifest.loads(data, url)

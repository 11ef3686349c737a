"""Object stores (`s3://`, `gs://`, any other fsspec protocol): the one module that talks to fsspec.

A `Store` is one pack's prefix in a bucket: objects are named relative to it (`index.json`,
`shard-000000.tar`). fsspec and its protocol package (s3fs, gcsfs) are optional extras, imported
on first use; a missing one is a one-line `MixshardError` saying what to install. Endpoints and
credentials come from each ecosystem's own settings (for S3 the AWS variables and files,
`AWS_ENDPOINT_URL` for MinIO, R2 or Ceph; for GCS the Google application credentials), never
from mixshard's options.

`url_scheme` and `check_location` decide what a location is, for every command: a local path,
a URL mixshard streams itself (`http(s)://`, `file://`, `pipe:`), or a store URL; a scheme that
is none of these is an error, never a folder name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .constants import MANIFEST_NAME, MAX_MANIFEST_BYTES
from .errors import ManifestError, MixshardError, ShardError

STREAMED = ("http", "https", "file")  # URL schemes read by reading/remote.py itself
EXTRA_OF = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}  # scheme -> pip extra
STORE_TIMEOUT = 60.0  # seconds one request may wait (connect or read)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(text: Any) -> str | None:
    """The lower-case scheme of `text` when it starts with `scheme://`, else None."""
    if not isinstance(text, str):
        return None
    found = _SCHEME.match(text)
    return found.group(1).lower() if found else None


def is_store_url(text: Any) -> bool:
    """True for a URL of an object store (`s3://`, `gs://`, other fsspec protocols): one with a
    scheme that is not `http(s)` or `file`."""
    scheme = url_scheme(text)
    return scheme is not None and scheme not in STREAMED


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
    if scheme is None or scheme in STREAMED or scheme in _known_protocols():
        return
    raise MixshardError(
        f"{text}: mixshard cannot read or write {scheme}:// URLs; give a local folder, an "
        "http(s):// or file:// URL, or an object store URL such as s3://bucket/prefix or "
        "gs://bucket/prefix"
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
            "connect_timeout": STORE_TIMEOUT,
            "read_timeout": STORE_TIMEOUT,
            "retries": {"max_attempts": 3, "mode": "standard"},
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


def describe(exc: BaseException, url: str) -> str:
    """One line for a store error on `url`, with the fix."""
    if isinstance(exc, FileNotFoundError):
        return f"{url} does not exist: check the bucket and prefix (and that the pack was uploaded)"
    if isinstance(exc, PermissionError):
        return (
            f"access to {url} was denied: check the credentials (for S3, AWS_ACCESS_KEY_ID / "
            "AWS_PROFILE; for GCS, GOOGLE_APPLICATION_CREDENTIALS) and the bucket's permissions"
        )
    if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():
        return f"{url} did not answer within {STORE_TIMEOUT:.0f} s: check the endpoint or network"
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
    the store fails; `size` answers None for an object that does not exist.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = _filesystem(self.url)
        self.root = self.root.rstrip("/")

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def object_url(self, name: str) -> str:
        """The URL of object `name` under this prefix."""
        return f"{self.url}/{name}"

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _fail(self, exc: BaseException, name: str) -> ShardError:
        return ShardError(describe(exc, self.object_url(name)))

    def read(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes `[start, end)` of object `name` (the whole object by default): one request."""
        try:
            return bytes(self.fs.cat_file(self._path(name), start=start, end=end))
        except Exception as exc:  # fsspec's protocols raise their own kinds: named in the line
            raise self._fail(exc, name) from None

    def size(self, name: str) -> int | None:
        """Bytes of object `name`, or None when there is none."""
        try:
            info = self.fs.info(self._path(name))
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._fail(exc, name) from None
        return int(info["size"]) if info.get("type", "file") == "file" else None

    def listing(self) -> dict[str, int]:
        """`{name: bytes}` of the objects directly under the prefix (empty when there are none)."""
        return {name: size for name, (size, _) in self.objects().items()}

    def objects(self) -> dict[str, tuple[int, str | None]]:
        """`{name: (bytes, tag)}` of the objects directly under the prefix; the tag is the
        store's version of the object (`object_tag`)."""
        try:
            self.fs.invalidate_cache(self.root)
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return {}
        except Exception as exc:
            raise self._fail(exc, "") from None
        out = {}
        for entry in entries:
            if entry.get("type") == "file":
                name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
                out[name] = (int(entry["size"]), object_tag(entry))
        return out

    def sha256(self, name: str) -> str:
        """The sha256 of object `name`, streamed in 8 MiB reads (nothing kept)."""
        from .files import sha256_of

        try:
            with self.fs.open(self._path(name), "rb", block_size=8 << 20) as f:
                return sha256_of(f, 8 << 20)
        except Exception as exc:
            raise self._fail(exc, name) from None

    def tag(self, name: str) -> str | None:
        """The store's version of object `name` (`object_tag`)."""
        try:
            return object_tag(self.fs.info(self._path(name)))
        except Exception as exc:
            raise self._fail(exc, name) from None

    def download(self, name: str, local: str | Path) -> None:
        """Copy object `name` to the local file `local`."""
        try:
            self.fs.get_file(self._path(name), str(local))
        except Exception as exc:
            raise self._fail(exc, name) from None

    def bucket_exists(self) -> bool:
        """Whether the bucket (the first part of the path) exists."""
        try:
            return bool(self.fs.exists(self.root.split("/", 1)[0]))
        except Exception as exc:
            raise self._fail(exc, "") from None

    def upload(self, local: str | Path, name: str) -> None:
        """Copy local file `local` to object `name` (replacing it)."""
        try:
            self.fs.put_file(str(local), self._path(name))
        except Exception as exc:
            raise self._fail(exc, name) from None
        self.fs.invalidate_cache(self.root)

    def write(self, name: str, data: bytes) -> None:
        """Make object `name` hold `data`."""
        try:
            self.fs.pipe_file(self._path(name), data)
        except Exception as exc:
            raise self._fail(exc, name) from None
        self.fs.invalidate_cache(self.root)

    def create(self, name: str, data: bytes) -> bool:
        """Make object `name` hold `data` unless it exists (atomically where the store can:
        S3's conditional write); False when it existed."""
        try:
            self.fs.pipe_file(self._path(name), data, mode="create")
        except FileExistsError:
            return False
        except Exception as exc:
            raise self._fail(exc, name) from None
        finally:
            self.fs.invalidate_cache(self.root)
        return True

    def remove(self, name: str) -> None:
        """Delete object `name`; nothing happens when there is none."""
        try:
            self.fs.rm_file(self._path(name))
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._fail(exc, name) from None
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
        data = store.read(MANIFEST_NAME)
    except ShardError as exc:
        raise ManifestError(f"cannot read the manifest: {exc}") from None
    return Manifest.loads(data, url)

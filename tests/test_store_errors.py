"""How core/stores.py reports a failing store: one line naming the object and the fix.

A store that answers with an error is made by giving a `Store` a file system whose every call
raises; fsspec's in-memory file system (`memory://`) stands for a bucket that works. No server.
"""

from __future__ import annotations

import uuid

import pytest

from mixshard.core.errors import ManifestError, MixshardError, ShardError
from mixshard.core.stores import Store, describe, load_manifest

pytest.importorskip("fsspec", reason="the s3 extra is not installed (pip install 'mixshard[s3]')")


class Failing:
    """An fsspec file system whose every call raises `exc` (the cache can still be dropped)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def invalidate_cache(self, path: str | None = None) -> None:
        pass

    def __getattr__(self, name: str):
        def fail(*args, **kwargs):
            raise self.exc

        return fail


def memory_store() -> Store:
    return Store(f"memory://bucket-{uuid.uuid4().hex[:12]}/packs/p")


def failing_store(exc: BaseException) -> Store:
    store = memory_store()
    store.fs = Failing(exc)
    return store


CALLS = {
    "read": (lambda s, tmp: s.read("shard-000000.tar", 0, 8), "shard-000000.tar"),
    "size": (lambda s, tmp: s.size("index.json"), "index.json"),
    "listing": (lambda s, tmp: s.listing(), ""),
    "download": (lambda s, tmp: s.download("shard-000001.tar", tmp / "x.tar"), "shard-000001.tar"),
    "bucket_exists": (lambda s, tmp: s.bucket_exists(), ""),
    "upload": (lambda s, tmp: s.upload(tmp / "x.tar", "shard-000002.tar"), "shard-000002.tar"),
    "write": (lambda s, tmp: s.write("a.json", b"{}"), "a.json"),
    "create": (lambda s, tmp: s.create(".mixshard-lock", b"{}"), ".mixshard-lock"),
    "remove": (lambda s, tmp: s.remove("b.json"), "b.json"),
    "sha256": (lambda s, tmp: s.sha256("shard-000003.tar"), "shard-000003.tar"),
    "tag": (lambda s, tmp: s.tag("shard-000004.tar"), "shard-000004.tar"),
}


@pytest.mark.parametrize("method", sorted(CALLS))
def test_every_store_call_that_fails_is_one_line_naming_the_object(method, tmp_path):
    (tmp_path / "x.tar").write_bytes(b"x" * 10)
    call, name = CALLS[method]
    store = failing_store(ConnectionResetError("connection reset by peer"))
    with pytest.raises(ShardError) as err:
        call(store, tmp_path)
    assert str(err.value) == (
        f"cannot reach {store.url}/{name}: ConnectionResetError: connection reset by peer"
    )
    assert err.value.__cause__ is None and err.value.__suppress_context__


class ReadTimeoutError(Exception):
    """Named as botocore names its read timeout (not a TimeoutError subclass)."""


@pytest.mark.parametrize("exc", [TimeoutError("timed out"), ReadTimeoutError("read")])
def test_a_store_that_does_not_answer_is_named_with_the_timeout(exc):
    store = failing_store(exc)
    with pytest.raises(ShardError) as err:
        store.read("index.json")
    assert str(err.value) == (
        f"{store.url}/index.json did not answer within 60 s: check the endpoint or network"
    )


def test_denied_and_missing_are_told_apart_from_other_failures():
    assert describe(PermissionError("403"), "s3://b/p/x") == (
        "access to s3://b/p/x was denied: check the credentials (for S3, AWS_ACCESS_KEY_ID / "
        "AWS_PROFILE; for GCS, GOOGLE_APPLICATION_CREDENTIALS) and the bucket's permissions"
    )
    assert describe(FileNotFoundError("x"), "s3://b/p/x") == (
        "s3://b/p/x does not exist: check the bucket and prefix (and that the pack was uploaded)"
    )
    assert describe(OSError(5, "I/O error"), "s3://b/p/x") == (
        "cannot reach s3://b/p/x: OSError: [Errno 5] I/O error"
    )


def test_a_missing_prefix_lists_empty_and_removing_nothing_is_no_error():
    store = memory_store()
    assert repr(store) == f"Store({store.url!r})"
    assert store.listing() == {}
    store.remove("never-there")
    store.write("a.json", b"{}")
    assert store.listing() == {"a.json": 2}
    store.remove("a.json")
    assert store.listing() == {} and store.size("a.json") is None


class FailingOne:
    """The file system of `store` with its call `name` failing with `exc`."""

    def __init__(self, store: Store, name: str, exc: BaseException) -> None:
        self.fs, self.name, self.broken = store.fs, name, Failing(exc)

    def __getattr__(self, name: str):
        return getattr(self.broken if name == self.name else self.fs, name)


@pytest.mark.parametrize("call", ["info", "cat_file"])  # the size asked, then the bytes read
def test_a_manifest_that_cannot_be_read_names_the_failure(call):
    store = memory_store()
    store.write("index.json", b"{}")
    store.fs = FailingOne(store, call, ConnectionRefusedError("refused"))
    with pytest.raises(ManifestError) as err:
        load_manifest(store)
    assert str(err.value) == (
        f"cannot read the manifest: cannot reach {store.url}/index.json: "
        "ConnectionRefusedError: refused"
    )


def test_a_manifest_larger_than_a_manifest_may_be_is_refused(monkeypatch):
    import mixshard.core.stores as stores

    monkeypatch.setattr(stores, "MAX_MANIFEST_BYTES", 4)
    store = memory_store()
    store.write("index.json", b"{ }  ")
    with pytest.raises(ManifestError) as err:
        load_manifest(store)
    assert str(err.value) == f"{store.url}/index.json is 5 bytes, more than a manifest may be"


def test_a_protocol_fsspec_does_not_know_or_cannot_load_is_one_line(monkeypatch):
    with pytest.raises(MixshardError) as err:
        Store("nosuchproto://b/p")
    assert str(err.value) == "nosuchproto://b/p: Protocol not known: nosuchproto"

    import fsspec.core

    def no_gcsfs(url, **options):
        raise ImportError("No module named 'gcsfs'", name="gcsfs")

    monkeypatch.setattr(fsspec.core, "url_to_fs", no_gcsfs)
    with pytest.raises(MixshardError) as err:
        Store("gs://b/p")
    assert str(err.value) == (
        "gs://b/p: gs:// needs a package that is not installed (gcsfs): pip install 'mixshard[gcs]'"
    )

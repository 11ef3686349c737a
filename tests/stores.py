"""An S3 server on 127.0.0.1 for the tests (moto's), and a fresh bucket per test.

The server runs in the test process for the whole session; its endpoint and made-up
credentials are set in the environment the way every AWS client reads them, so mixshard (and
any process a test starts) reaches it exactly as it would a real store.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any

import pytest

_names = itertools.count()
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` set in the environment (of this process and those it starts), then put back."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def fail_index_upload(monkeypatch: Any) -> Callable[[], None]:
    """Make `Store.upload` of `index.json` fail (the shards and journals still go up), as a
    pack killed just before its end; returns what undoes it."""
    from mixshard.core.errors import ShardError
    from mixshard.core.stores import Store

    real = Store.upload

    def no_index(self: Store, local: Any, name: str) -> None:
        if name == "index.json":
            raise ShardError("injected")
        real(self, local, name)

    monkeypatch.setattr(Store, "upload", no_index)
    return lambda: monkeypatch.setattr(Store, "upload", real)


def pack_all_but_index(src: Any, url: str, monkeypatch: Any, **args: Any) -> None:
    """Pack `src` into `url` as a run killed just before its end: every shard and its journal
    are uploaded, `index.json` is not."""
    from mixshard import pack
    from mixshard.core.errors import ShardError

    undo = fail_index_upload(monkeypatch)
    with pytest.raises(ShardError, match="injected"):
        pack(src, url, **args)
    undo()


def new_bucket(protocol: str) -> str:
    """`PROTOCOL://NAME` of a new, empty bucket on the test server of `protocol`."""
    import fsspec

    name = f"test-{os.getpid()}-{next(_names)}"
    fsspec.filesystem(protocol, skip_instance_cache=True).mkdir(name)
    return f"{protocol}://{name}"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """`http://127.0.0.1:PORT` of a moto S3 server, set as `AWS_ENDPOINT_URL` (with test
    credentials) for the session; the tests that use it skip when the extra is missing."""
    pytest.importorskip("s3fs", reason="the s3 extra is not installed (pip install 'mixshard[s3]')")
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    from helpers import free_port

    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with environment({**S3_ENV, "AWS_ENDPOINT_URL": endpoint}):
        try:
            yield endpoint
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """`s3://NAME` of a new, empty bucket on the test server."""
    return new_bucket("s3")


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[str]:
    """`http://127.0.0.1:PORT` of a GCS emulator (gcp-storage-emulator, in memory), set as
    `STORAGE_EMULATOR_HOST` (where gcsfs looks for one) for the session."""
    # gcsfs's zonal-bucket support asks a gRPC API first, which an emulator does not have
    # (set before gcsfs is imported, here and in the processes the tests start)
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    pytest.importorskip("gcsfs", reason="the gcs extra is missing: pip install 'mixshard[gcs]'")
    server_mod = pytest.importorskip(
        "gcp_storage_emulator.server", reason="gcp-storage-emulator is not installed"
    )
    import logging

    from helpers import free_port

    # the emulator logs every request, gcsfs a warning per bucket it cannot classify offline
    for name in ("gcp_storage_emulator", "gcsfs"):
        logging.getLogger(name).setLevel(logging.ERROR)
    _honour_if_generation_match(server_mod)
    port = free_port()
    server = server_mod.create_server("127.0.0.1", port, in_memory=True)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # no credentials: fsspec's own setting (`FSSPEC_GCS_TOKEN`, read at import by each process;
    # this one's fsspec may be imported already), as a user of an emulator sets it
    import fsspec.config

    fsspec.config.conf.setdefault("gcs", {})["token"] = "anon"
    with environment({"STORAGE_EMULATOR_HOST": endpoint, "FSSPEC_GCS_TOKEN": "anon"}):
        try:
            yield endpoint
        finally:
            fsspec.config.conf["gcs"].pop("token", None)
            server.stop()


@pytest.fixture
def gcs_bucket(gcs_endpoint: str) -> str:
    """`gs://NAME` of a new, empty bucket on the emulator."""
    return new_bucket("gs")


def _honour_if_generation_match(server_mod: object) -> None:
    """GCS refuses an upload with `ifGenerationMatch=0` onto an existing object (HTTP 412);
    the emulator ignores preconditions. Its upload handler is wrapped to answer as GCS does,
    so the marker lock's exclusive write is tested as it works on GCS."""
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    def insert(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        if request.query.get("ifGenerationMatch") == ["0"]:
            name = request.query.get("name", [None])[0] or request.data["meta"].get("name")
            try:
                storage.get_file_obj(request.params["bucket_name"], name)
            except NotFound:
                pass
            else:
                response.status = HTTPStatus.PRECONDITION_FAILED
                response.json({"error": {"code": 412, "message": "conditionNotMet"}})
                return None
        return objects.insert(request, response, storage, *args, **kwargs)

    for _, handlers in server_mod.HANDLERS:  # type: ignore[attr-defined]
        for method, handler in list(handlers.items()):
            if handler is objects.insert:
                handlers[method] = insert

"""An S3 server on 127.0.0.1 for the tests (moto's), and a fresh bucket per test.

The server runs in the test process for the whole session; its endpoint and made-up
credentials are set in the environment the way every AWS client reads them, so mixshard (and
any process a test starts) reaches it exactly as it would a real store.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

_names = itertools.count()
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


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
    saved = {k: os.environ.get(k) for k in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL=endpoint)
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """`s3://NAME` of a new, empty bucket on the test server."""
    import s3fs

    name = f"test-{os.getpid()}-{next(_names)}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
    return f"s3://{name}"

"""Fixtures of the object-storage tests: real S3 servers on loopback, one bucket per test.

Each server (SeaweedFS, moto) starts once per session; every object-storage test runs
against both. Credentials reach the code under test through the standard AWS
variables, set for the test only (``monkeypatch``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from episodata_core.testing.s3_server import SERVERS, S3Server, start_server

if TYPE_CHECKING:
    from collections.abc import Iterator

_BUCKET = "episodata-tests"
_PREFIXES = itertools.count()


@pytest.fixture(scope="session", params=SERVERS)
def s3_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[S3Server]:
    server = start_server(request.param, tmp_path_factory.mktemp(request.param))
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Bucket:
    """A bucket on a running server and a prefix of this test's own in it.

    SeaweedFS grows several volumes per bucket, so the tests share one bucket per
    server and each takes a fresh prefix.
    """

    server: S3Server
    name: str
    prefix: str

    def url(self, name: str = "data") -> str:
        return f"s3://{self.name}/{self.prefix}/{name}"

    @property
    def options(self) -> dict[str, object]:
        return {"endpoint": self.server.endpoint, "retries": 2}


@pytest.fixture
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    for name, value in s3_server.environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    if _BUCKET not in s3_server.buckets:
        s3_server.create_bucket(_BUCKET)
    return Bucket(s3_server, _BUCKET, f"test-{next(_PREFIXES)}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the moto runs of modules with ``SLOW_ON_MOTO = True`` as slow.

    Their SeaweedFS runs stay in the default run; together they keep its cost to about
    a minute on a two-core machine.
    """
    for item in items:
        module = getattr(item, "module", None)
        callspec = getattr(item, "callspec", None)
        if (
            getattr(module, "SLOW_ON_MOTO", False)
            and callspec is not None
            and callspec.params.get("s3_server") == "moto"
        ):
            item.add_marker(pytest.mark.slow)

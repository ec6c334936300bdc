"""The server stops in the middle of a write: a clear error, nothing committed half."""

from __future__ import annotations

import time

import pytest
from _s3_helpers import SCHEMA, assert_same_episodes, episodes, oracle

from episodata_core import _shared_writer
from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError, StorageError
from episodata_core.testing.s3_server import start_server

LEASE = 2.0
# a server of its own, killed and restarted (SeaweedFS takes seconds to serve reads
# again): about half a minute on two cores, so under -m slow
pytestmark = pytest.mark.slow


@pytest.fixture
def own_server(tmp_path, monkeypatch):
    """A SeaweedFS of this test's own, which it kills and restarts."""
    server = start_server("seaweedfs", tmp_path / "seaweedfs")
    for name, value in server.environment.items():
        monkeypatch.setenv(name, value)
    server.create_bucket("stops")
    yield server
    server.stop()


def test_a_server_that_stops_mid_write_leaves_the_last_commit_and_the_next_writer_recovers(
    own_server,
):
    url = "s3://stops/data"
    options = {"retries": 1, "lease_seconds": LEASE}
    items = episodes(7)
    writer = Dataset.create(SCHEMA, url, storage_options=options)
    writer.add_episodes(items[:3])
    writer.flush()
    writer.add_episodes(items[3:6])
    own_server.kill()
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"s3://stops/data.*cannot be reached"):
        writer.flush()
    assert time.monotonic() - started < 20  # bounded retries, then the error
    # the writer is gone as a dead process would be: nothing flushed, nothing closed
    _shared_writer.abandon(writer.location)
    died = time.monotonic()
    own_server.restart()
    # a restarted SeaweedFS answers 500 for a few seconds while its volumes register:
    # the default retries ride that out
    options = {"lease_seconds": LEASE, "retries": 8}
    reader = Dataset.open(url, storage_options=options, read_only=True)
    assert_same_episodes(reader, oracle(items[:3]))
    assert reader.backend.verify() == []
    reader.close()
    # the lease the stopped writer could not give back expires, then the next one writes
    if time.monotonic() - died < LEASE * 0.5:
        with pytest.raises(DatasetStateError, match="being written by"):
            Dataset.open(url, storage_options=options).add_episode(items[3])
    time.sleep(max(0.0, LEASE + 0.2 - (time.monotonic() - died)))
    again = Dataset.open(url, storage_options=options)
    again.add_episodes(items[3:7])
    again.close()
    final = Dataset.open(url, storage_options=options, read_only=True)
    assert_same_episodes(final, oracle(items))
    final.close()

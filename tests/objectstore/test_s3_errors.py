"""Clear one-line errors, with nothing written, for every predictable object-storage fault."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from _s3_helpers import SCHEMA, episodes

from episodata_core import _shared_writer, location
from episodata_core._objectstore import Lease, ObjectKeyValue
from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError, StorageError
from episodata_core.testing.s3_server import free_port


def _objects(bucket, name="data"):
    """Every key under a test's location, read with a client of its own (botocore)."""
    import botocore.session

    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=bucket.server.endpoint, region_name="us-east-1"
    )
    prefix = f"{bucket.prefix}/{name}/"
    listed = client.list_objects_v2(Bucket=bucket.name, Prefix=prefix)
    return sorted(item["Key"][len(prefix) :] for item in listed.get("Contents", []))


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ftp://host/data", "unknown scheme 'ftp://'"),
        ("s3:///data", "no bucket"),
        ("s3://bucket/a/../b", "'..'"),
        ("s3://bucket/data?x=1", "query"),
    ],
)
def test_a_bad_url_is_refused_naming_what_is_wrong(url, fragment, tmp_path):
    with pytest.raises(StorageError, match=re.escape(fragment)):
        Dataset.create(SCHEMA, url)
    with pytest.raises(StorageError, match=r"scheme|bucket|'\.\.'|query"):
        Dataset.open(url)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"endpiont": "http://x"}, "storage option 'endpiont': Extra inputs"),
        ({"retries": -1}, "storage option 'retries'.*got -1"),
        ({"anonymous": "maybe"}, "storage option 'anonymous'"),
        ({"endpoint": "localhost:9000"}, "storage option 'endpoint': expected an http"),
        ({"cache_dir": "/tmp/x"}, "storage option 'cache_dir'"),
    ],
)
def test_bad_storage_options_name_the_option(options, fragment):
    with pytest.raises(StorageError, match=fragment):
        Dataset.create(SCHEMA, "s3://bucket/data", storage_options=options)


def test_storage_options_for_a_local_folder_are_refused(tmp_path):
    with pytest.raises(StorageError, match="local folder"):
        Dataset.create(SCHEMA, str(tmp_path / "d"), storage_options={"region": "eu-west-1"})
    assert not (tmp_path / "d").exists()


def test_writing_to_http_is_refused_and_nothing_is_sent():
    # no server listens there: the refusal comes before any request
    url = f"http://127.0.0.1:{free_port()}/datasets/run"
    with pytest.raises(StorageError, match="read-only"):
        Dataset.create(SCHEMA, url)
    with pytest.raises(StorageError, match="read-only"):
        Dataset.from_episodes(episodes(2), SCHEMA, url)


def test_a_missing_bucket_is_named(bucket):
    url = "s3://no-such-bucket-here/data"
    with pytest.raises(StorageError, match="'no-such-bucket-here' does not exist"):
        Dataset.from_episodes(episodes(2), SCHEMA, url, storage_options=bucket.options)
    with pytest.raises((StorageError, DatasetStateError), match="no-such-bucket-here"):
        Dataset.open(url, storage_options=bucket.options)


def test_wrong_credentials_are_refused(bucket, monkeypatch):
    if bucket.server.name == "moto":
        pytest.skip("moto accepts any credentials")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(StorageError, match=r"access denied.*AWS_ACCESS_KEY_ID"):
        Dataset.from_episodes(episodes(2), SCHEMA, bucket.url(), storage_options=bucket.options)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", bucket.server.environment["AWS_SECRET_ACCESS_KEY"])
    assert _objects(bucket) == []


def test_an_unreachable_endpoint_is_named_after_bounded_retries(monkeypatch):
    endpoint = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    started = time.monotonic()
    with pytest.raises(StorageError, match=f"{endpoint} cannot be reached.*2 retries"):
        Dataset.open("s3://bucket/data", storage_options={"endpoint": endpoint, "retries": 2})
    assert time.monotonic() - started < 15


def test_a_second_writer_is_refused_naming_the_holder_and_its_age(bucket):
    writer = Dataset.create(SCHEMA, bucket.url(), storage_options=bucket.options)
    writer.add_episodes(episodes(2))
    other = Lease(location.parse(bucket.url(), bucket.options))
    with pytest.raises(DatasetStateError, match=r"being written by .*pid \d+.*taken \d+ s ago"):
        other.acquire()
    assert not other.held
    writer.close()
    other.acquire()  # released at close: the next writer takes it at once
    other.release()


def test_a_damaged_object_is_named_by_verify(bucket):
    Dataset.from_episodes(episodes(6), SCHEMA, bucket.url(), storage_options=bucket.options).close()
    kv = ObjectKeyValue(location.parse(bucket.url(), bucket.options))
    chunk = next(key for key in kv.list("data/observation/state/c/"))
    data = bytearray(kv.get(chunk) or b"")
    data[len(data) // 2] ^= 0xFF
    kv.put(chunk, bytes(data))
    opened = Dataset.open(bucket.url(), storage_options=bucket.options, read_only=True)
    problems = opened.backend.verify()
    opened.close()
    assert len(problems) == 1
    assert f"{bucket.url()}/{chunk} (rows 0-" in problems[0]


def test_a_writer_whose_lease_expired_and_was_taken_over_writes_nothing(bucket):
    from episodata_core import _objectstore

    options = {**bucket.options, "lease_seconds": 1.0}
    items = episodes(4)
    writer = Dataset.create(SCHEMA, bucket.url(), storage_options=options)
    writer.add_episodes(items[:2])
    writer.flush()
    # the writer stalls (its renewals stop) past its lease; another writer takes over
    stalled = _objectstore._HELD[bucket.url()]
    stalled._stop.set()
    time.sleep(1.1)
    take_over = (
        "import json, sys; from episodata_core import location; "
        "from episodata_core._objectstore import Lease; "
        "Lease(location.parse(sys.argv[1], json.loads(sys.argv[2]))).acquire()"
    )
    subprocess.run([sys.executable, "-c", take_over, bucket.url(), json.dumps(options)], check=True)
    writer.add_episodes(items[2:])
    with pytest.raises(DatasetStateError, match="lease was lost"):
        writer.flush()
    _shared_writer.abandon(bucket.url())
    reader = Dataset.open(bucket.url(), storage_options=options, read_only=True)
    assert reader.num_episodes == 2  # nothing of the stalled writer's later work counts
    reader.close()

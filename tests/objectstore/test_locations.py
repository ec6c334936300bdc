"""Locations as URLs: parsing, canonical forms, TensorStore specs; no server needed."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from episodata_core import location
from episodata_core.errors import StorageError


def test_urls_parse_to_canonical_locations_and_kvstore_specs(monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    s3 = location.parse("s3://bucket//runs/cartpole/", {"region": "eu-west-1"})
    assert (s3.url, s3.bucket, s3.prefix) == (
        "s3://bucket/runs/cartpole",
        "bucket",
        "runs/cartpole/",
    )
    assert s3.kvstore_spec("data/x/") == {
        "driver": "s3",
        "bucket": "bucket",
        "path": "runs/cartpole/data/x/",
        "aws_region": "eu-west-1",
        "aws_credentials": {"type": "default"},
    }
    assert location.parse("s3://b/p", {"anonymous": True}).credentials_spec() == {
        "type": "anonymous"
    }
    monkeypatch.setenv("AWS_PROFILE", "lab")
    assert location.parse("s3://b/p").credentials_spec() == {"type": "profile", "profile": "lab"}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert location.parse("s3://b/p").kvstore_spec()["endpoint"] == "http://127.0.0.1:9000"
    gs = location.parse("gs://bucket/p")
    assert gs.kvstore_spec("a") == {"driver": "gcs", "bucket": "bucket", "path": "p/a"}
    web = location.parse("https://example.org/data/run")
    assert web.kvstore_spec("zarr.json") == {
        "driver": "http",
        "base_url": "https://example.org/data/run/zarr.json",
    }
    assert not web.writable


def test_local_paths_and_file_urls_stay_paths(tmp_path):
    assert location.normalize(str(tmp_path / "d")) == str(tmp_path / "d")
    assert location.normalize(f"file://{tmp_path}/d") == str(tmp_path / "d")
    assert not location.is_remote(str(tmp_path))
    assert location.parse(str(tmp_path)).kvstore_spec("x") == {
        "driver": "file",
        "path": f"{tmp_path}/x",
    }
    assert isinstance(location.normalize("~/x"), str)
    assert location.normalize("~/x") == str(Path("~/x").expanduser())


def test_a_url_carries_its_options_through_pickle():
    url = location.normalize("s3://b/p", {"endpoint": "http://127.0.0.1:1", "retries": 1})
    assert isinstance(url, location.Url)
    back = pickle.loads(pickle.dumps(url))
    assert back == "s3://b/p"
    assert back.location.options.endpoint == "http://127.0.0.1:1"
    assert back.location.options.retries == 1


def test_storage_option_pairs_from_the_command_line():
    assert location.options_from_pairs(["endpoint=http://h:1", "anonymous=true"]) == {
        "endpoint": "http://h:1",
        "anonymous": "true",
    }
    assert location.parse("s3://b/p", {"anonymous": "true"}).options.anonymous is True
    with pytest.raises(StorageError, match="expected KEY=VALUE"):
        location.options_from_pairs(["endpoint"])

"""``episodata`` verbs on S3 URLs, and read-only datasets over plain HTTP."""

from __future__ import annotations

import functools
import http.server
import threading

import pytest
from _s3_helpers import SCHEMA, assert_same_episodes, episodes, oracle

from episodata_core.cli import main
from episodata_core.dataset import Dataset
from episodata_core.errors import StorageError


def test_cli_copy_to_s3_and_back_with_storage_options(bucket, tmp_path, capsys, monkeypatch):
    items = episodes(8)
    Dataset.from_episodes(items, SCHEMA, str(tmp_path / "local")).close()
    # the endpoint comes from the option only
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    option = ["--storage-option", f"endpoint={bucket.server.endpoint}"]
    assert main(["copy", "-q", str(tmp_path / "local"), bucket.url(), *option]) == 0
    assert main(["verify", bucket.url(), *option]) == 0
    assert capsys.readouterr().out.startswith(f"OK {bucket.url()}")
    assert main(["info", bucket.url(), *option]) == 0
    assert "8 finalized" in capsys.readouterr().out
    assert main(["copy", "-q", bucket.url(), str(tmp_path / "back"), *option]) == 0
    back = Dataset.open(str(tmp_path / "back"), read_only=True)
    assert_same_episodes(back, oracle(items))
    back.close()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["info", "ftp://host/x"], "unknown scheme 'ftp://'"),
        (["info", "s3://b/x", "--storage-option", "endpoint"], "expected KEY=VALUE"),
        (["info", "s3://b/x", "--storage-option", "colour=red"], "storage option 'colour'"),
    ],
)
def test_cli_errors_are_one_line(argv, fragment, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert fragment in err


@pytest.fixture
def web_root(tmp_path):
    """A static file server on 127.0.0.1 serving ``tmp_path / "www"``."""
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_dataset_on_a_web_server_reads_like_the_local_one(web_root):
    root, base = web_root
    items = episodes(10)
    Dataset.from_episodes(items, SCHEMA, str(root / "published")).close()
    opened = Dataset.open(f"{base}/published", read_only=True)
    assert opened.location == f"{base}/published"
    assert_same_episodes(opened, oracle(items))
    assert opened.backend.verify() == []
    batch = next(iter(opened.segment_stream(4, batch_size=8, seed=0)))
    assert batch.mask.shape == (8, 4)
    opened.close()
    writable = Dataset.open(f"{base}/published")
    with pytest.raises(StorageError, match="read-only"):
        writable.add_episode(items[0])
    assert writable.num_episodes == 10
    writable.close()


def test_an_s3_dataset_copied_to_a_web_server_reads_the_same(bucket, web_root):
    root, base = web_root
    items = episodes(5)
    on_s3 = Dataset.from_episodes(items, SCHEMA, bucket.url(), storage_options=bucket.options)
    on_s3.copy_to(str(root / "mirror")).close()
    on_s3.close()
    opened = Dataset.open(f"{base}/mirror", read_only=True)
    assert_same_episodes(opened, oracle(items))
    opened.close()

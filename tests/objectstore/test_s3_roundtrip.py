from __future__ import annotations

from _s3_helpers import SCHEMA, assert_same_episodes, episodes, oracle

from episodata_core.dataset import Dataset


def test_from_episodes_then_open_reads_the_same_episodes(bucket):
    items = episodes(12)
    written = Dataset.from_episodes(items, SCHEMA, bucket.url(), storage_options=bucket.options)
    assert written.location == bucket.url()
    written.close()
    back = Dataset.open(bucket.url(), storage_options=bucket.options, read_only=True)
    assert_same_episodes(back, oracle(items))
    back.close()

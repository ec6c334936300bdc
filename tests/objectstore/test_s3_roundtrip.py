"""Datasets on a real S3 server: bulk and online writes, pinned readers, copies, sampling."""

from __future__ import annotations

import numpy as np
import pytest
from _s3_helpers import SCHEMA, assert_same_episodes, episode, episodes, oracle

from episodata_core.dataset import Dataset


def test_from_episodes_then_open_reads_the_same_episodes(bucket):
    items = episodes(12)
    written = Dataset.from_episodes(items, SCHEMA, bucket.url(), storage_options=bucket.options)
    assert written.location == bucket.url()
    written.close()
    back = Dataset.open(bucket.url(), storage_options=bucket.options, read_only=True)
    assert_same_episodes(back, oracle(items))
    assert back.backend.verify() == []
    back.close()


def test_online_writes_are_committed_at_flush_and_readers_pin_a_generation(bucket):
    items = episodes(7)
    writer = Dataset.create(SCHEMA, bucket.url(), storage_options=bucket.options)
    for item in items[:4]:
        writer.add_episode(item)
    writer.flush()
    reader = Dataset.open(bucket.url(), storage_options=bucket.options, read_only=True)
    assert_same_episodes(reader, oracle(items[:4]))
    for item in items[4:6]:
        writer.add_episode(item)
    # step by step, like a recorder
    last = items[6]
    live = writer.new_episode({"state": last["initial_observation"]["state"]})
    for t in range(len(last["actions"])):
        live.add_step(
            {
                "actions": last["actions"][t],
                "rewards": last["rewards"][t],
                "observations": {"state": last["observations"]["state"][t]},
            }
        )
    writer.flush()  # an ongoing episode is committed as far as it goes
    live.end(terminated=last["terminated"])
    writer.flush()
    # the reader still sees the generation it pinned, whole, until it refreshes
    assert_same_episodes(reader, oracle(items[:4]))
    reader.refresh()
    assert_same_episodes(reader, oracle(items))
    writer.close()
    reader.close()
    again = Dataset.open(bucket.url(), storage_options=bucket.options, read_only=True)
    assert_same_episodes(again, oracle(items))
    again.close()


def test_copy_local_to_s3_and_back(bucket, tmp_path):
    items = episodes(9)
    local = Dataset.from_episodes(items, SCHEMA, str(tmp_path / "local"))
    remote = local.copy_to(bucket.url("copied"), storage_options=bucket.options)
    remote.close()
    local.close()
    source = Dataset.open(bucket.url("copied"), storage_options=bucket.options, read_only=True)
    back = source.copy_to(str(tmp_path / "back"))
    assert_same_episodes(back, oracle(items))
    assert_same_episodes(source, oracle(items))
    back.close()
    source.close()


def test_sampling_over_s3_matches_local(bucket, tmp_path):
    items = [episode(i, 20 + i) for i in range(8)]
    local = Dataset.from_episodes(items, SCHEMA, str(tmp_path / "local"))
    remote = local.copy_to(bucket.url(), storage_options=bucket.options)
    remote.close()
    opened = Dataset.open(bucket.url(), storage_options=bucket.options, read_only=True)
    for seed in range(3):
        want = next(iter(local.segment_stream(8, batch_size=16, seed=seed)))
        got = next(iter(opened.segment_stream(8, batch_size=16, seed=seed)))
        assert sorted(got.buffers) == sorted(want.buffers)
        for key, values in want.buffers.items():
            np.testing.assert_array_equal(got.buffers[key], values, err_msg=key)
        np.testing.assert_array_equal(got.mask, want.mask)
    local.close()
    opened.close()


def _record(writer, item):
    live = writer.new_episode({"state": item["initial_observation"]["state"]})
    for t in range(len(item["actions"])):
        live.add_step(
            {
                "actions": item["actions"][t],
                "rewards": item["rewards"][t],
                "observations": {"state": item["observations"]["state"][t]},
            }
        )
    return live


def test_an_ongoing_episode_below_finalized_ones_is_read_once_it_ends(bucket):
    from episodata_core.errors import DatasetStateError

    items = episodes(2)
    writer = Dataset.create(SCHEMA, bucket.url(), storage_options=bucket.options)
    first, second = _record(writer, items[0]), _record(writer, items[1])
    second.end(terminated=items[1]["terminated"])
    writer.flush()
    reader = Dataset.open(bucket.url(), storage_options=bucket.options, read_only=True)
    assert reader.num_episodes == 2
    keys = list(SCHEMA.qualified_keys)
    rows = reader.backend.read_rows(1, 0, len(items[1]["actions"]) + 1, keys)
    want = oracle(items).backend.read_rows(1, 0, len(items[1]["actions"]) + 1, keys)
    for key in keys:
        np.testing.assert_array_equal(rows[key], want[key])
    with pytest.raises(DatasetStateError, match="staging log until it ends"):
        reader.backend.read_rows(0, 0, 1, keys)
    first.end(terminated=items[0]["terminated"])
    writer.flush()
    reader.refresh()
    assert_same_episodes(reader, oracle(items))
    writer.close()
    reader.close()

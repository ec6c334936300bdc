"""Reads that are views of storage are read-only; writable arrays are private copies.

The oracle is the episodes the tests write, kept as plain arrays: after every attempted
write through a read, each episode still reads back exactly as written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from episodata import Dataset


def make_episode(k: int, length: int) -> dict[str, Any]:
    obs = np.arange((length + 1) * 3, dtype=np.float32).reshape(length + 1, 3) + 100 * k
    return {
        "initial_observation": obs[0],
        "observations": obs[1:],
        "actions": np.arange(length, dtype=np.int64) + 10 * k,
        "rewards": np.full(length, k, dtype=np.float32),
        "terminated": True,
    }


@pytest.fixture(params=["memory", "npz_directory"])
def stored(request: Any, tmp_path: Any) -> Any:
    """3 finalized episodes and an ongoing one, with the arrays they were written from."""
    episodes = [make_episode(k, n) for k, n in enumerate((5, 8, 2))]
    path = None if request.param == "memory" else tmp_path / "ds"
    dataset = Dataset.from_episodes(episodes, path=path, backend=request.param)
    ongoing = make_episode(3, 4)
    writer = dataset.new_episode(ongoing["initial_observation"])
    for t in range(4):
        step = {"observation": ongoing["observations"][t], "action": ongoing["actions"][t]}
        writer.add_step({**step, "reward": ongoing["rewards"][t]})
    yield dataset, [*episodes, ongoing]
    dataset.close()


def assert_as_written(dataset: Dataset, episodes: list[dict[str, Any]]) -> None:
    assert dataset.num_episodes == len(episodes)
    for index, want in enumerate(episodes):
        episode = dataset.episode(index)
        assert len(episode) == len(want["actions"])
        got = episode.read()
        np.testing.assert_array_equal(got.obs[0], want["initial_observation"])
        np.testing.assert_array_equal(got.next_obs, want["observations"])
        np.testing.assert_array_equal(got.action, want["actions"])
        np.testing.assert_array_equal(got.reward, want["rewards"])


def test_episode_reads_refuse_numpy_writes(stored: Any) -> None:
    dataset, episodes = stored
    reads = [
        dataset.episode(0).read(),
        dataset.episode(1).segment(2, 6),
        dataset.episode(3).read(),  # ongoing: views of the writer's own buffers
        dataset.episode(2).step(1),
    ]
    for read in reads:
        for array in (read.obs, read.next_obs, read.all_obs, read.action, read.reward):
            if array.ndim == 0:
                continue  # a single step's reward is a NumPy scalar, immutable anyway
            assert not array.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                array += 1
        assert np.shares_memory(read.all_obs, read.next_obs)
    assert_as_written(dataset, episodes)


def test_sampled_batches_are_writable_private_copies(stored: Any) -> None:
    dataset, episodes = stored
    stream = dataset.segment_stream(sequence_length=2, batch_size=8, seed=0, prefetch=0)
    batches = [
        stream.sample(),
        dataset.segments(sequence_length=3).__getitems__([0, 1, 2]),
        dataset.segments(sequence_length=3, pad="suffix")[0],
    ]
    transitions = dataset.sample_transitions(batch_size=8, seed=1)
    for batch in batches:
        assert np.shares_memory(batch.obs, batch.next_obs)  # still one buffer, two views
    for batch in [*batches, transitions]:
        for buffer in batch.buffers.values():
            assert buffer.flags.writeable
            buffer += 1  # a private copy: the dataset does not change
    assert_as_written(dataset, episodes)


def test_episode_table_is_read_only(stored: Any) -> None:
    dataset, episodes = stored
    table = dataset.backend.episode_table()
    for column in (table.length, table.terminated, table.truncated, table.ongoing):
        with pytest.raises(ValueError, match="read-only"):
            column[0] = 0
    assert_as_written(dataset, episodes)

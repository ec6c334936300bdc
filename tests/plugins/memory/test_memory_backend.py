from __future__ import annotations

import numpy as np

from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import BackendTests, example_rows
from episodata_memory import MemoryBackend, MemoryOptions


class TestMemoryBackend(BackendTests[MemoryBackend]):
    backend_cls = MemoryBackend


def _state_schema() -> DatasetSchema:
    return DatasetSchema([FieldSpec("state", shape=(2,), dtype="float32")])


def test_appends_grow_capacity_geometrically() -> None:
    backend = MemoryBackend.create(_state_schema(), None, MemoryOptions(initial_rows=1))
    rows = example_rows(backend.schema, 1, seed=0)
    episode = backend.start_episode(rows)
    buffer = backend._ongoing_rows[episode]["observation/state"]
    reallocations = 0
    for _ in range(10_000):
        before = buffer.data
        backend.append_rows(episode, rows)
        reallocations += buffer.data is not before
    # doubling: about log2(10_000) reallocations, not one per append
    assert reallocations <= 15


def test_reading_an_ongoing_episode_returns_views_not_copies() -> None:
    backend = MemoryBackend.create(_state_schema(), None, MemoryOptions())
    rows = example_rows(backend.schema, 50, seed=1)
    episode = backend.start_episode(rows)
    read = backend.read_rows(episode, 0, 50, ["observation/state"])["observation/state"]
    buffer = backend._ongoing_rows[episode]["observation/state"].data
    assert np.shares_memory(read, buffer)
    assert not read.flags.writeable


def test_finalized_reads_are_read_only_views() -> None:
    backend = MemoryBackend.create(_state_schema(), None, MemoryOptions())
    backend.add_episode(example_rows(backend.schema, 5, seed=2), terminated=True, truncated=False)
    read = backend.read_rows(0, 0, 5, ["observation/state"])["observation/state"]
    assert np.shares_memory(read, backend._rows["observation/state"].data)
    assert not read.flags.writeable


def test_memory_backend_refuses_a_path() -> None:
    import pytest

    from episodata_core.errors import SchemaError

    with pytest.raises(SchemaError, match="takes no path"):
        MemoryBackend.create(_state_schema(), "somewhere", MemoryOptions())

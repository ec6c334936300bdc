from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodata_core.errors import SchemaError
from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import BackendTests, example_rows
from episodata_memory import MemoryBackend, MemoryOptions, _gather_windows


class TestMemoryBackend(BackendTests[MemoryBackend]):
    backend_cls = MemoryBackend


def _state_schema() -> DatasetSchema:
    return DatasetSchema([FieldSpec("state", shape=(2,), dtype="float32")])


def test_appends_grow_capacity_geometrically() -> None:
    backend = MemoryBackend.create(_state_schema(), None, MemoryOptions(initial_rows=1))
    rows = example_rows(backend.schema, 1, seed=0)
    episode = backend.start_episode(rows)
    buffers = backend._ongoing_rows[episode].buffers
    reallocations = 0
    for _ in range(10_000):
        before = buffers["observation/state"]
        backend.append_rows(episode, rows)
        reallocations += buffers["observation/state"] is not before
    # doubling: about log2(10_000) reallocations, not one per append
    assert reallocations <= 15


def test_reading_an_ongoing_episode_returns_views_not_copies() -> None:
    backend = MemoryBackend.create(_state_schema(), None, MemoryOptions())
    rows = example_rows(backend.schema, 50, seed=1)
    episode = backend.start_episode(rows)
    read = backend.read_rows(episode, 0, 50, ["observation/state"])["observation/state"]
    buffer = backend._ongoing_rows[episode].buffers["observation/state"]
    assert np.shares_memory(read, buffer)
    assert not read.flags.writeable


def test_finalized_reads_are_read_only_views() -> None:
    backend = MemoryBackend.create(_state_schema(), None, MemoryOptions())
    backend.add_episode(example_rows(backend.schema, 5, seed=2), terminated=True, truncated=False)
    read = backend.read_rows(0, 0, 5, ["observation/state"])["observation/state"]
    assert np.shares_memory(read, backend._rows["observation/state"].data)
    assert not read.flags.writeable


def test_memory_backend_refuses_a_path() -> None:
    with pytest.raises(SchemaError, match="takes no path"):
        MemoryBackend.create(_state_schema(), "somewhere", MemoryOptions())


# -- the window gather --------------------------------------------------------------------

_DTYPES = ["bool", "uint8", "int16", "float32", "float64", "complex64"]


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(_DTYPES),
    row_shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
    num_rows=st.integers(1, 9),
    extra_rows=st.integers(0, 30),
    batch=st.integers(0, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_window_gather_equals_row_by_row_indexing(
    dtype: str,
    row_shape: tuple[int, ...],
    num_rows: int,
    extra_rows: int,
    batch: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    total = num_rows + extra_rows
    data = rng.integers(0, 100, size=(total, *row_shape)).astype(dtype)
    first = rng.integers(0, total - num_rows + 1, size=batch, dtype=np.int64)
    got = _gather_windows(data, first, num_rows)
    want = np.zeros((batch, num_rows, *row_shape), dtype=dtype)
    for b, start in enumerate(first):  # the oracle: one row at a time
        for t in range(num_rows):
            want[b, t] = data[start + t]
    np.testing.assert_array_equal(got, want, strict=True)
    assert not np.shares_memory(got, data)  # a copy the caller may keep


def test_window_gather_reads_a_growable_prefix_without_touching_spare_capacity() -> None:
    backend = MemoryBackend.create(_state_schema(), None, MemoryOptions(initial_rows=64))
    rows = {"observation/state": np.arange(10, dtype=np.float32).reshape(5, 2)}
    backend.add_episode(rows, terminated=True, truncated=False)
    view = backend._rows["observation/state"].view()
    assert view.base is not None
    assert view.base.shape[0] > view.shape[0]  # spare rows exist
    got = _gather_windows(view, np.array([0, 1], dtype=np.int64), 4)
    np.testing.assert_array_equal(got[0], rows["observation/state"][0:4])
    np.testing.assert_array_equal(got[1], rows["observation/state"][1:5])


def _two_field_schema() -> DatasetSchema:
    return DatasetSchema(
        [
            FieldSpec("state", shape=(2,), dtype="float32"),
            FieldSpec("action", shape=(), dtype="int64", role="action"),
        ]
    )


def _stored(backend: MemoryBackend, episode: int) -> dict[str, np.ndarray]:
    length = int(backend.episode_table().length[episode])
    return {
        key: np.array(block)
        for key, block in backend.read_rows(
            episode, 0, length + 1, backend.schema.qualified_keys
        ).items()
    }


@pytest.mark.parametrize(
    ("state_rows", "action_rows"),
    [(1, 2), (2, 1), (3, 0), (2, 3)],  # one-row and several-row appends, either field longer
)
def test_an_append_whose_blocks_differ_in_length_is_refused_and_changes_nothing(
    state_rows: int, action_rows: int
) -> None:
    backend = MemoryBackend.create(_two_field_schema(), None, MemoryOptions())
    start = example_rows(backend.schema, 3, seed=4)
    episode = backend.start_episode(start)
    bad = {
        "observation/state": np.full((state_rows, 2), 9.0, np.float32),
        "action/action": np.full(action_rows, 9, np.int64),
    }
    with pytest.raises(SchemaError, match="one row count n shared by all fields"):
        backend.append_rows(episode, bad)
    assert int(backend.episode_table().length[episode]) == 2
    stored = _stored(backend, episode)
    for key, block in start.items():
        np.testing.assert_array_equal(stored[key], block)
    # the episode goes on as if the bad append never happened
    more = example_rows(backend.schema, 2, seed=5)
    backend.append_rows(episode, more)
    backend.finalize_episode(episode, terminated=True, truncated=False)
    stored = _stored(backend, episode)
    for key in start:
        np.testing.assert_array_equal(stored[key], np.concatenate([start[key], more[key]]))


def test_an_append_of_the_wrong_row_shape_is_refused_with_the_fields_shapes() -> None:
    backend = MemoryBackend.create(_two_field_schema(), None, MemoryOptions())
    episode = backend.start_episode(example_rows(backend.schema, 1, seed=6))
    bad = {
        "observation/state": np.zeros((1, 3), np.float32),
        "action/action": np.zeros(1, np.int64),
    }
    with pytest.raises(SchemaError, match=r"'observation/state': \('n', 2\)"):
        backend.append_rows(episode, bad)
    assert int(backend.episode_table().length[episode]) == 0


# -- append_step: a step's exact values, without [1, ...] rows ---------------------------

_STEP_DTYPES = ["float16", "float32", "float64", "int8", "int64", "uint64", "bool"]


def _exact_scalars(dtype: str) -> st.SearchStrategy[object]:
    """Python scalars that the step plan passes on as exact for a field of ``dtype``."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return st.booleans() | st.sampled_from([0, 1])
    if kind in "iu":
        info = np.iinfo(dtype)
        return st.booleans() | st.integers(int(info.min), int(info.max))
    largest = float(np.finfo(dtype).max)
    exact = 2 ** min(np.finfo(dtype).nmant + 1, 53)
    finite = st.floats(-largest, largest, width=64)
    specials = st.sampled_from([math.inf, -math.inf, math.nan, -0.0])
    return finite | specials | st.integers(-exact, exact) | st.booleans()


@settings(max_examples=300, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(_STEP_DTYPES))
def test_append_step_stores_what_append_rows_stores_for_the_same_values(
    data: st.DataObject, dtype: str
) -> None:
    schema = DatasetSchema(
        [
            FieldSpec("state", shape=(2,), dtype="float32"),
            FieldSpec("x", shape=(), dtype=dtype),
            FieldSpec("y", shape=(), dtype=dtype),
        ]
    )
    scalar = data.draw(_exact_scalars(dtype))
    numpy_scalar = np.dtype(dtype).type(data.draw(_exact_scalars(dtype)))
    state = np.array(data.draw(st.lists(st.floats(width=32), min_size=2, max_size=2)), np.float32)
    values = {"observation/state": state, "observation/x": scalar, "observation/y": numpy_scalar}
    # the oracle: the rows the generic path builds, through append_rows
    rows = {
        "observation/state": state[None],
        "observation/x": np.array(scalar, dtype=dtype, ndmin=1),
        "observation/y": np.array(numpy_scalar, dtype=dtype, ndmin=1),
    }
    stepped = MemoryBackend.create(schema, None, MemoryOptions())
    blocked = MemoryBackend.create(schema, None, MemoryOptions())
    start = example_rows(schema, 1, seed=7)
    for backend in (stepped, blocked):
        backend.start_episode(start)
    stepped.append_step(0, values)
    blocked.append_rows(0, rows)
    state[:] = 5.0  # the caller reuses its array: the stored row must not change
    got, want = _stored(stepped, 0), _stored(blocked, 0)
    for key in want:
        assert got[key].dtype == want[key].dtype
        assert got[key].tobytes() == want[key].tobytes(), key


def test_append_step_refuses_other_fields_and_changes_nothing() -> None:
    backend = MemoryBackend.create(_two_field_schema(), None, MemoryOptions())
    episode = backend.start_episode(example_rows(backend.schema, 1, seed=8))
    with pytest.raises(SchemaError, match="do not match the episode's fields"):
        backend.append_step(episode, {"observation/state": np.zeros(2, np.float32)})
    with pytest.raises(SchemaError, match=r"'observation/state': \('n', 2\)"):
        backend.append_step(
            episode, {"observation/state": np.zeros(3, np.float32), "action/action": 1}
        )
    assert int(backend.episode_table().length[episode]) == 0

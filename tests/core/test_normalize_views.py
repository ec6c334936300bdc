"""Joining the reset (or final) observation with the per-step ones: a view where possible.

The joined array must always equal ``np.concatenate`` of the two; it is a view only
when the buffer already holds the rows in order (an importer slicing one column).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.normalize import split_episode
from episodata_core.schema import DatasetSchema, FieldSpec


def _join(row: Any, rows: Any, *, prepend: bool) -> np.ndarray:
    if prepend:
        episode = {"initial_observation": row, "observations": rows}
    else:
        episode = {"observations": rows, "final_observation": row}
    return split_episode(episode, None).observation["observation"]


def _reference(row: Any, rows: Any, *, prepend: bool) -> np.ndarray:
    parts = [np.asarray(row)[None], np.asarray(rows)]
    return np.concatenate(parts if prepend else parts[::-1])


def test_rows_of_one_column_join_without_a_copy() -> None:
    column = np.arange(40, dtype=np.float32).reshape(10, 4)
    joined = _join(column[2], column[3:7], prepend=True)
    np.testing.assert_array_equal(joined, column[2:7])
    assert np.shares_memory(joined, column)
    assert not joined.flags.writeable  # the caller's buffer is never written through it
    final = _join(column[6], column[2:6], prepend=False)
    np.testing.assert_array_equal(final, column[2:7])
    assert np.shares_memory(final, column)


@pytest.mark.parametrize(
    ("row", "rows"),
    [
        pytest.param(lambda c: c[2], lambda c: c[4:7], id="a gap"),
        pytest.param(lambda c: c[2].copy(), lambda c: c[3:7], id="another buffer"),
        pytest.param(lambda c: c[7], lambda c: c[3:7], id="after, not before"),
        pytest.param(lambda c: c[2, :3], lambda c: c[3:7, 1:], id="other columns"),
    ],
)
def test_anything_else_is_copied(row: Any, rows: Any) -> None:
    column = np.arange(40, dtype=np.float32).reshape(10, 4)
    first, rest = row(column), rows(column)
    joined = _join(first, rest, prepend=True)
    np.testing.assert_array_equal(joined, _reference(first, rest, prepend=True))
    assert not np.shares_memory(joined, column)


def test_a_different_dtype_is_promoted_as_before() -> None:
    column = np.arange(12, dtype=np.float32).reshape(6, 2)
    joined = _join(column[0].astype(np.float64), column[1:4], prepend=True)
    assert joined.dtype == np.float64
    np.testing.assert_array_equal(joined, column[:4])


def test_random_slices_equal_concatenate() -> None:
    """Strided, reversed, image-shaped and empty slices: the join equals the reference."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, size=(64, 3, 4, 2), dtype=np.uint8)
    for _ in range(300):
        step = int(rng.choice([1, 2, -1, -3]))
        column = base[::step] if rng.random() < 0.7 else base[::step, :, ::2]
        s = int(rng.integers(0, len(column) - 1))
        n = int(rng.integers(0, len(column) - s))
        gap = int(rng.choice([0, 0, 0, 1]))
        prepend = bool(rng.random() < 0.5)
        if prepend:
            row, rows = column[s], column[s + 1 + gap : s + 1 + gap + n]
        else:
            rows, row = column[s : s + n], column[min(s + n + gap, len(column) - 1)]
        joined = _join(row, rows, prepend=prepend)
        np.testing.assert_array_equal(joined, _reference(row, rows, prepend=prepend))
        if gap == 0 and n and (prepend or s + n < len(column)):
            assert np.shares_memory(joined, base)


def test_the_stored_episode_equals_its_source_rows() -> None:
    schema = DatasetSchema(
        [
            FieldSpec("pixels", shape=(2, 3), dtype="uint8"),
            FieldSpec("action", shape=(), dtype="int64", role="action"),
        ]
    )
    pixels = np.arange(10 * 6, dtype=np.uint8).reshape(10, 2, 3)
    actions = np.arange(10)
    dataset = Dataset.create(schema)
    dataset.add_episodes(
        {
            "initial_observation": {"pixels": pixels[s]},
            "observations": {"pixels": pixels[s + 1 : s + 5]},
            "actions": actions[s : s + 4],
        }
        for s in (0, 5)
    )
    pixels[:] = 0  # the dataset holds its own rows, not views of the source
    for episode, s in zip(dataset, (0, 5), strict=True):
        expected = np.arange(10 * 6, dtype=np.uint8).reshape(10, 2, 3)[s : s + 5]
        np.testing.assert_array_equal(episode.read().all_obs.pixels, expected)

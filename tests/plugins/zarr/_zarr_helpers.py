"""Helpers shared by the zarr backend tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.schema import DatasetSchema, FieldSpec
from episodata_core.testing import example_rows, example_schema
from episodata_zarr import ZarrBackend, ZarrOptions

if TYPE_CHECKING:
    from pathlib import Path


def make_backend(folder: Path, schema: DatasetSchema | None = None, **options: Any) -> ZarrBackend:
    """A new writable backend (no manifest: backend-level tests need none)."""
    return ZarrBackend.create(schema or example_schema(), str(folder), ZarrOptions(**options))


def open_backend(folder: Path, *, writable: bool = False, **options: Any) -> ZarrBackend:
    return ZarrBackend.open(str(folder), ZarrOptions(**options), writable=writable)


def episodes(schema: DatasetSchema, lengths: list[int], seed: int = 0) -> list[dict[str, Any]]:
    """Rows of episodes of the given row counts; odd ones lack the optional field."""
    optional = tuple(spec.qualified_key for spec in schema if spec.optional)
    return [
        example_rows(schema, n, seed=seed + i, absent=optional if i % 2 else ())
        for i, n in enumerate(lengths)
    ]


def image_schema() -> DatasetSchema:
    return DatasetSchema(
        [
            FieldSpec("camera", shape=(3, 8, 8), dtype="uint8", layout="CHW"),
            FieldSpec("state", shape=(5,), dtype="float32"),
            FieldSpec("action", shape=(2,), dtype="float32", role="action"),
            FieldSpec("reward", shape=(), dtype="float32", role="reward"),
        ]
    )


def assert_rows_equal(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert sorted(actual) == sorted(expected)
    for key, values in expected.items():
        assert actual[key].dtype == values.dtype, key
        np.testing.assert_array_equal(actual[key], values, err_msg=key)


def rows_of(schema: DatasetSchema, episode: int) -> dict[str, Any]:
    """The full rows of episode ``episode`` in the crash and concurrency tests.

    Built from the id alone, so another process can check any prefix of them; every
    third episode lacks the optional field.
    """
    optional = tuple(spec.qualified_key for spec in schema if spec.optional)
    absent = optional if episode % 3 == 0 else ()
    return example_rows(schema, 2 + episode % 6, seed=1000 + episode, absent=absent)


def check_episode(backend: ZarrBackend, episode: int) -> None:
    """Finalized: all rows of :func:`rows_of`; ongoing: a prefix of them (the reset row at least)."""
    table = backend.episode_table()
    expected = rows_of(backend.schema, episode)
    count = int(table.length[episode]) + 1
    full = len(next(iter(expected.values())))
    if table.ongoing[episode]:
        assert 1 <= count <= full, (episode, count)
        expected = {key: value[:count] for key, value in expected.items()}
    else:
        assert count == full, (episode, count)
    stored = backend.read_rows(episode, 0, count, list(expected))
    assert_rows_equal(dict(stored), expected)

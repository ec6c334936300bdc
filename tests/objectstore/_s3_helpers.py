"""Episodes and an independent oracle for the object-storage tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from episodata_core.dataset import Dataset
from episodata_core.schema import DatasetSchema, FieldSpec

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(3,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def episode(seed: int, steps: int, **flags: Any) -> dict[str, Any]:
    """A bulk dict of ``steps`` steps whose values depend on ``seed`` only."""
    rng = np.random.default_rng(seed)
    return {
        "initial_observation": {"state": rng.normal(size=3).astype(np.float32)},
        "observations": {"state": rng.normal(size=(steps, 3)).astype(np.float32)},
        "actions": rng.integers(0, 5, size=steps),
        "rewards": rng.normal(size=steps).astype(np.float32),
        "terminated": bool(seed % 2),
        **flags,
    }


def episodes(count: int, first: int = 0) -> list[dict[str, Any]]:
    return [episode(first + i, 3 + (first + i) % 7) for i in range(count)]


def assert_same_episodes(actual: Dataset, expected: Dataset) -> None:
    """Every episode's rows and flags equal, read through each dataset's own backend."""
    want, got = expected.backend.episode_table(), actual.backend.episode_table()
    assert len(got) == len(want)
    np.testing.assert_array_equal(got.length, want.length)
    np.testing.assert_array_equal(got.terminated, want.terminated)
    np.testing.assert_array_equal(got.truncated, want.truncated)
    keys = list(expected.schema.qualified_keys)
    for index in range(len(want)):
        stop = int(want.length[index]) + 1
        a = actual.backend.read_rows(index, 0, stop, keys)
        b = expected.backend.read_rows(index, 0, stop, keys)
        for key in keys:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"episode {index} {key}")


def oracle(items: list[dict[str, Any]]) -> Dataset:
    """The same episodes in memory: the memory backend is the reference."""
    return Dataset.from_episodes(items, SCHEMA)


def big_episode(number: int) -> dict[str, Any]:
    """Episode ``number`` of the kill tests: 300 to 700 steps, from its number alone."""
    return episode(1000 + number, 300 + (number * 37) % 400)

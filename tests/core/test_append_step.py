"""Exact steps reach a backend's ``append_step``; every other step its ``append_rows``.

Spies on the real memory backend's two methods show which one a step took; the rows
stored either way are compared with a twin written through the generic path alone (a
step handed over as a read-only mapping proxy, which the plan never accepts).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata import Dataset, DatasetSchema, FieldSpec

if TYPE_CHECKING:
    import pytest

SCHEMA = DatasetSchema(
    [
        FieldSpec("observation", shape=(4,), dtype="float32"),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)


def steps() -> list[dict[str, Any]]:
    obs = np.arange(20, dtype=np.float32).reshape(5, 4)
    return [
        {"observations": obs[0], "actions": 1, "rewards": 0.5},  # exact: append_step
        {"observations": obs[1].tolist(), "actions": 0, "rewards": 1.0},  # a list: generic
        {"observations": obs[2], "actions": np.int64(1), "rewards": np.float32(2)},
        {"observations": obs[3], "actions": 1, "rewards": 1.0, "terminated": np.True_},
    ]


def spy(monkeypatch: pytest.MonkeyPatch, dataset: Dataset, name: str, calls: list[str]) -> None:
    real = getattr(dataset.backend, name)

    def record(*args: Any) -> None:
        calls.append(name)
        real(*args)

    monkeypatch.setattr(dataset.backend, name, record)


def test_exact_steps_take_append_step_and_store_what_the_generic_path_stores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dataset, twin = Dataset.create(SCHEMA), Dataset.create(SCHEMA)
    calls: list[str] = []
    spy(monkeypatch, dataset, "append_step", calls)
    spy(monkeypatch, dataset, "append_rows", calls)
    reset = np.full(4, -1, np.float32)
    writer, twin_writer = dataset.new_episode(reset), twin.new_episode(reset)
    for step in steps():
        writer.add_step(step)
        twin_writer.add_step(MappingProxyType(step))
    # a NumPy bool flag is not a Python bool: that step's rows go the checked way
    assert calls == ["append_step", "append_rows", "append_step", "append_rows"]
    got, want = dataset.episode(0), twin.episode(0)
    assert got.terminated
    assert want.terminated
    keys = dataset.schema.qualified_keys
    rows = dataset.backend.read_rows(0, 0, 5, keys)
    twin_rows = twin.backend.read_rows(0, 0, 5, keys)
    for key in keys:
        assert rows[key].dtype == twin_rows[key].dtype
        assert rows[key].tobytes() == twin_rows[key].tobytes(), key

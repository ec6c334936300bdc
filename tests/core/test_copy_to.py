"""``Dataset.copy_to``: every read of the copy equals the same read of the original.

The original mixes what a copy must keep in order: finalized episodes (terminated,
truncated, neither), ongoing ones between and after them, and episodes without an
optional field. Reads of the original are the oracle; each target backend is real.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata import Dataset, DatasetSchema, FieldSpec

if TYPE_CHECKING:
    import pathlib

SCHEMA = DatasetSchema(
    [
        FieldSpec("state", shape=(3,), dtype="float32"),
        FieldSpec("extra", shape=(), dtype="float32", optional=True),
        FieldSpec("action", shape=(), dtype="int64", role="action"),
        FieldSpec("reward", shape=(), dtype="float32", role="reward"),
    ]
)

# (steps, how the episode ends, whether it has the optional field)
PLAN = [
    (5, "terminated", True),
    (3, "ongoing", True),
    (7, "truncated", False),
    (1, "neither", True),
    (4, "ongoing", False),
    (6, "terminated", False),
    (2, "ongoing", True),
]


def _observation(rng: np.random.Generator, extra: bool) -> dict[str, Any]:
    value: dict[str, Any] = {"state": rng.normal(size=3).astype(np.float32)}
    if extra:
        value["extra"] = np.float32(rng.normal())
    return value


def _original() -> Dataset:
    rng = np.random.default_rng(7)
    dataset = Dataset.create(SCHEMA)
    writers = []
    for steps, end, extra in PLAN:
        writer = dataset.new_episode(_observation(rng, extra))
        for _ in range(steps):
            writer.add_step(
                {
                    "observations": _observation(rng, extra),
                    "actions": int(rng.integers(0, 5)),
                    "rewards": np.float32(rng.normal()),
                }
            )
        writers.append((writer, end))
    for writer, end in writers:  # finalized out of order: ids stay those of the start
        if end != "ongoing":
            writer.end(terminated=end == "terminated", truncated=end == "truncated")
    return dataset


def _assert_same_reads(original: Dataset, copy: Dataset) -> None:
    assert copy.num_episodes == original.num_episodes == len(PLAN)
    for a, b in zip(original, copy, strict=True):
        assert (len(a), a.ongoing, a.terminated, a.truncated) == (
            len(b),
            b.ongoing,
            b.terminated,
            b.truncated,
        )
        ra, rb = a.read(), b.read()
        assert ra.buffers.keys() == rb.buffers.keys()
        for key in ra.buffers:
            np.testing.assert_array_equal(ra.buffers[key], rb.buffers[key], strict=True)


@pytest.mark.parametrize("backend", ["memory", "zarr", "npz_directory"])
def test_copy_keeps_ids_flags_ongoing_state_and_absent_fields(
    backend: str, tmp_path: pathlib.Path
) -> None:
    original = _original()
    path = None if backend == "memory" else str(tmp_path / "copy")
    copy = original.copy_to(path, backend=backend)
    _assert_same_reads(original, copy)
    if path is not None:
        copy.close()
        _assert_same_reads(original, Dataset.open(path, read_only=True))


def test_copy_in_small_batches_keeps_every_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one episode per batch: every batch boundary and every ongoing flush is exercised
    monkeypatch.setattr("episodata_core._batching.BATCH_BYTES", 1)
    original = _original()
    copy = original.copy_to(str(tmp_path / "copy"), backend="zarr")
    _assert_same_reads(original, copy)


def test_a_zarr_copy_commits_finalized_episodes_together(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    original = Dataset.create(SCHEMA)
    for _ in range(40):
        original.add_episode(
            {
                "initial_observation": _observation(rng, True),
                "observations": {
                    "state": rng.normal(size=(3, 3)).astype(np.float32),
                    "extra": rng.normal(size=3).astype(np.float32),
                },
                "actions": rng.integers(0, 5, size=3),
                "rewards": rng.normal(size=3).astype(np.float32),
                "terminated": True,
            }
        )
    path = tmp_path / "copy"
    copy = original.copy_to(str(path), backend="zarr")
    copy.close()
    commits = json.loads((path / "commit.json").read_text())["generation"]
    # one commit per episode would count 40; the 40 small episodes fit one batch
    assert commits <= 2, f"{commits} commits for 40 episodes"

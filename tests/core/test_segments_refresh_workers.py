"""A DataLoader over ``segments()`` of a dataset that grows while it trains.

A reader process that trains while another process records refreshes between epochs:
``dataset.refresh()``, then ``segments.refresh()``, and the next epoch should visit every
window of the grown dataset exactly once. Workers started anew each epoch (the default)
do. Persistent workers keep the copy of ``segments`` they were started with; they used
to keep its stale index too, and the first index past its length raised ``IndexError:
segment index out of range`` in the worker. Now they follow the main process's refresh.
An in-memory dataset's persistent workers cannot see the new episodes at all: they say
so instead of reading a stale index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from episodata_core.dataset import Dataset
from episodata_core.errors import DatasetStateError
from episodata_core.testing import example_schema
from episodata_core.testing._crash_writer import bulk_episode
from episodata_core.testing._reader_checks import TAG_KEY, reader_episode, reader_schema

if TYPE_CHECKING:
    from pathlib import Path

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader

SCHEMA = reader_schema(example_schema())
L = 5


def _windows(episodes: range) -> list[tuple[int, int]]:
    """Every (episode, start) window of length L, padded ones included: by brute force."""
    out = []
    for episode in episodes:
        steps = reader_episode(SCHEMA, episode).num_rows - 1
        if 0 < steps < L:
            out.append((episode, 0))
        out += [(episode, start) for start in range(steps - L + 1)]
    return out


def _epoch(loader: DataLoader[Any]) -> list[tuple[int, int]]:
    seen = []
    for batch in loader:
        tags = np.asarray(batch.buffers[TAG_KEY])[:, 0] - 1  # each window's first real row
        seen += [(int(e), int(r)) for e, r in tags]
    return sorted(seen)


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
@pytest.mark.parametrize("persistent", [False, True])
def test_an_epoch_after_refresh_visits_every_new_window(
    tmp_path: Path, persistent: bool, context: str
) -> None:
    location = str(tmp_path / "dataset")
    writer = Dataset.create(SCHEMA, location, backend="npz_directory")
    for episode in range(4):
        writer.add_episode(bulk_episode(SCHEMA, reader_episode(SCHEMA, episode)))
    reader = Dataset.open(location, read_only=True)
    segments = reader.segments(L)
    loader: DataLoader[Any] = DataLoader(
        segments,  # type: ignore[arg-type]
        batch_size=16,
        shuffle=True,
        num_workers=2,
        collate_fn=segments.collate,
        persistent_workers=persistent,
        multiprocessing_context=context,
    )
    assert _epoch(loader) == _windows(range(4))
    for episode in range(4, 8):  # the recorder goes on
        writer.add_episode(bulk_episode(SCHEMA, reader_episode(SCHEMA, episode)))
    reader.refresh()
    segments.refresh()
    assert len(segments) == len(_windows(range(8)))
    assert _epoch(loader) == _windows(range(8))
    reader.close()
    writer.close()


def test_persistent_workers_of_a_memory_dataset_refuse_a_refreshed_index() -> None:
    dataset = Dataset.create(SCHEMA, None, backend="memory")
    for episode in range(4):
        dataset.add_episode(bulk_episode(SCHEMA, reader_episode(SCHEMA, episode)))
    segments = dataset.segments(L)
    loader: DataLoader[Any] = DataLoader(
        segments,  # type: ignore[arg-type]
        batch_size=16,
        num_workers=1,
        collate_fn=segments.collate,
        persistent_workers=True,
        multiprocessing_context="fork",
    )
    assert _epoch(loader) == _windows(range(4))
    for episode in range(4, 6):  # written after the worker was forked: it cannot see them
        dataset.add_episode(bulk_episode(SCHEMA, reader_episode(SCHEMA, episode)))
    segments.refresh()
    with pytest.raises(DatasetStateError, match="persistent_workers=False"):
        _epoch(loader)

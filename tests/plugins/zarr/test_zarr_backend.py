from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from _zarr_helpers import assert_rows_equal, episodes, make_backend, open_backend

from episodata_core.protocols import EpisodeRows
from episodata_core.testing import (
    BackendTests,
    PersistentBackendTests,
    example_rows,
    example_schema,
)
from episodata_zarr import ZarrBackend

if TYPE_CHECKING:
    from pathlib import Path


class TestZarrBackend(PersistentBackendTests[ZarrBackend]):
    backend_cls = ZarrBackend
    add_episodes_all_or_none = True  # one commit.json covers every episode of a call


class TestZarrBackendSmallChunks(BackendTests[ZarrBackend]):
    """The kit's row tests again, with chunks of a few rows, sharding and another codec.

    (The persistence tests create datasets with default options, so they run once, above.)
    """

    backend_cls = ZarrBackend

    @pytest.fixture
    def location(self, tmp_path: Path) -> str | None:
        return str(tmp_path / "dataset")

    @pytest.fixture
    def options(self) -> dict[str, Any]:
        return {"chunk_bytes": 40, "shard_chunks": 3, "codec": "blosc-zstd", "cache_pool_bytes": 0}


def test_add_episodes_with_a_fresh_cache_keeps_every_row(tmp_path: Path) -> None:
    """A large add_episodes call starts a new TensorStore cache; nothing stale survives.

    A tiny cache pool makes every call large. Reads cache the partly filled last chunk
    before each write, and the next write goes into that same chunk.
    """
    schema = example_schema()
    backend = make_backend(tmp_path / "ds", chunk_bytes=256, cache_pool_bytes=4096)
    expected = {}
    for call, lengths in enumerate(([5, 1, 7], [3], [9, 2])):
        new = [
            EpisodeRows(rows, terminated=bool(i % 2), truncated=False)
            for i, rows in enumerate(episodes(schema, lengths, seed=10 * call))
        ]
        ids = backend.add_episodes(new)
        expected.update(zip(ids, (e.rows for e in new), strict=True))
        for episode, rows in expected.items():  # fills the cache with every chunk
            assert_rows_equal(
                dict(backend.read_rows(episode, 0, len(rows["observation/state"]), list(rows))),
                rows,
            )
        # a step-by-step episode writes into the chunk the call left partly filled
        extra = example_rows(schema, 4, seed=100 + call)
        episode = backend.start_episode(extra)
        backend.finalize_episode(episode, terminated=True, truncated=False)
        expected[episode] = extra
    assert backend.verify() == []
    backend.close()
    reopened = open_backend(tmp_path / "ds")
    for episode, rows in expected.items():
        count = len(rows["observation/state"])
        assert_rows_equal(dict(reopened.read_rows(episode, 0, count, list(rows))), rows)
    reopened.close()

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from episodata_core.testing import BackendTests, PersistentBackendTests
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

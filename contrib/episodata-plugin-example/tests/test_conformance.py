"""The conformance kit, run against the hdf5 backend exactly as any third party runs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from episodata_core.testing import BackendTests, PersistentBackendTests

from episodata_plugin_example import HDF5Backend

if TYPE_CHECKING:
    from pathlib import Path


class TestHDF5Backend(PersistentBackendTests[HDF5Backend]):
    """Every kit test: rows, gathers, persistence, readers, crashes, a flipped byte."""

    backend_cls = HDF5Backend


class TestHDF5BackendSmallChunks(BackendTests[HDF5Backend]):
    """The row and gather tests again with the smallest chunks: windows span many."""

    backend_cls = HDF5Backend

    @pytest.fixture
    def location(self, tmp_path: Path) -> str | None:
        return str(tmp_path / "dataset")

    @pytest.fixture
    def options(self) -> dict[str, Any]:
        return {"chunk_bytes": 2048, "durable": False}

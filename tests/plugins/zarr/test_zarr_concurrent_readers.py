"""Readers in other processes sample a Zarr dataset while one writer appends, flushes and folds.

The check is the kit's (``episodata_core.testing.concurrent_readers``); ``fold_bytes`` is
set to 64 KiB wherever the backend's options have it, so a writer with an episode log
folds it into the arrays many times while the readers read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from episodata_core.testing import ConcurrentReaderTests

if TYPE_CHECKING:
    from pathlib import Path


class TestZarrConcurrentReaders(ConcurrentReaderTests):
    backend_name = "zarr"
    # a read that finds the spill of an ongoing episode gone (the writer finalized it)
    # refreshes by itself (``ZarrStore._following_finalizes``), so a reader's table moves
    # between its refresh() calls; the rows read stay exact, which the check still checks
    reads_may_refresh = True

    @pytest.mark.xfail(
        strict=True,
        reason="zarr readers adopt newer commits during reads, without refresh()",
    )
    def test_snapshot_holds_between_refreshes(self, tmp_path: Path) -> None:
        super().test_snapshot_holds_between_refreshes(tmp_path)

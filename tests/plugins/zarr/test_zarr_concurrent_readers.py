"""Readers in other processes sample a Zarr dataset while one writer appends, flushes and folds.

The check is the kit's (``episodata_core.testing.concurrent_readers``); ``fold_bytes`` is
set to 64 KiB wherever the backend's options have it, so the writer folds its episode
log into the arrays many times while the readers read. A reader's view moves only at
its own ``refresh()`` (the table holds still in between).
"""

from __future__ import annotations

from episodata_core.testing import ConcurrentReaderTests


class TestZarrConcurrentReaders(ConcurrentReaderTests):
    backend_name = "zarr"

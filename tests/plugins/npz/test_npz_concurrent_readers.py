"""Readers in other processes sample an NPZ dataset while one writer appends and flushes.

The check is the kit's (``episodata_core.testing.concurrent_readers``).
"""

from __future__ import annotations

from episodata_core.testing import ConcurrentReaderTests


class TestNpzConcurrentReaders(ConcurrentReaderTests):
    backend_name = "npz_directory"

"""``episodata.backends.base``: what a backend implements and how it is read (0.2's path)."""

from __future__ import annotations

from episodata_core.protocols import EpisodeTable, StorageBackend, SupportsReadFields
from episodata_core.selection import Selection

__all__ = ["EpisodeTable", "Selection", "StorageBackend", "SupportsReadFields"]

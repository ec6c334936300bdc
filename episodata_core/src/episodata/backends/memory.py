"""``episodata.backends.memory``: the in-memory backend (from episodata-memory)."""

from __future__ import annotations

from episodata_memory import MemoryBackend

__all__ = ["MemoryBackend"]

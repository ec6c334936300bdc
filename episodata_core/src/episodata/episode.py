"""``episodata.episode``: an episode and its step writer (0.2's module path)."""

from __future__ import annotations

from episodata_core.episode import Episode
from episodata_core.writers import EpisodeWriter

__all__ = ["Episode", "EpisodeWriter"]

"""``episodata.backends.npz``: the npz_directory backend (from episodata-npz)."""

from __future__ import annotations

from episodata_npz import NpzDirectoryBackend

__all__ = ["NpzDirectoryBackend"]

"""``episodata.dataset``: the :class:`Dataset` (0.2's module path)."""

from __future__ import annotations

from episodata_core.dataset import Dataset

__all__ = ["Dataset"]

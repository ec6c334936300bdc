"""``episodata.segment``: the transition views a read returns (0.2's module path)."""

from __future__ import annotations

from episodata_core.views import Batch, Segment, Transition

__all__ = ["Batch", "Segment", "Transition"]

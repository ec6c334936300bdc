"""``episodata.sampling``: the segment index, ``segments()`` and streams (0.2's module path)."""

from __future__ import annotations

from episodata_core.sampling import SegmentDataset, SegmentIndex, SegmentStream, UniformSampler

__all__ = ["SegmentDataset", "SegmentIndex", "SegmentStream", "UniformSampler"]

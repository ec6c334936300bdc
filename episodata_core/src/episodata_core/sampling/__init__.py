"""Sampling: the segment index, ``segments()``, ``segment_stream()`` and the samplers."""

from __future__ import annotations

from episodata_core.sampling.index import Pad, SegmentIndex, WindowSpec
from episodata_core.sampling.samplers import (
    EpisodeUniformSampler,
    UniformSampler,
    WithoutReplacementSampler,
)
from episodata_core.sampling.segments import SegmentDataset
from episodata_core.sampling.stream import SegmentStream

__all__ = [
    "EpisodeUniformSampler",
    "Pad",
    "SegmentDataset",
    "SegmentIndex",
    "SegmentStream",
    "UniformSampler",
    "WindowSpec",
    "WithoutReplacementSampler",
]

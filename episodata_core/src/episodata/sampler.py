"""``episodata.sampler``: the sampler contract and the built-in samplers (0.2's module path)."""

from __future__ import annotations

from episodata_core.protocols import Sampler
from episodata_core.sampling import (
    EpisodeUniformSampler,
    UniformSampler,
    WithoutReplacementSampler,
)

__all__ = ["EpisodeUniformSampler", "Sampler", "UniformSampler", "WithoutReplacementSampler"]

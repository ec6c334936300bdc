"""The built-in samplers pass the conformance kit, like any third-party sampler."""

from __future__ import annotations

from episodata_core.sampling import (
    EpisodeUniformSampler,
    UniformSampler,
    WithoutReplacementSampler,
)
from episodata_core.testing import SamplerTests


class TestUniformSampler(SamplerTests[UniformSampler]):
    sampler_cls = UniformSampler


class TestEpisodeUniformSampler(SamplerTests[EpisodeUniformSampler]):
    sampler_cls = EpisodeUniformSampler


class TestWithoutReplacementSampler(SamplerTests[WithoutReplacementSampler]):
    sampler_cls = WithoutReplacementSampler

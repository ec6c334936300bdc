"""The built-in samplers, registered in ``episodata.samplers`` like any third-party one.

A sampler returns window positions for one batch. Any object with
``sample(index, batch_size)`` works; these three also save and restore their state so a
stream can resume exactly.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from episodata_core.sampling.index import SegmentIndex

__all__ = ["EpisodeUniformSampler", "UniformSampler", "WithoutReplacementSampler"]


class SamplerOptions(BaseModel):
    """Options shared by the built-in samplers (they take only a seed)."""

    model_config = ConfigDict(extra="forbid")


class _SeededSampler:
    Options: ClassVar[type[BaseModel]] = SamplerOptions

    def __init__(self, seed: int | np.random.SeedSequence | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def state_dict(self) -> dict[str, Any]:
        """The random generator's state (JSON-serializable)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.rng.bit_generator.state = state["rng"]


class UniformSampler(_SeededSampler):
    """Every window equally likely, with replacement (the default)."""

    name: ClassVar[str] = "uniform"
    description: ClassVar[str] = "uniform over windows, with replacement"

    def sample(self, index: SegmentIndex, batch_size: int) -> npt.NDArray[np.int64]:
        """``[batch_size]`` positions drawn uniformly from ``[0, len(index))``."""
        return self.rng.integers(len(index), size=batch_size, dtype=np.int64)


class EpisodeUniformSampler(_SeededSampler):
    """Every eligible episode equally likely, then a uniform window within it.

    Long episodes no longer dominate: each episode gets ``1 / episodes`` of the mass.
    """

    name: ClassVar[str] = "episode-uniform"
    description: ClassVar[str] = "uniform over episodes, then over their windows"

    def __init__(self, seed: int | np.random.SeedSequence | None = None) -> None:
        super().__init__(seed)
        self._cache: tuple[weakref.ref[SegmentIndex], int, npt.NDArray[np.int64]] | None = None

    def _eligible(self, index: SegmentIndex) -> npt.NDArray[np.int64]:
        # keyed by the index object too: versions of two different indexes can coincide
        # when one sampler object serves several streams
        cache = self._cache
        if cache is None or cache[0]() is not index or cache[1] != index.version:
            eligible = np.flatnonzero(index.windows_per_episode).astype(np.int64)
            self._cache = cache = (weakref.ref(index), index.version, eligible)
        return cache[2]

    def sample(self, index: SegmentIndex, batch_size: int) -> npt.NDArray[np.int64]:
        """Pick episodes uniformly, then a window of each uniformly."""
        eligible = self._eligible(index)
        episodes = eligible[self.rng.integers(len(eligible), size=batch_size)]
        within = self.rng.integers(index.windows_per_episode[episodes])
        return (index.first_position[episodes] + within).astype(np.int64)


class WithoutReplacementSampler(_SeededSampler):
    """Epochs: each window once per shuffled pass, then a new permutation.

    When the index grows, the current epoch ends and the next covers the new windows.
    """

    name: ClassVar[str] = "without-replacement"
    description: ClassVar[str] = "shuffled epochs: every window once per pass"

    def __init__(self, seed: int | np.random.SeedSequence | None = None) -> None:
        super().__init__(seed)
        self._order = np.zeros(0, dtype=np.int64)
        self._cursor = 0
        self._version = -1

    def sample(self, index: SegmentIndex, batch_size: int) -> npt.NDArray[np.int64]:
        """The next ``batch_size`` positions of the current permutation."""
        out = np.empty(batch_size, dtype=np.int64)
        filled = 0
        while filled < batch_size:
            # a new permutation when the epoch ends, the index grows, or the sampler is
            # handed another index (its version may coincide, its length need not)
            stale = self._version != index.version or len(self._order) != len(index)
            if self._cursor >= len(self._order) or stale:
                self._order = self.rng.permutation(len(index)).astype(np.int64)
                self._cursor, self._version = 0, index.version
            take = min(batch_size - filled, len(self._order) - self._cursor)
            out[filled : filled + take] = self._order[self._cursor : self._cursor + take]
            filled += take
            self._cursor += take
        return out

    def state_dict(self) -> dict[str, Any]:
        """Generator state plus the current permutation and position in it."""
        return {
            **super().state_dict(),
            "order": self._order.tolist(),
            "cursor": self._cursor,
            "version": self._version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""
        super().load_state_dict(state)
        self._order = np.asarray(state["order"], dtype=np.int64)
        self._cursor = int(state["cursor"])
        self._version = int(state["version"])

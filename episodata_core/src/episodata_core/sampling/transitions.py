"""``sample_transitions()``: uniform single transitions, the per-call read of a replay buffer.

The transition index (every transition is a window of length 1, never padded) is kept
between calls, one per filter, and only catches up with new episodes; a call draws
positions, locates them and reads them with one backend gather, all from one
episode-table snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from episodata_core.errors import SchemaError
from episodata_core.sampling.index import SegmentIndex, positive_int
from episodata_core.sampling.read import read_transitions

if TYPE_CHECKING:
    from episodata_core._access import DatasetAccess
    from episodata_core.sampling.index import EpisodeFilter
    from episodata_core.views import Transition

__all__ = ["TransitionSampler"]


class TransitionSampler:
    """Draws ``[B]`` transitions uniformly over every transition of a dataset."""

    def __init__(self, access: DatasetAccess) -> None:
        self._access = access
        # keyed by the filter's id, checked against the filter itself: a filter that was
        # collected may leave its id to a new one
        self._indexes: dict[int, tuple[EpisodeFilter | None, SegmentIndex]] = {}
        self._rng = np.random.default_rng()

    def sample(
        self,
        batch_size: int,
        *,
        seed: int | None,
        fields: tuple[str, ...],
        filter: EpisodeFilter | None,
    ) -> Transition:
        """``batch_size`` transitions of ``fields``; ``seed`` draws from a fresh generator."""
        batch_size = positive_int("batch_size", batch_size)
        access = self._access
        with access.lock:
            # one episode-table snapshot for the index, the draw and the rows
            table = access.backend.episode_table()
            cached = self._indexes.get(id(filter))
            if cached is None or cached[0] is not filter:
                index = SegmentIndex(access, 1, pad=None, filter=filter)
                self._indexes[id(filter)] = (filter, index)
            else:
                index = cached[1]
                index.refresh_from(table)
            if not len(index):
                raise SchemaError(
                    f"sample_transitions: nothing to sample: {index.describe_empty()}"
                )
            rng = self._rng if seed is None else np.random.default_rng(seed)
            positions = rng.integers(len(index), size=batch_size, dtype=np.int64)
            episodes, starts = index.locate(positions)
            return read_transitions(access, episodes, starts, fields, table=table)

"""The normative segment plan of one label (formats.md §3.2).

Each label gets a fresh ``numpy.random.default_rng(seed)``. All episodes are drawn first
(``choice`` without replacement over the eligible positions), then one scalar
``integers(0, T - K + 1)`` call per chosen episode, in draw order. The chosen episodes
are never sorted and the start draws are never vectorised: either would change which
segments a seed names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from episodata_core.errors import FormatError

if TYPE_CHECKING:
    from episodata_core.protocols import EpisodeTable

__all__ = ["Plan", "Pool", "draw_plan", "pool_of"]


@dataclass(frozen=True)
class Pool:
    """The episodes one label samples from.

    ``eligible`` holds positions ``< pool_size`` of finalized episodes with ``T >= K`` in
    ascending order, int64; ``lengths`` is T of every episode of the dataset.
    """

    episodes_total: int
    pool_limit: int | None
    pool_size: int
    eligible: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    excluded_nonfinite: int
    ongoing_skipped: int


@dataclass(frozen=True)
class Plan:
    """Segment ``j`` of a label is episode ``episodes[j]`` from start ``starts[j]``."""

    episodes: tuple[int, ...]
    starts: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.episodes)


def pool_of(
    table: EpisodeTable,
    offset: int,
    pool_limit: int | None,
    *,
    nonfinite: npt.NDArray[np.bool_] | None = None,
) -> Pool:
    """Pool and eligible episodes of a dataset whose episode table is ``table``.

    ``nonfinite`` (``[num_episodes]`` bool) marks episodes to exclude because a
    finiteness-required field holds NaN or infinity; ``None`` excludes none.
    """
    total = len(table)
    size = total if pool_limit is None else min(total, pool_limit)
    lengths = np.asarray(table.length, dtype=np.int64)
    pooled = np.zeros(total, dtype=bool)
    pooled[:size] = True
    finalized = pooled & ~np.asarray(table.ongoing, dtype=bool)
    long_enough = finalized & (lengths >= offset)
    excluded = 0
    if nonfinite is not None:
        excluded = int(np.count_nonzero(long_enough & nonfinite))
        long_enough &= ~nonfinite
    return Pool(
        episodes_total=total,
        pool_limit=pool_limit,
        pool_size=size,
        eligible=np.flatnonzero(long_enough).astype(np.int64),
        lengths=lengths,
        excluded_nonfinite=excluded,
        ongoing_skipped=int(np.count_nonzero(pooled & np.asarray(table.ongoing, dtype=bool))),
    )


def draw_plan(pool: Pool, offset: int, count: int, seed: int, label: str) -> Plan:
    """Draw ``count`` distinct episodes, then one start per episode, with a fresh RNG.

    Raises
    ------
    FormatError
        Fewer than ``count`` episodes are eligible (a ``ValueError``).
    """
    eligible = pool.eligible
    if len(eligible) < count:
        raise FormatError(
            f"label {label!r}: only {len(eligible)} of {pool.pool_size} pooled episodes are "
            f"eligible (finalized, at least offset={offset} transitions"
            + (
                f", {pool.excluded_nonfinite} excluded as non-finite"
                if pool.excluded_nonfinite
                else ""
            )
            + f"), but episodes_per_env={count}; lower episodes_per_env or offset, or raise "
            "pool_limit"
        )
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(eligible), size=count, replace=False)
    episodes = tuple(int(e) for e in eligible[pick])
    starts: list[int] = []
    for episode in episodes:
        # one scalar call per episode, in draw order, even when T == K (the stream moves)
        transitions = int(pool.lengths[episode])
        starts.append(int(rng.integers(0, transitions - offset + 1)))
    return Plan(episodes=episodes, starts=tuple(starts))

"""Episode boundaries and per-episode mapping of flat D4RL rows (formats.md §1.4-1.6).

Pure NumPy over whole flag columns: no loop per row, no file access.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["END_REASONS", "Episodes", "Plan", "find_episodes", "plan_episodes"]

END_REASONS = ("terminal", "timeout", "step_limit", "next_obs_mismatch", "file_end")
"""Rule names in priority order; the first rule that fires at a row names its end."""

FinalObs = Literal["next_observations", "dropped", "next_row_continuous"]


@dataclass(frozen=True)
class Episodes:
    """Source episodes: rows ``start[k]..end[k]`` (inclusive), all ``[E]`` arrays."""

    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    reason: npt.NDArray[np.int8]
    """Index into :data:`END_REASONS`."""
    source_terminated: npt.NDArray[np.bool_]
    source_truncated: npt.NDArray[np.bool_]

    @property
    def rows(self) -> npt.NDArray[np.int64]:
        """n, the source rows of each episode."""
        return self.end - self.start + 1

    def __len__(self) -> int:
        return int(self.start.shape[0])


def find_episodes(
    terminals: npt.NDArray[np.bool_],
    timeouts: npt.NDArray[np.bool_],
    *,
    use_terminals: bool,
    step_limit: int | None,
    mismatch: npt.NDArray[np.bool_] | None,
) -> Episodes:
    """Split N rows into episodes by the rules of formats.md §1.4.

    ``step_limit`` is M when rule 3 is active (no ``timeouts`` and ``max_episode_steps``
    set); ``mismatch`` is ``[N]`` bool when rule 4 is active (already False at N-1).
    """
    n = int(terminals.shape[0])
    term = terminals if use_terminals else np.zeros(n, dtype=bool)
    mism = mismatch if mismatch is not None else np.zeros(n, dtype=bool)
    fixed = term | timeouts | mism
    limit = np.zeros(n, dtype=bool)
    if step_limit is not None:
        # count rows from 0 at every episode start; starts come from the other rules, and
        # rule 3's own ends restart the count every M rows, hence the modulo
        starts = np.zeros(n, dtype=bool)
        starts[0] = True
        starts[1:] = fixed[:-1]
        index = np.arange(n, dtype=np.int64)
        start_of_row = np.maximum.accumulate(np.where(starts, index, 0))
        limit = (index - start_of_row + 1) % step_limit == 0
    file_end = np.zeros(n, dtype=bool)
    file_end[-1] = not (fixed[-1] or limit[-1])
    rules = (term, timeouts, limit, mism, file_end)
    ends = np.flatnonzero(fixed | limit | file_end).astype(np.int64)
    reason = np.select([rule[ends] for rule in rules], list(range(len(rules)))).astype(np.int8)
    start = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    return Episodes(
        start=start,
        end=ends,
        reason=reason,
        source_terminated=term[ends],
        source_truncated=timeouts[ends] | limit[ends] | mism[ends] | file_end[ends],
    )


@dataclass(frozen=True)
class Plan:
    """What each source episode becomes (formats.md §1.5-1.6), all ``[E]`` arrays.

    ``transitions`` is T; ``final`` names where observation row T comes from (Case A:
    ``next_observations[end]``; maze2d: ``observations[end + 1]``; Case B: nothing, the
    last source step is dropped). ``skip`` is the skip reason or ``""``.
    """

    transitions: npt.NDArray[np.int64]
    final: npt.NDArray[np.str_]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    skip: npt.NDArray[np.str_]

    @property
    def kept(self) -> npt.NDArray[np.bool_]:
        """Episodes that are imported."""
        return np.asarray(self.skip == "", dtype=bool)


def plan_episodes(
    episodes: Episodes,
    *,
    num_rows: int,
    case_a: bool,
    maze2d: bool,
    keep_final_partial: bool,
    min_transitions: int,
) -> Plan:
    """Decide T, the final-observation source, the flags and skips of every episode."""
    rows = episodes.rows
    size = len(episodes)
    if case_a:
        final = np.full(size, "next_observations", dtype="<U19")
    else:
        final = np.full(size, "dropped", dtype="<U19")
        if maze2d:
            # a timeout is a goal resample, not a reset: the next row continues the piece
            final[episodes.end < num_rows - 1] = "next_row_continuous"
    dropped = final == "dropped"
    transitions = rows - dropped.astype(np.int64)
    # o_end is not the terminal observation when the step after it was dropped
    terminated = episodes.source_terminated & ~dropped
    truncated = np.where(
        dropped | (final == "next_row_continuous"), True, episodes.source_truncated
    )
    skip = np.full(size, "", dtype="<U13")
    skip[transitions < min_transitions] = "too_short"
    skip[transitions == 0] = "empty"
    if not keep_final_partial:
        skip[episodes.reason == END_REASONS.index("file_end")] = "final_partial"
    return Plan(
        transitions=transitions,
        final=final,
        terminated=terminated,
        truncated=truncated,
        skip=skip,
    )

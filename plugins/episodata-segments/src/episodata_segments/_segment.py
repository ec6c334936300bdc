"""The arrays of one segment file, cut from a dataset episode (formats.md §3.3, §6).

Segment ``(episode, s)`` of offset K covers internal rows ``s .. s + K``. Observation
and info members take all K + 1 rows; action members take rows ``s + 1 .. s + K`` (K
rows, so ``action[t]`` leads from ``obs[t]`` to ``obs[t + 1]``); reward members take all
K + 1 rows, arrival-aligned, where row 0 of a segment starting at the reset holds the
fill value instead of the hidden zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from episodata_core.errors import FormatError, NonFiniteError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from episodata_core.dataset import Dataset
    from episodata_segments._layout import LabelLayout

__all__ = [
    "SegmentCut",
    "check_finite",
    "cut_segment",
    "finite_problems",
    "inf_counts",
    "nan_counts",
    "nonfinite_episodes",
    "reset_fill",
]

Arrays = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class SegmentCut:
    """Segment ``index`` of a label: episode ``episode`` (T = ``transitions``) from ``start``."""

    label: str
    index: int
    segment_id: str
    episode: int
    start: int
    offset: int
    transitions: int
    terminated: bool
    truncated: bool
    source_episode_id: int | str | None = None
    source_row_start: int | None = None

    @property
    def goal(self) -> int:
        """The goal row ``s + K``, an internal row of the episode."""
        return self.start + self.offset

    @property
    def at_end(self) -> bool:
        """Whether the goal row is the episode's last row (``s + K == T``)."""
        return self.goal == self.transitions

    def describe(self) -> str:
        """``"segment toy/000 (episode 0, rows 0..3)"``, for error messages."""
        return f"segment {self.segment_id} (episode {self.episode}, rows {self.start}..{self.goal})"


def reset_fill(dtype: np.dtype[Any]) -> Any:
    """Row 0 of a reward member at s = 0: NaN for floats, zero otherwise."""
    return np.nan if dtype.kind in "fc" else 0


def cut_segment(dataset: Dataset, layout: LabelLayout, cut: SegmentCut) -> Arrays:
    """Every member of the segment file ``cut`` describes, scalars included."""
    offset = layout.offset
    start = cut.start
    read = dataset.episode(cut.episode).segment(start, start + offset, fields=layout.field_keys)
    buffers = read.buffers
    arrays: Arrays = {}
    for member in layout.members:
        if member.kind == "field":
            assert member.qualified_key is not None
            rows = buffers.get(member.qualified_key)
            if rows is None:
                raise FormatError(
                    f"label {cut.label!r}, {cut.describe()}: optional field "
                    f"{member.qualified_key!r} is absent from the episode; every segment file "
                    "needs the same members, so leave the field out with fields="
                )
            if member.role == "action":
                value = np.array(rows[1:], copy=True)
            elif member.role == "reward":
                value = np.array(rows, copy=True)
                if start == 0:
                    value[0] = reset_fill(member.dtype)
            else:
                value = np.array(rows, copy=True)
        elif member.kind == "flag":
            value = np.zeros(offset + 1, dtype=bool)
            value[offset] = cut.at_end and (
                cut.terminated if member.name == "terminated" else cut.truncated
            )
        elif member.kind == "step":
            value = np.arange(offset + 1, dtype=np.int64)
        else:
            constant = layout.constants[member.name][cut.index]
            value = np.full(offset + 1, constant, dtype=member.dtype)
        arrays[member.name] = value
    arrays["env"] = np.array(cut.label, dtype=layout.scalars["env"])
    arrays["source_episode"] = np.array(cut.episode, dtype=np.int64)
    arrays["start_step"] = np.array(start, dtype=np.int64)
    arrays["goal_step"] = np.array(start + offset, dtype=np.int64)
    arrays["offset"] = np.array(offset, dtype=np.int64)
    return arrays


def finite_problems(arrays: Mapping[str, npt.NDArray[Any]], names: tuple[str, ...]) -> list[str]:
    """``"field: n non-finite values (rows [...])"`` for each finiteness violation."""
    problems = []
    for name in names:
        value = arrays[name]
        if value.dtype.kind not in "fc":
            continue
        bad = ~np.isfinite(value)
        if bad.any():
            rows = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))
            problems.append(
                f"{name!r}: {int(bad.sum())} non-finite values (segment rows {rows[:5].tolist()})"
            )
    return problems


def check_finite(
    arrays: Mapping[str, npt.NDArray[Any]], layout: LabelLayout, cut: SegmentCut
) -> None:
    """Raise :class:`NonFiniteError` if a finiteness-required member holds NaN or inf."""
    problems = finite_problems(arrays, layout.rules.finite_required)
    if problems:
        raise NonFiniteError(
            f"label {cut.label!r}, {cut.describe()}: {'; '.join(problems)}. Observation, "
            "action and state fields must be finite; segments are never resampled. Pass "
            "exclude_nonfinite_episodes=True to leave such episodes out of the pool, or "
            "drop the field with fields="
        )


def nan_counts(arrays: Mapping[str, npt.NDArray[Any]], layout: LabelLayout) -> dict[str, int]:
    """NaN elements per NaN-tolerant float member, zeros included."""
    return {name: int(np.isnan(arrays[name]).sum()) for name in layout.nan_counted}


def inf_counts(arrays: Mapping[str, npt.NDArray[Any]], layout: LabelLayout) -> dict[str, int]:
    """±inf elements per NaN-tolerant float member, only where there are some."""
    counts = {name: int(np.isinf(arrays[name]).sum()) for name in layout.nan_counted}
    return {name: n for name, n in counts.items() if n}


def nonfinite_episodes(
    dataset: Dataset, keys: tuple[str, ...], candidates: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """``[num_episodes]`` bool: candidate episodes with NaN or inf in a field of ``keys``."""
    flags = np.zeros(dataset.num_episodes, dtype=bool)
    float_keys = tuple(k for k in keys if dataset.schema[k].np_dtype.kind in "fc")
    if not float_keys:
        return flags
    for episode in candidates.tolist():
        # every row counts: the hidden row-0 action and reward are zeros, always finite
        buffers = dataset.episode(episode).read(fields=float_keys).buffers
        flags[episode] = any(not np.isfinite(buffers[k]).all() for k in buffers)
    return flags

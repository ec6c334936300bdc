"""What a report shows, read from a dataset.

Counts, lengths, returns and reward by step, frames, statistics, per-dimension samples,
data checks and provenance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.authoring import progress_bar
from episodata_report._checks import Finding, check_fields
from episodata_report._png import image_axes, tile, to_rgb

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.protocols import EpisodeTable
    from episodata_core.schema import FieldSpec
    from episodata_core.stats import FieldStats

__all__ = ["FrameRow", "ReportData", "RewardCurve", "collect"]

FRAMES_PER_EPISODE = 8
SAMPLE_TRANSITIONS = 20_000
"""Transitions drawn uniformly (seed 0) for the per-dimension distributions."""
MAX_DIMENSIONS = 64
"""Fields with more elements than this (images, large vectors) get no per-dimension plot."""


@dataclass(frozen=True)
class FrameRow:
    """Evenly spaced frames of one image field in one episode, tiled ``[H, W', 3]``."""

    field: str
    role: str
    episode: int
    length: int
    steps: tuple[int, ...]
    strip: npt.NDArray[np.uint8]


@dataclass(frozen=True)
class RewardCurve:
    """Reward by step index across finalized episodes: ``[S]`` each."""

    mean: npt.NDArray[np.float64]
    low: npt.NDArray[np.float64]
    """The smallest reward at each step index."""
    high: npt.NDArray[np.float64]
    """The largest reward at each step index."""
    episodes: npt.NDArray[np.int64]
    """How many episodes reach each step index."""


@dataclass(frozen=True)
class ReportData:
    """Everything the page shows, gathered once."""

    location: str | None
    backend: str
    format_version: int
    created_at: str
    episodata_version: str
    lengths: npt.NDArray[np.int64]
    status: npt.NDArray[np.str_]
    """``[N]`` end state: ``terminated``, ``truncated``, ``ongoing`` or ``unflagged``."""
    returns: dict[str, npt.NDArray[np.float64]]
    """Per scalar reward field: the sum of rewards of each finalized episode."""
    stats: dict[str, FieldStats]
    frames: list[FrameRow] = field(default_factory=list)
    skipped_frames: list[str] = field(default_factory=list)
    reward_curves: dict[str, RewardCurve] = field(default_factory=dict)
    samples: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    """Per small numeric field: ``[N, D]`` values of uniformly sampled transitions."""
    findings: list[Finding] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    """The manifest's provenance and the import and pipeline records of its metadata."""

    @property
    def counts(self) -> dict[str, int]:
        """Episodes per end state; an episode both terminated and truncated is terminated."""
        names = ("terminated", "truncated", "ongoing", "unflagged")
        return {name: int(np.count_nonzero(self.status == name)) for name in names}


def _status(table: EpisodeTable) -> npt.NDArray[np.str_]:
    status = np.full(len(table), "unflagged", dtype="<U10")
    status[table.truncated] = "truncated"
    status[table.terminated] = "terminated"
    status[table.ongoing] = "ongoing"
    return status


def _scalar_rewards(dataset: Dataset) -> list[str]:
    return [
        spec.qualified_key
        for spec in dataset.schema.by_role("reward")
        if int(np.prod(spec.shape)) == 1 and spec.np_dtype.kind in "biuf"
    ]


def _returns(
    dataset: Dataset, table: EpisodeTable, progress: bool = False
) -> tuple[dict[str, npt.NDArray[np.float64]], dict[str, RewardCurve]]:
    """Each finalized episode's return, and reward by step index, per scalar reward field."""
    keys = _scalar_rewards(dataset)
    finished = np.flatnonzero(~table.ongoing)
    returns = {key: np.zeros(len(finished), dtype=np.float64) for key in keys}
    if not keys or not finished.size:
        return returns, {}
    steps = int(table.length[finished].max())
    sums = {key: np.zeros(steps) for key in keys}
    lows = {key: np.full(steps, np.inf) for key in keys}
    highs = {key: np.full(steps, -np.inf) for key in keys}
    reach = np.zeros(steps, dtype=np.int64)
    shown = progress_bar(finished, enabled=progress, what="episodes", action="reading rewards of")
    for position, episode in enumerate(shown):
        length = int(table.length[episode])
        reach[:length] += 1
        # reward rows are 1..T: row 0 is the hidden zero of the reset row
        rows = dataset.backend.read_rows(int(episode), 1, length + 1, keys)
        for key in keys:
            values = rows[key].astype(np.float64).reshape(length)
            returns[key][position] = float(values.sum())
            sums[key][:length] += values
            np.minimum(lows[key][:length], values, out=lows[key][:length])
            np.maximum(highs[key][:length], values, out=highs[key][:length])
    curves = {
        key: RewardCurve(sums[key] / np.maximum(reach, 1), lows[key], highs[key], reach)
        for key in keys
    }
    return returns, curves


def _samples(dataset: Dataset) -> dict[str, npt.NDArray[np.float64]]:
    """Uniformly sampled values ``[N, D]`` of every small numeric field (no images)."""
    keys = [
        spec.qualified_key
        for spec in dataset.schema
        if spec.layout is None
        and spec.np_dtype.kind in "biuf"
        and 1 <= math.prod(spec.shape) <= MAX_DIMENSIONS
    ]
    steps = dataset.num_steps
    if not keys or not steps:
        return {}
    transitions = dataset.sample_transitions(min(SAMPLE_TRANSITIONS, steps), fields=keys, seed=0)
    samples = {}
    for key, buffer in transitions.buffers.items():
        # a transition's buffer holds its two rows: the observation (and info) where the
        # action was taken is row 0, the action and reward of that step are row 1
        row = 0 if dataset.schema[key].role in ("observation", "info") else 1
        values = np.asarray(buffer)[:, row]
        samples[key] = values.reshape(len(values), -1).astype(np.float64)
    return samples


def _provenance(dataset: Dataset) -> dict[str, Any]:
    manifest = dataset.manifest
    record: dict[str, Any] = {
        "created_at": manifest.provenance.created_at,
        "episodata_version": manifest.provenance.episodata_version,
        "plugins": [plugin.model_dump(mode="json") for plugin in manifest.provenance.plugins],
    }
    for name in ("imports", "pipeline"):
        if name in manifest.metadata:
            record[name] = manifest.metadata[name]
    return record


def _frame_rows(
    dataset: Dataset, table: EpisodeTable, spec: FieldSpec, episodes: int
) -> list[FrameRow]:
    key = spec.qualified_key
    present = table.present.get(key)
    chosen = [i for i in range(len(table)) if present is None or bool(present[i])][
        : max(0, episodes)
    ]
    rows: list[FrameRow] = []
    first = 1 if spec.role in ("action", "reward") else 0
    for episode in chosen:
        length = int(table.length[episode])
        if length + 1 <= first:
            continue
        picks = np.unique(np.linspace(first, length, FRAMES_PER_EPISODE).round().astype(int))
        frames = []
        for row in picks:
            stored = dataset.backend.read_rows(episode, int(row), int(row) + 1, [key])[key][0]
            rgb = to_rgb(stored, spec)
            if rgb is not None:
                frames.append(rgb)
        if frames:
            # row t holds the observation after step t, and the action of step t
            steps = tuple(int(r) for r in picks)
            rows.append(FrameRow(key, spec.role, episode, length, steps, tile(frames)))
    return rows


def collect(dataset: Dataset, *, episodes_for_frames: int, progress: bool = False) -> ReportData:
    """Read what the report needs; one pass over rewards, a few frames, cached stats."""
    table = dataset.backend.episode_table()
    manifest = dataset.manifest
    frames: list[FrameRow] = []
    skipped: list[str] = []
    for spec in dataset.schema:
        if spec.layout is None:
            continue
        if image_axes(spec.layout) is None:
            skipped.append(f"{spec.qualified_key} (layout {spec.layout!r} is not CHW, HWC or HW)")
            continue
        frames += _frame_rows(dataset, table, spec, episodes_for_frames)
    returns, curves = _returns(dataset, table, progress)
    stats = dataset.stats()
    return ReportData(
        location=dataset.location,
        backend=manifest.backend,
        format_version=manifest.format_version,
        created_at=manifest.provenance.created_at,
        episodata_version=manifest.provenance.episodata_version,
        lengths=table.length.astype(np.int64),
        status=_status(table),
        returns=returns,
        stats=stats,
        frames=frames,
        skipped_frames=skipped,
        reward_curves=curves,
        samples=_samples(dataset),
        findings=check_fields(dataset, table, stats),
        provenance=_provenance(dataset),
    )

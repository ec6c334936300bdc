"""What a report shows, read from a dataset: counts, lengths, returns, frames, statistics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from episodata_report._png import image_axes, tile, to_rgb

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.protocols import EpisodeTable
    from episodata_core.schema import FieldSpec
    from episodata_core.stats import FieldStats

__all__ = ["FrameRow", "ReportData", "collect"]

FRAMES_PER_EPISODE = 8


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


def _returns(dataset: Dataset, table: EpisodeTable) -> dict[str, npt.NDArray[np.float64]]:
    keys = [
        spec.qualified_key
        for spec in dataset.schema.by_role("reward")
        if int(np.prod(spec.shape)) == 1 and spec.np_dtype.kind in "biuf"
    ]
    finished = np.flatnonzero(~table.ongoing)
    returns = {key: np.zeros(len(finished), dtype=np.float64) for key in keys}
    if not keys:
        return returns
    for position, episode in enumerate(finished):
        length = int(table.length[episode])
        # reward rows are 1..T: row 0 is the hidden zero of the reset row
        rows = dataset.backend.read_rows(int(episode), 1, length + 1, keys)
        for key in keys:
            returns[key][position] = float(rows[key].astype(np.float64).sum())
    return returns


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


def collect(dataset: Dataset, *, episodes_for_frames: int) -> ReportData:
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
    return ReportData(
        location=dataset.location,
        backend=manifest.backend,
        format_version=manifest.format_version,
        created_at=manifest.provenance.created_at,
        episodata_version=manifest.provenance.episodata_version,
        lengths=table.length.astype(np.int64),
        status=_status(table),
        returns=_returns(dataset, table),
        stats=dataset.stats(),
        frames=frames,
        skipped_frames=skipped,
    )

"""Writes a planned archive into its ``.partial`` folder and validates it (formats.md §3.4-3.8).

The layout is::

    README.md  build_episodes.py  manifest.json  manifest.jsonl  SHA256SUMS
    episodes/<label>/episode_<NNN>.npz

Segment files are written and checked one at a time (V1-V5, V7), so memory stays bounded
by one segment; the manifests, V6, ``SHA256SUMS`` and V8 follow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from episodata_core import location
from episodata_core.authoring import progress_bar
from episodata_core.errors import FormatError, IntegrityError
from episodata_core.transfer import ImportWarningRecord
from episodata_segments._checksums import SUMS_NAME, sha256sums_text, verify_sha256sums
from episodata_segments._layout import SCALAR_NAMES
from episodata_segments._manifest import (
    ArchiveManifest,
    EnvironmentEntry,
    FieldEntry,
    NpzEntry,
    PoolEntry,
    ScalarEntry,
    SegmentEntry,
    SegmentRow,
    dump_json,
    dump_jsonl_row,
)
from episodata_segments._npz import content_sha256, npz_bytes
from episodata_segments._plan import draw_plan
from episodata_segments._script import build_script, default_readme
from episodata_segments._segment import check_finite, cut_segment, inf_counts, nan_counts
from episodata_segments._source_check import SourceFile
from episodata_segments._validate import validate_segment

if TYPE_CHECKING:
    from episodata_core.dataset import Dataset
    from episodata_segments._export import OffsetSegmentsExportOptions
    from episodata_segments._layout import LabelLayout
    from episodata_segments._plan import Plan, Pool
    from episodata_segments._provenance import Provenance
    from episodata_segments._segment import SegmentCut

__all__ = ["ArchiveBuilder", "LabelJob"]

_MANIFEST = "manifest.json"
_ROWS = "manifest.jsonl"
_README = "README.md"
_SCRIPT = "build_episodes.py"
# how a run is shown or checked, not what it writes: the same archive either way
_EXCLUDED_FROM_RECORD = {
    "readme",
    "provenance",
    "source_files",
    "overwrite",
    "validate_archive",
    "progress",
}


@dataclass(frozen=True)
class LabelJob:
    """Everything planned for one label before any file is written."""

    label: str
    dataset: Dataset
    provenance: Provenance
    pool: Pool
    plan: Plan
    layout: LabelLayout
    cuts: tuple[SegmentCut, ...]
    file_width: int

    def path_of(self, cut: SegmentCut) -> str:
        """``episodes/<label>/episode_<NNN>.npz``, relative to the archive root."""
        return f"episodes/{self.label}/episode_{cut.index:0{self.file_width}d}.npz"


@dataclass
class ArchiveBuilder:
    """Builds the archive of ``jobs`` (sorted by label) inside ``root``."""

    root: Path
    options: OffsetSegmentsExportOptions
    jobs: list[LabelJob]
    rows: list[SegmentRow] = field(default_factory=list)
    entries: dict[str, list[SegmentEntry]] = field(default_factory=dict)
    nan_totals: dict[str, dict[str, int]] = field(default_factory=dict)
    warnings: list[ImportWarningRecord] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    @property
    def segments_total(self) -> int:
        """Segments written over all labels."""
        return len(self.rows)

    def build(self) -> None:
        """Write every file, validate, and write ``SHA256SUMS`` last."""
        inf_total: dict[str, int] = {}
        for job in self.jobs:
            self._write_label(job, inf_total)
        if inf_total:
            where = ", ".join(f"{key}: {n}" for key, n in sorted(inf_total.items()))
            self.warnings.append(
                ImportWarningRecord(
                    code="infinite_values",
                    message=f"NaN-tolerant float fields hold +-inf values ({where}); kept as is",
                    count=sum(inf_total.values()),
                )
            )
        manifest = self._manifest()
        location.write_atomic(self.root / _MANIFEST, dump_json(manifest.model_dump(mode="json")))
        text = "".join(dump_jsonl_row(row.model_dump(mode="json")) for row in self.rows)
        location.write_atomic(self.root / _ROWS, text.encode("ascii"))
        readme = (
            self.options.readme if self.options.readme is not None else default_readme(manifest)
        )
        location.write_atomic(self.root / _README, readme.encode("utf-8"))
        if self.options.include_script:
            location.write_atomic(self.root / _SCRIPT, self._script().encode("utf-8"))
        if self.options.validate_archive:
            self._check_plans(text)
        self.files = sorted(_walk(self.root), key=lambda p: p.encode())
        sums = sha256sums_text(self.root, self.files)
        location.write_atomic(self.root / SUMS_NAME, sums.encode("utf-8"))
        self.files = sorted([*self.files, SUMS_NAME], key=lambda p: p.encode())
        if self.options.validate_archive:
            # V8: the same check the importer runs first
            report = verify_sha256sums(self.root)
            if report.unlisted:
                raise IntegrityError(
                    f"validation V8 failed: files missing from {SUMS_NAME}: {report.unlisted}"
                )

    def _write_label(self, job: LabelJob, inf_total: dict[str, int]) -> None:
        layout = job.layout
        folder = self.root / "episodes" / job.label
        folder.mkdir(parents=True)
        source = self._source_file(job)
        totals = dict.fromkeys(layout.nan_counted, 0)
        entries: list[SegmentEntry] = []
        try:
            cuts = progress_bar(
                job.cuts, enabled=self.options.progress, what="segments", action=f"{job.label}:"
            )
            for cut in cuts:
                arrays = cut_segment(job.dataset, layout, cut)
                check_finite(arrays, layout, cut)
                counts = nan_counts(arrays, layout)
                for key, n in inf_counts(arrays, layout).items():
                    inf_total[f"{job.label}/{key}"] = inf_total.get(f"{job.label}/{key}", 0) + n
                relative = job.path_of(cut)
                path = self.root / relative
                location.write_atomic(
                    path, npz_bytes(arrays, compress=self.options.compress), durable=False
                )
                digest = content_sha256(arrays)
                if self.options.validate_archive:
                    validate_segment(path, arrays, job.dataset, layout, cut, counts, digest)
                if source is not None:
                    source.check(arrays, layout, cut)
                for key, n in counts.items():
                    totals[key] += n
                entries.append(
                    SegmentEntry(
                        segment_id=cut.segment_id,
                        source_episode=cut.episode,
                        start_step=cut.start,
                        goal_step=cut.goal,
                        path=relative,
                        content_sha256=digest,
                    )
                )
                self.rows.append(self._row(job, cut, arrays, counts, relative, digest))
        finally:
            if source is not None:
                source.close()
        self.entries[job.label] = entries
        self.nan_totals[job.label] = totals

    def _source_file(self, job: LabelJob) -> SourceFile | None:
        path = (self.options.source_files or {}).get(job.label)
        if path is None:
            return None
        alignments = {job.provenance.extra(e, "action_alignment", "out") for e in job.plan.episodes}
        if len(alignments) != 1:
            raise FormatError(
                f"V7 for label {job.label!r}: the sampled episodes come from imports with "
                f"different action alignments {sorted(map(str, alignments))}"
            )
        return SourceFile(path, job.label, str(alignments.pop()))

    def _row(
        self,
        job: LabelJob,
        cut: SegmentCut,
        arrays: dict[str, Any],
        counts: dict[str, int],
        relative: str,
        digest: str,
    ) -> SegmentRow:
        offset = job.layout.offset
        flags = job.layout.flags_written
        return SegmentRow(
            segment_id=cut.segment_id,
            env=job.label,
            index=cut.index,
            path=relative,
            source_episode=cut.episode,
            source_episode_id=cut.source_episode_id,
            source_transitions=cut.transitions,
            start_step=cut.start,
            goal_step=cut.goal,
            offset=offset,
            source_row_start=cut.source_row_start,
            n_observations=offset + 1,
            n_actions=offset,
            terminated_at_goal=bool(arrays["terminated"][offset]) if flags else False,
            truncated_at_goal=bool(arrays["truncated"][offset]) if flags else False,
            nan_counts=counts,
            content_sha256=digest,
        )

    def _environment(self, job: LabelJob) -> EnvironmentEntry:
        layout = job.layout
        pool = job.pool
        extra = (self.options.provenance or {}).get(job.label, {})
        return EnvironmentEntry(
            source={**job.provenance.source_summary(job.plan.episodes), **extra},
            pool=PoolEntry(
                episodes_total=pool.episodes_total,
                pool_limit=pool.pool_limit,
                pool_size=pool.pool_size,
                eligible=len(pool.eligible),
                excluded_nonfinite=pool.excluded_nonfinite,
                ongoing_skipped=pool.ongoing_skipped,
            ),
            fields={
                m.name: FieldEntry(
                    dtype=m.dtype.str,
                    shape=list(m.shape),
                    rows=m.rows,
                    role=m.role,
                    layout=m.layout,
                )
                for m in layout.members
            },
            scalars={name: ScalarEntry(dtype=layout.scalars[name].str) for name in SCALAR_NAMES},
            reset_reward_fill=layout.reset_reward_fill(),
            nan_totals=self.nan_totals[job.label],
            index_column=layout.index_column,
            row_constant_columns=sorted(layout.constants),
            segments=self.entries[job.label],
        )

    def _manifest(self) -> ArchiveManifest:
        opts = self.options
        offset = opts.offset
        try:
            return ArchiveManifest(
                offset=offset,
                n_observations=offset + 1,
                n_actions=offset,
                episodes_per_env=opts.episodes_per_env,
                segments_total=len(self.rows),
                seed=opts.seed,
                env_order=[job.label for job in self.jobs],
                npz=NpzEntry(compression="deflate" if opts.compress else "stored"),
                finite_required={
                    job.label: sorted(job.layout.rules.finite_required) for job in self.jobs
                },
                diagnostic_fields={
                    job.label: sorted(job.layout.rules.diagnostic) for job in self.jobs
                },
                options=opts.model_dump(mode="json", exclude=_EXCLUDED_FROM_RECORD),
                environments={job.label: self._environment(job) for job in self.jobs},
            )
        except ValueError as err:
            raise FormatError(f"cannot record the archive manifest: {err}") from err

    def _script(self) -> str:
        recorded = self.options.model_dump(
            mode="json", by_alias=True, exclude={"source_files", "overwrite"}
        )
        imports: dict[str, Any] = {}
        for job in self.jobs:
            records = job.provenance.records
            covers_pool = (
                len(records) == 1
                and records[0].first == 0
                and records[0].count >= job.pool.pool_size
            )
            imports[job.label] = (
                {
                    "format": records[0].record.get("format"),
                    "options": records[0].record.get("options", {}),
                }
                if covers_pool
                else None
            )
        return build_script(recorded, imports)

    def _check_plans(self, rows_text: str) -> None:
        """V6: distinct episodes, a re-drawn plan equal to the written one, line count."""
        opts = self.options
        for job in self.jobs:
            episodes = [cut.episode for cut in job.cuts]
            again = draw_plan(job.pool, opts.offset, opts.episodes_per_env, opts.seed, job.label)
            written = (tuple(episodes), tuple(cut.start for cut in job.cuts))
            if len(set(episodes)) != opts.episodes_per_env or written != (
                again.episodes,
                again.starts,
            ):
                raise IntegrityError(
                    f"validation V6 failed for label {job.label!r}: the written segments do not "
                    "match a fresh draw of the plan"
                )
        lines = rows_text.count("\n")
        if lines != opts.episodes_per_env * len(self.jobs):
            raise IntegrityError(f"validation V6 failed: {_ROWS} has {lines} lines")


def _walk(root: Path) -> list[str]:
    found = []
    for folder, _, files in os.walk(root):
        found += [(Path(folder) / name).relative_to(root).as_posix() for name in files]
    return found

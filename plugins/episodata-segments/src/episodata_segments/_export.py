"""The ``offset-segments`` exporter: options, report, planning and publishing.

Everything that can reject an export (labels, fields, finiteness exclusions, eligible
counts) is checked per label before the first file is written. The archive is then built
in ``<out>.partial`` and renamed to ``<out>`` only after it validated; any failure
removes the partial folder, so nothing half-written is ever left at ``<out>``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from episodata_core.authoring import coerce_options
from episodata_core.dataset import Dataset
from episodata_core.errors import EpisodataWarning, FormatError
from episodata_core.exporting import stage_folder
from episodata_core.transfer import ImportWarningRecord
from episodata_segments._builder import ArchiveBuilder, LabelJob
from episodata_segments._layout import field_rules, label_layout
from episodata_segments._manifest import LABEL_PATTERN
from episodata_segments._plan import draw_plan, pool_of
from episodata_segments._provenance import Provenance
from episodata_segments._segment import SegmentCut, nonfinite_episodes

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "EnvironmentReport",
    "ExportReport",
    "OffsetSegmentsExportOptions",
    "OffsetSegmentsExporter",
]

DEFAULT_STATE_FIELDS = ("state", "pos_agent", "pos_target", "qpos", "qvel")
DEFAULT_DIAGNOSTIC_FIELDS = ("success", "score", "render_time")


class OffsetSegmentsExportOptions(BaseModel):
    """Options of the ``offset-segments`` exporter (formats.md §3.1)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    offset: int = Field(default=25, ge=1, description="K: transitions per segment.")
    episodes_per_env: int = Field(default=100, ge=1, description="n: segments per label.")
    seed: int = Field(default=42, ge=0, description="Seed of each label's fresh default_rng.")
    pool_limit: int | dict[str, int] | None = Field(
        default=None, description="Pool = the first `limit` episodes by position (per label)."
    )
    fields: list[str] | None = Field(
        default=None, description="Field selection (keys, groups, role/key); None or 'all'."
    )
    state_fields: list[str] = Field(
        default=list(DEFAULT_STATE_FIELDS), description="Fields that must be finite."
    )
    diagnostic_fields: list[str] = Field(
        default=list(DEFAULT_DIAGNOSTIC_FIELDS), description="Fields whose NaNs are kept."
    )
    flags: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="Write terminated/truncated members (auto: if the source had flags).",
    )
    exclude_nonfinite_episodes: bool = Field(
        default=False, description="Leave episodes with non-finite required values out of the pool."
    )
    compress: bool = Field(default=True, description="Deflate NPZ entries (else stored).")
    readme: str | None = Field(default=None, description="README.md text; None writes a default.")
    provenance: dict[str, dict[str, Any]] | None = Field(
        default=None, description="{label: {hf_repo, revision, license, ...}} merged into source."
    )
    include_script: bool = Field(default=True, description="Write build_episodes.py.")
    validate_archive: bool = Field(
        default=True, alias="validate", description="Run checks V1-V8 before publishing."
    )
    overwrite: bool = Field(default=False, description="Replace an existing destination.")
    source_files: dict[str, str] | None = Field(
        default=None, description="{label: original swm .h5}; enables check V7."
    )
    progress: bool = Field(
        default=False, description="Show a bar of the segments written, per label, on stderr."
    )

    @field_validator("fields", mode="before")
    @classmethod
    def _all_fields(cls, value: Any) -> Any:
        if value == "all":
            return None
        return [value] if isinstance(value, str) else value

    @field_validator("pool_limit")
    @classmethod
    def _positive_limit(cls, value: int | dict[str, int] | None) -> int | dict[str, int] | None:
        limits = value.values() if isinstance(value, dict) else [] if value is None else [value]
        if any(limit < 1 for limit in limits):
            raise ValueError(f"pool_limit must be at least 1, got {value!r}")
        return value


class EnvironmentReport(BaseModel):
    """What the export did for one label."""

    episodes_total: int
    pool_size: int
    eligible: int
    excluded_nonfinite: int
    segments: int
    flags_written: bool
    nan_totals: dict[str, int]


class ExportReport(BaseModel):
    """The result of an ``offset-segments`` export."""

    destination: str = Field(description="The published archive folder.")
    segments_total: int
    environments: dict[str, EnvironmentReport]
    files: list[str] = Field(description="Archive files, relative to the root, sorted.")
    validated: bool = Field(description="Whether checks V1-V8 ran (V7 only with source_files).")
    warnings: list[ImportWarningRecord] = Field(default_factory=list)

    def summary(self) -> str:
        """A few human-readable lines for the command line."""
        lines = [f"wrote {self.segments_total} segments to {self.destination}"]
        for label, env in self.environments.items():
            lines.append(
                f"{label}: {env.segments} segments from {env.eligible} eligible of "
                f"{env.pool_size} pooled episodes"
            )
        lines += [f"warning {w.code} (x{w.count}): {w.message}" for w in self.warnings]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Checked:
    labels: tuple[str, ...]
    limits: dict[str, int | None]


class OffsetSegmentsExporter:
    """Exports labelled datasets as an offset-segment NPZ archive (formats.md §3).

    Examples
    --------
    >>> import episodata
    >>> report = episodata.export_datasets(
    ...     "offset-segments", {"pusht": dataset}, "out", offset=25, episodes_per_env=100
    ... )  # doctest: +SKIP
    """

    name: ClassVar[str] = "offset-segments"
    description: ClassVar[str] = (
        "Offset-K segments as one NPZ per segment, with manifests and SHA256SUMS."
    )
    Options: ClassVar[type[BaseModel]] = OffsetSegmentsExportOptions

    def export(
        self, datasets: Mapping[str, Dataset], destination: str, options: BaseModel
    ) -> ExportReport:
        """Sample, write, validate and publish the archive at ``destination``.

        Raises
        ------
        FormatError
            A bad label, field selection or option, or too few eligible episodes.
        NonFiniteError
            A finiteness-required member of a sampled segment holds NaN or inf.
        DatasetStateError
            ``destination`` (or an interrupted ``<destination>.partial``) exists and
            ``overwrite`` is False.
        IntegrityError
            A validation check failed; nothing was published.
        """
        opts = coerce_options(options, OffsetSegmentsExportOptions)
        checked = _check_inputs(datasets, opts)
        staged = stage_folder(destination, overwrite=opts.overwrite)
        jobs = [
            _plan_label(label, datasets[label], opts, checked.limits[label])
            for label in checked.labels
        ]
        with staged.writing() as partial:
            builder = ArchiveBuilder(partial, opts, jobs)
            builder.build()
        out = staged.out
        for record in builder.warnings:
            warnings.warn(record.message, EpisodataWarning, stacklevel=3)
        return ExportReport(
            destination=str(out),
            segments_total=builder.segments_total,
            environments={
                job.label: EnvironmentReport(
                    episodes_total=job.pool.episodes_total,
                    pool_size=job.pool.pool_size,
                    eligible=len(job.pool.eligible),
                    excluded_nonfinite=job.pool.excluded_nonfinite,
                    segments=len(job.cuts),
                    flags_written=job.layout.flags_written,
                    nan_totals=builder.nan_totals[job.label],
                )
                for job in jobs
            },
            files=builder.files,
            validated=opts.validate_archive,
            warnings=builder.warnings,
        )


def _check_inputs(datasets: Mapping[str, Dataset], opts: OffsetSegmentsExportOptions) -> _Checked:
    if not datasets:
        raise FormatError("offset-segments: no datasets to export; pass {label: dataset}")
    for label, dataset in datasets.items():
        if not LABEL_PATTERN.fullmatch(str(label)):
            raise FormatError(
                f"label {label!r} is not allowed: labels become folder names and must match "
                "^[a-z0-9][a-z0-9_-]*$ (lowercase letters, digits, '_' and '-'), e.g. 'pusht'"
            )
        if not isinstance(dataset, Dataset):
            raise FormatError(
                f"label {label!r}: expected a finalized episodata Dataset, got "
                f"{type(dataset).__name__}"
            )
    labels = tuple(sorted(datasets))
    for option in ("provenance", "source_files"):
        given: dict[str, Any] = getattr(opts, option) or {}
        unknown = sorted(set(given) - set(labels))
        if unknown:
            raise FormatError(
                f"{option}: labels {unknown} are not exported (labels: {list(labels)})"
            )
    limit = opts.pool_limit
    if isinstance(limit, dict):
        unknown = sorted(set(limit) - set(labels))
        if unknown:
            raise FormatError(
                f"pool_limit: labels {unknown} are not exported (labels: {list(labels)})"
            )
        limits: dict[str, int | None] = {label: limit.get(label) for label in labels}
    else:
        limits = dict.fromkeys(labels, limit)
    return _Checked(labels=labels, limits=limits)


def _plan_label(
    label: str, dataset: Dataset, opts: OffsetSegmentsExportOptions, limit: int | None
) -> LabelJob:
    offset, count = opts.offset, opts.episodes_per_env
    rules = field_rules(
        dataset.schema, label, opts.fields, opts.state_fields, opts.diagnostic_fields
    )
    provenance = Provenance(dataset.manifest.metadata, label)
    table = dataset.backend.episode_table()
    pool = pool_of(table, offset, limit)
    if opts.exclude_nonfinite_episodes:
        flagged = nonfinite_episodes(dataset, rules.finite_keys, pool.eligible)
        pool = pool_of(table, offset, limit, nonfinite=flagged)
    plan = draw_plan(pool, offset, count, opts.seed, label)
    layout = label_layout(label, offset, rules, provenance, plan.episodes, opts.flags)
    width = max(3, len(str(count - 1)))
    cuts = []
    for index, (episode, start) in enumerate(zip(plan.episodes, plan.starts, strict=True)):
        identifier = provenance.column(episode, "source_episode_id")
        row_offset = provenance.column(episode, "source_row_offset")
        cuts.append(
            SegmentCut(
                label=label,
                index=index,
                segment_id=f"{label}/{index:0{width}d}",
                episode=episode,
                start=start,
                offset=offset,
                transitions=int(pool.lengths[episode]),
                terminated=bool(table.terminated[episode]),
                truncated=bool(table.truncated[episode]),
                source_episode_id=identifier if isinstance(identifier, int | str) else None,
                source_row_start=row_offset + start if isinstance(row_offset, int) else None,
            )
        )
    return LabelJob(
        label=label,
        dataset=dataset,
        provenance=provenance,
        pool=pool,
        plan=plan,
        layout=layout,
        cuts=tuple(cuts),
        file_width=width,
    )

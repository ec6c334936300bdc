"""The ``offset-segments`` importer: an archive back to a dataset (formats.md §3.10).

Each segment becomes one episode of K transitions. Observation and info members give
rows 0..K (the goal is row K, not duplicated); ``action[j - 1]`` becomes action row j;
``reward[j]`` becomes reward row j and ``reward[0]``, the arrival at the start, is
dropped. A segment is a cut, so it is truncated unless its goal row is terminal.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from episodata_core.authoring import coerce_options
from episodata_core.errors import EpisodataImportWarning, FieldNotFoundError, FormatError
from episodata_core.schema import ROLES, DatasetSchema, FieldSpec
from episodata_core.transfer import FieldReport, FlagCounts, ImportReport, ImportResult
from episodata_segments._archive import Archive, load_segment, open_archive
from episodata_segments._manifest import FORMAT

if TYPE_CHECKING:
    import numpy.typing as npt

    from episodata_core.dataset import Dataset

__all__ = [
    "OffsetSegmentsImportOptions",
    "OffsetSegmentsImporter",
    "archive_schema",
    "goal_fields",
    "segment_episode",
]

_GOAL_GROUP = "goal"


class OffsetSegmentsImportOptions(BaseModel):
    """Options of the ``offset-segments`` importer (formats.md §3.10)."""

    model_config = ConfigDict(extra="forbid")

    envs: list[str] | None = Field(default=None, description="Labels to import; None: all.")
    fields: list[str] | None = Field(
        default=None, description="Members to import, by name or '/' group; None: all."
    )
    verify: Literal["full", "none"] = Field(
        default="full",
        description="'full' checks SHA256SUMS and content hashes; 'none' is for tests.",
    )
    goal_as_field: bool = Field(
        default=False, description="Add info fields goal/<obs key> repeating row K on every row."
    )
    strict: bool = Field(default=False, description="Turn warnings into FormatError.")


def _selected(name: str, selectors: list[str] | None) -> bool:
    return selectors is None or any(name == s or name.startswith(s + "/") for s in selectors)


def archive_schema(archive: Archive, options: OffsetSegmentsImportOptions) -> DatasetSchema:
    """One schema for the selected environments; fields some lack become optional."""
    found: dict[str, tuple[str, str, tuple[int, ...], str | None, str]] = {}
    present: dict[str, set[str]] = {}
    for env in archive.envs:
        for name, entry in archive.manifest.environments[env].fields.items():
            if entry.role == "flag" or not _selected(name, options.fields):
                continue
            role, dtype = entry.role, np.dtype(entry.dtype).str
            spec = (role, dtype, tuple(entry.shape), entry.layout, env)
            known = found.get(name)
            if known is None:
                found[name] = spec
            elif (
                known[0] != role
                or known[2:4] != spec[2:4]
                or (known[1] != dtype and not _both_unicode(known[1], dtype))
            ):
                raise FormatError(
                    f"member {name!r} is {known[1]}{list(known[2])} ({known[0]}) in {known[4]!r} "
                    f"but {dtype}{list(spec[2])} ({role}) in {env!r}; one dataset cannot hold "
                    "both: import them separately with envs=[...]"
                )
            elif np.dtype(dtype).itemsize > np.dtype(known[1]).itemsize:
                # strings widen losslessly, so environments with longer names share a field
                found[name] = spec
            present.setdefault(name, set()).add(env)
    for selector in options.fields or []:
        if not any(_selected(name, [selector]) for name in found):
            raise FieldNotFoundError(
                f"fields=: {selector!r} matches no member of envs {archive.envs}"
            )
    specs = []
    for name, (kind, dtype_str, shape, layout, _) in found.items():
        optional = present[name] != set(archive.envs)
        specs.append(_spec(name, kind, dtype_str, shape, layout, optional=optional))
    if not any(s.role == "observation" for s in specs):
        raise FormatError(f"fields={options.fields!r} selects no observation member")
    if options.goal_as_field:
        taken = [s.key for s in specs if s.role == "info" and s.key.split("/")[0] == _GOAL_GROUP]
        if taken:
            raise FormatError(
                f"goal_as_field: info fields {taken} already use the group {_GOAL_GROUP!r}"
            )
        specs += [
            _spec(f"{_GOAL_GROUP}/{s.key}", "info", s.dtype, s.shape, s.layout, optional=s.optional)
            for s in specs
            if s.role == "observation"
        ]
    order = {role: i for i, role in enumerate(ROLES)}
    return DatasetSchema(sorted(specs, key=lambda s: (order[s.role], s.key)))


def _both_unicode(a: str, b: str) -> bool:
    return np.dtype(a).kind == np.dtype(b).kind == "U"


def _spec(
    key: str, role: str, dtype: str, shape: tuple[int, ...], layout: str | None, *, optional: bool
) -> FieldSpec:
    extra: dict[str, Any] = {}
    if layout is not None and np.dtype(dtype) == np.uint8:
        extra = {"low": 0, "high": 255}
    return FieldSpec(
        key, shape=shape, dtype=dtype, role=role, layout=layout, optional=optional, **extra
    )


def goal_fields(schema: DatasetSchema, options: OffsetSegmentsImportOptions) -> dict[str, str]:
    """``{info key: observation key}`` of the ``goal/<obs key>`` fields, if requested."""
    if not options.goal_as_field:
        return {}
    return {f"{_GOAL_GROUP}/{s.key}": s.key for s in schema.by_role("observation")}


def segment_episode(
    arrays: dict[str, npt.NDArray[Any]],
    schema: DatasetSchema,
    offset: int,
    goals: dict[str, str],
) -> dict[str, Any]:
    """The action-in bulk episode of one segment's members."""
    by_role: dict[str, dict[str, npt.NDArray[Any]]] = {role: {} for role in ROLES}
    for spec in schema:
        if spec.role == "info" and spec.key in goals:
            goal = arrays.get(goals[spec.key])
            if goal is not None:
                # the goal is row K of the observation, repeated on every row
                by_role["info"][spec.key] = np.repeat(goal[offset : offset + 1], offset + 1, axis=0)
            continue
        value = arrays.get(spec.key)
        if value is not None:
            by_role[spec.role][spec.key] = value
    episode: dict[str, Any] = {
        "initial_observation": {k: v[0] for k, v in by_role["observation"].items()},
        "observations": {k: v[1:] for k, v in by_role["observation"].items()},
    }
    if by_role["action"]:
        episode["actions"] = by_role["action"]
    if by_role["reward"]:
        # reward[j] arrived at obs[j]; reward[0] belongs to the step before the segment
        episode["rewards"] = {k: v[1:] for k, v in by_role["reward"].items()}
    if by_role["info"]:
        episode["initial_info"] = {k: v[0] for k, v in by_role["info"].items()}
        episode["infos"] = {k: v[1:] for k, v in by_role["info"].items()}
    terminated = bool(arrays["terminated"][offset]) if "terminated" in arrays else False
    truncated_at_goal = bool(arrays["truncated"][offset]) if "truncated" in arrays else False
    episode["terminated"] = terminated
    episode["truncated"] = (not terminated) or truncated_at_goal
    return episode


class OffsetSegmentsImporter:
    """Reads an offset-segment archive back as a dataset, one episode per segment.

    Examples
    --------
    >>> import episodata
    >>> dataset, report = episodata.import_dataset("offset-segments", "out")  # doctest: +SKIP
    """

    name: ClassVar[str] = "offset-segments"
    description: ClassVar[str] = "Offset-segment NPZ archives (SHA256SUMS verified first)."
    Options: ClassVar[type[BaseModel]] = OffsetSegmentsImportOptions

    def __init__(self) -> None:
        self._opened: dict[tuple[str, str], Archive] = {}

    def _archive(self, source: str, options: OffsetSegmentsImportOptions) -> Archive:
        key = (source, options.model_dump_json())
        archive = self._opened.get(key)
        if archive is None:
            archive = open_archive(source, options.envs, verify=options.verify == "full")
            for record in archive.warnings:
                if options.strict:
                    raise FormatError(f"{record.code}: {record.message} (strict=True)")
                warnings.warn(
                    f"{record.code}: {record.message}", EpisodataImportWarning, stacklevel=4
                )
            self._opened[key] = archive
        return archive

    def read_schema(self, source: str, options: BaseModel) -> DatasetSchema:
        """The schema of the imported episodes; verifies ``SHA256SUMS`` first."""
        opts = coerce_options(options, OffsetSegmentsImportOptions)
        return archive_schema(self._archive(source, opts), opts)

    def import_into(self, source: str, dataset: Dataset, options: BaseModel) -> ImportResult:
        """Check every segment file, then append one episode per segment."""
        opts = coerce_options(options, OffsetSegmentsImportOptions)
        archive = self._archive(source, opts)
        verify = opts.verify == "full"
        schema = archive_schema(archive, opts)
        goals = goal_fields(schema, opts)
        k = archive.offset
        # every rejecting check runs before the first write: load and check each file once
        for row in archive.rows:
            load_segment(archive, row, verify=verify)
        columns: dict[str, list[Any]] = {
            name: []
            for name in (
                "env",
                "segment_id",
                "source_episode",
                "source_episode_id",
                "start_step",
                "goal_step",
                "offset",
                "goal_row",
            )
        }
        flags = FlagCounts()
        for row in archive.rows:
            arrays = load_segment(archive, row, verify=verify)
            episode = segment_episode(arrays, schema, k, goals)
            dataset.add_episode(episode)
            terminated, truncated = episode["terminated"], episode["truncated"]
            flags.terminated += int(terminated)
            flags.truncated += int(truncated)
            flags.both += int(terminated and truncated)
            values = (
                row.env,
                row.segment_id,
                row.source_episode,
                row.source_episode_id,
                row.start_step,
                row.goal_step,
                row.offset,
                k,
            )
            for name, value in zip(columns, values, strict=True):
                columns[name].append(value)
        report = self._report(archive, schema, flags, goals)
        return ImportResult(report=report, record=self._record(archive, columns))

    def _report(
        self, archive: Archive, schema: DatasetSchema, flags: FlagCounts, goals: dict[str, str]
    ) -> ImportReport:
        k = archive.offset
        count = len(archive.rows)
        return ImportReport(
            rows_read=count * (k + 1),
            episodes_found=count,
            episodes_imported=count,
            transitions=count * k,
            final_obs_source={"goal_row": count},
            flag_counts=flags,
            warnings=archive.warnings,
            fields={
                spec.qualified_key: FieldReport(
                    role=spec.role,
                    dtype=spec.dtype,
                    shape=spec.shape,
                    source_key=goals.get(spec.key, spec.key) if spec.role == "info" else spec.key,
                )
                for spec in schema
            },
        )

    def _record(self, archive: Archive, columns: dict[str, list[Any]]) -> dict[str, Any]:
        manifest = archive.manifest
        sums = archive.checksums
        return {
            "format": self.name,
            "source": {
                "file": archive.root.name,
                "bytes": None if sums is None else sums.total_bytes,
                "sha256": None,
                "archive_format": FORMAT,
                "format_version": manifest.format_version,
                "offset": manifest.offset,
                "seed": manifest.seed,
                "env_order": list(manifest.env_order),
                "envs": list(archive.envs),
                "segments_total": manifest.segments_total,
                "flags_present": all(
                    "terminated" in manifest.environments[env].fields for env in archive.envs
                ),
            },
            "alignment": {"source_convention": "action-out", "converted_at_import": True},
            "episodes": columns,
        }

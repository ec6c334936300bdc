"""Import and export drivers: run an importer or exporter plugin by name.

The drivers own what every importer would otherwise repeat: resolving the plugin and
validating its options, creating the destination (marked incomplete until the import
is recorded, and removed again if the import fails), checking an appended-to dataset's schema, and recording the import in the
dataset metadata (``metadata["imports"]``, formats.md §0.2).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from episodata_core import _creation, registry
from episodata_core._bulk import BulkWrite
from episodata_core._options import validate_options
from episodata_core._progress import episode_progress
from episodata_core.dataset import Dataset
from episodata_core.errors import FormatError
from episodata_core.manifest import Incomplete

if TYPE_CHECKING:
    from collections.abc import Mapping

    from episodata_core.schema import DatasetSchema

__all__ = [
    "FieldReport",
    "FlagCounts",
    "ImportReport",
    "ImportResult",
    "ImportWarningRecord",
    "export_datasets",
    "import_dataset",
]


class ImportWarningRecord(BaseModel):
    """One kind of oddity met during an import, with how often it occurred."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Stable identifier, e.g. 'nan_last_action'.")
    message: str = Field(description="What was found and what was done about it.")
    count: int = Field(default=1, ge=0, description="How many rows or episodes it concerns.")


class FlagCounts(BaseModel):
    """How imported episodes ended."""

    model_config = ConfigDict(extra="forbid")

    terminated: int = 0
    truncated: int = 0
    both: int = 0
    unflagged_end: int = 0


class FieldReport(BaseModel):
    """Where an imported field came from."""

    model_config = ConfigDict(extra="forbid")

    role: str
    dtype: str
    shape: tuple[int, ...]
    source_key: str


class ImportReport(BaseModel):
    """What an import read, wrote, skipped and dropped (formats.md §0.2)."""

    model_config = ConfigDict(extra="forbid")

    rows_read: int = Field(default=0, description="Source rows read.")
    episodes_found: int = Field(default=0, description="Episodes present in the source.")
    episodes_imported: int = Field(default=0, description="Episodes written.")
    episodes_skipped: dict[str, int] = Field(
        default_factory=dict, description="Skipped episodes by reason."
    )
    transitions: int = Field(default=0, description="Transitions written.")
    final_transitions_dropped: int = Field(
        default=0, description="Last steps dropped because no final observation was known."
    )
    final_obs_source: dict[str, int] = Field(
        default_factory=dict, description="Where final observations came from, by source."
    )
    flag_counts: FlagCounts = Field(default_factory=FlagCounts)
    warnings: list[ImportWarningRecord] = Field(default_factory=list)
    fields: dict[str, FieldReport] = Field(default_factory=dict)

    def summary(self) -> str:
        """A few human-readable lines for the command line."""
        flags = self.flag_counts
        lines = [
            f"episodes: {self.episodes_imported} imported of {self.episodes_found} found"
            + (f", skipped {dict(self.episodes_skipped)}" if self.episodes_skipped else ""),
            (
                f"transitions: {self.transitions} (final transitions dropped: "
                f"{self.final_transitions_dropped})"
            ),
            (
                f"ends: terminated {flags.terminated}, truncated {flags.truncated}, both "
                f"{flags.both}, unflagged {flags.unflagged_end}"
            ),
        ]
        lines += [f"warning {w.code} (x{w.count}): {w.message}" for w in self.warnings]
        return "\n".join(lines)


class ImportResult(BaseModel):
    """What an importer returns: its report and the record stored in the metadata.

    ``record`` holds ``format``, ``source``, ``alignment``, ``options`` and the
    columnar ``episodes`` provenance table; the driver adds ``report``,
    ``first_episode_id`` and ``episode_count``.
    """

    model_config = ConfigDict(extra="forbid")

    report: ImportReport
    record: dict[str, Any] = Field(default_factory=dict)


def import_dataset(
    importer: str,
    source: str | os.PathLike[str],
    destination: Dataset | str | os.PathLike[str] | None = None,
    *,
    backend: str | None = None,
    progress: bool = False,
    **options: Any,
) -> tuple[Dataset, ImportReport]:
    """Import ``source`` with the importer registered as ``importer``.

    ``destination`` is a new path (created, removed again if the import fails), ``None``
    (a memory dataset) or an existing :class:`Dataset` to append to, whose schema must
    then equal the source's exactly. ``options`` go to the importer's ``Options``.
    ``progress=True`` shows the episodes written (count, MB, MB/s) on stderr.
    Returns the dataset and the :class:`ImportReport`.
    """
    importer_cls: Any = registry.get_importer(importer)
    opts = validate_options(importer_cls, options, f"importer {importer!r} option")
    plugin = importer_cls()
    source_path = os.fspath(source)
    schema: DatasetSchema = plugin.read_schema(source_path, opts)
    bulk: BulkWrite | None = None
    if isinstance(destination, Dataset):
        dataset = destination
        _check_same_schema(dataset.schema, schema, source_path)
    else:
        # marked incomplete until the import is recorded; a failed import removes it
        dataset, created = _creation.create(
            Dataset,
            schema,
            destination,
            backend=backend,
            metadata=None,
            options={},
            incomplete=Incomplete(operation="import", source=source_path),
        )
        bulk = BulkWrite(dataset, created)
    first = dataset.num_episodes
    try:
        with episode_progress(dataset, enabled=progress, action=f"importing {importer}"):
            result: ImportResult = plugin.import_into(source_path, dataset, opts)
    except BaseException as err:
        if bulk is not None:
            bulk.fail(err)
        elif dataset.num_episodes > first:
            err.add_note(
                f"episodes {first}..{dataset.num_episodes - 1} of the destination were "
                "written before the failure"
            )
        raise
    record = {
        **result.record,
        "format": result.record.get("format", importer),
        "options": opts.model_dump(mode="json"),
        "report": result.report.model_dump(mode="json"),
        "first_episode_id": first,
        "episode_count": dataset.num_episodes - first,
    }
    imports = [*dataset.manifest.metadata.get("imports", []), record]
    dataset.update_metadata({"imports": imports})
    if bulk is not None:
        bulk.finish()
    return dataset, result.report


def _check_same_schema(existing: DatasetSchema, incoming: DatasetSchema, source: str) -> None:
    if existing == incoming:
        return
    have = {spec.qualified_key: spec for spec in existing}
    want = {spec.qualified_key: spec for spec in incoming}
    problems = [f"missing {key}" for key in want.keys() - have.keys()]
    problems += [f"extra {key}" for key in have.keys() - want.keys()]
    for key in have.keys() & want.keys():
        a, b = have[key], want[key]
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            problems.append(
                f"{key}: dataset {a.dtype}{list(a.shape)}, source {b.dtype}{list(b.shape)}"
            )
    raise FormatError(
        f"{source!r} does not fit the destination's schema ({'; '.join(sorted(problems)) or 'field order or metadata differs'}); "
        "import into a new dataset instead"
    )


def export_datasets(
    exporter: str,
    datasets: Dataset | Mapping[str, Dataset],
    destination: str | os.PathLike[str],
    *,
    progress: bool = False,
    **options: Any,
) -> Any:
    """Export one dataset, or several labelled ones, with the exporter named ``exporter``.

    ``progress=True`` asks an exporter whose options have a ``progress`` field (the
    offset-segments exporter does) to show a bar. Returns the exporter's report.
    """
    exporter_cls: Any = registry.get_exporter(exporter)
    if progress and "progress" in getattr(exporter_cls.Options, "model_fields", {}):
        options.setdefault("progress", True)
    opts = validate_options(exporter_cls, options, f"exporter {exporter!r} option")
    labelled = {"dataset": datasets} if isinstance(datasets, Dataset) else dict(datasets)
    return exporter_cls().export(labelled, os.fspath(destination), opts)

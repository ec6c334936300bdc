"""Importing several files into one dataset, in this process or from shards made elsewhere.

A pipeline source may name several files. :func:`import_files` imports them in turn
into one destination that stays marked incomplete until the last file is recorded, so
an interrupted run never leaves a dataset that looks complete. An executor that imports
the files elsewhere (one task per file, each writing its episodes as a shard dataset)
hands the shards to an :class:`ImportTarget`, which appends them in file order and
records each file's import exactly as :func:`import_files` does: the two results are
equal episode for episode, in ids, flags, values and metadata.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from episodata_core import _creation, registry
from episodata_core._batching import add_rows, nbytes_of
from episodata_core._bulk import BulkWrite
from episodata_core._options import validate_options
from episodata_core.dataset import Dataset
from episodata_core.errors import FormatError
from episodata_core.manifest import Incomplete
from episodata_core.protocols import EpisodeRows
from episodata_core.transfer import FlagCounts, ImportReport, _check_same_schema, import_dataset

if TYPE_CHECKING:
    from collections.abc import Sequence

    from episodata_core.schema import DatasetSchema

__all__ = ["ImportRequest", "ImportTarget", "import_files", "merge_reports"]


@dataclass(frozen=True)
class ImportRequest:
    """What a pipeline's source step imports: ``files`` with one importer, into one place.

    ``destination`` is a new dataset location, or ``None`` for a memory dataset.
    """

    importer: str
    files: tuple[str, ...]
    destination: str | None
    backend: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def importer_class(self) -> Any:
        """The importer's class, looked up in the registry."""
        return registry.get_importer(self.importer)

    def read_schema(self, file: str) -> DatasetSchema:
        """The schema ``file`` imports with; reads the file's metadata only."""
        cls = self.importer_class()
        opts = validate_options(cls, self.options, f"importer {self.importer!r} option")
        schema: DatasetSchema = cls().read_schema(file, opts)
        return schema


def merge_reports(reports: Sequence[ImportReport]) -> ImportReport:
    """One report for several files: counts added, warnings summed by code, fields of the first."""
    if len(reports) == 1:
        return reports[0]
    merged = ImportReport()
    flags = FlagCounts()
    for report in reports:
        merged.rows_read += report.rows_read
        merged.episodes_found += report.episodes_found
        merged.episodes_imported += report.episodes_imported
        merged.transitions += report.transitions
        merged.final_transitions_dropped += report.final_transitions_dropped
        for reason, count in report.episodes_skipped.items():
            merged.episodes_skipped[reason] = merged.episodes_skipped.get(reason, 0) + count
        for source, count in report.final_obs_source.items():
            merged.final_obs_source[source] = merged.final_obs_source.get(source, 0) + count
        for name in ("terminated", "truncated", "both", "unflagged_end"):
            setattr(flags, name, getattr(flags, name) + getattr(report.flag_counts, name))
        for warning in report.warnings:
            same = next((w for w in merged.warnings if w.code == warning.code), None)
            if same is None:
                merged.warnings.append(warning.model_copy())
            else:
                same.count += warning.count
        if not merged.fields:
            merged.fields = dict(report.fields)
    merged.flag_counts = flags
    return merged


class ImportTarget:
    """A new dataset for a several-file import, marked incomplete until :meth:`finish`.

    Use as a context manager: an error removes what was created; an interrupt
    (``KeyboardInterrupt``) leaves the dataset marked incomplete, which a rerun replaces.
    """

    def __init__(self, request: ImportRequest, schema: DatasetSchema) -> None:
        files = request.files
        source = files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more files"
        self.request = request
        self.reports: list[ImportReport] = []
        self.dataset, created = _creation.create(
            Dataset,
            schema,
            request.destination,
            backend=request.backend,
            metadata=None,
            options={},
            incomplete=Incomplete(operation="import", source=source),
        )
        self._bulk = BulkWrite(self.dataset, created)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if error is not None:
            self._bulk.fail(error)

    def import_file(self, file: str, *, progress: bool = False) -> ImportReport:
        """Import ``file`` here, in this process, after what is already written."""
        request = self.request
        _, report = import_dataset(
            request.importer, file, self.dataset, progress=progress, **request.options
        )
        self.reports.append(report)
        self._bulk.progress(now=True)
        return report

    def append_shard(
        self, shard: Dataset, file: str, report: ImportReport | None = None
    ) -> ImportReport:
        """Append the episodes of ``shard``, one file's import made elsewhere, and its record.

        ``shard`` is a complete dataset made by :func:`import_dataset` of ``file`` alone;
        its episodes get the next ids here, and its import record is added with
        ``first_episode_id`` moved to where they landed. ``report`` is the importer's
        report of that import (its own subclass); without it the record's copy is read
        back, as a plain :class:`ImportReport`.
        """
        target = self.dataset
        _check_same_schema(target.schema, shard.schema, file)
        records = shard.manifest.metadata.get("imports", [])
        if len(records) != 1:
            raise FormatError(
                f"shard {shard.location!r} of {file!r} holds {len(records)} import records, "
                "expected 1; delete the staging area and run the pipeline again"
            )
        first = target.num_episodes
        append_episodes(shard, target)
        record = {**records[0], "first_episode_id": first}
        others = {k: v for k, v in shard.manifest.metadata.items() if k != "imports"}
        imports = [*target.manifest.metadata.get("imports", []), record]
        target.update_metadata({**others, "imports": imports})
        if report is None:
            known = {k: v for k, v in record["report"].items() if k in ImportReport.model_fields}
            report = ImportReport.model_validate(known)
        self.reports.append(report)
        self._bulk.progress(now=True)
        return report

    def finish(self) -> tuple[Dataset, ImportReport]:
        """Make everything durable and clear the incomplete mark; the dataset and report."""
        self._bulk.finish()
        return self.dataset, merge_reports(self.reports)


def append_episodes(source: Dataset, target: Dataset, max_bytes: int = 64 << 20) -> None:
    """Every episode of ``source`` after those of ``target``, in order, in batches."""
    table = source.backend.episode_table()
    keys = source.schema.qualified_keys
    pending: list[EpisodeRows] = []
    size = 0
    for index in range(len(table)):
        if table.ongoing[index]:
            raise FormatError(
                f"shard {source.location!r}: episode {index} is not finalized; an import "
                "writes finalized episodes only. Delete the staging area and run again"
            )
        fields = [key for key in keys if key not in table.present or table.present[key][index]]
        rows = source.backend.read_rows(index, 0, int(table.length[index]) + 1, fields)
        pending.append(
            EpisodeRows(
                rows,
                terminated=bool(table.terminated[index]),
                truncated=bool(table.truncated[index]),
            )
        )
        size += nbytes_of(rows)
        if size >= max_bytes:
            with target.access.lock:
                add_rows(target.backend, pending)
            pending, size = [], 0
    with target.access.lock:
        add_rows(target.backend, pending)


def import_files(request: ImportRequest, *, progress: bool = False) -> tuple[Dataset, ImportReport]:
    """Import every file of ``request`` in turn into one new dataset, in this process.

    One file is exactly :func:`import_dataset`. With several, the destination is marked
    incomplete until the last file is recorded; each file's import is recorded in
    ``metadata["imports"]``. Returns the dataset and the files' reports merged.
    ``progress=True`` shows the episodes written of each file.
    """
    files = request.files
    if len(files) == 1:
        return import_dataset(
            request.importer,
            files[0],
            request.destination,
            backend=request.backend,
            progress=progress,
            **request.options,
        )
    schema = request.read_schema(files[0])
    with ImportTarget(request, schema) as target:
        for file in files:
            target.import_file(os.fspath(file), progress=progress)
        return target.finish()

"""``ExporterTests``: the conformance tests every exporter passes.

An exporter's test module subclasses it, names the class under test and provides
labelled datasets with the options to export them and an oracle::

    class TestMyExporter(ExporterTests[MyExporter]):
        exporter_cls = MyExporter
        round_trip_importer = "my-format"  # optional: the importer that reads it back

        def export_cases(self) -> list[ExportCase]:
            datasets, oracle = my_case()
            return [ExportCase(datasets, {"seed": 1}, oracle, round_trip=expected)]

        def check_export(self, destination: Path, case: ExportCase) -> None:  # optional
            ...  # compare the written files with case.oracle

        def failing_exports(self) -> list[FailingExport]:  # optional
            return [FailingExport(bad_datasets, {}, FormatError, "offending field")]

Exports run through :func:`episodata_core.transfer.export_datasets`, by registered name.
The kit checks what every exporter promises: reproducible bytes, no clobbering of an
existing destination, nothing left behind by a failed export, and (given a matching
importer) an archive that imports back to what the subclass's oracle expects.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import pytest

from episodata_core.errors import EpisodataError
from episodata_core.protocols import Exporter
from episodata_core.testing.oracle import (
    ExpectedImport,
    assert_dataset_matches,
    assert_report_matches,
    backend_problem,
    checked_import,
)
from episodata_core.testing.packaging import PackagingTests
from episodata_core.transfer import export_datasets

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from episodata_core.dataset import Dataset
    from episodata_core.registry import PluginKind
    from episodata_core.transfer import ImportReport

__all__ = ["ExportCase", "ExporterTests", "FailingExport", "tree_digest"]

ExporterT = TypeVar("ExporterT", bound=Exporter)


@dataclass(frozen=True)
class ExportCase:
    """Labelled datasets, the exporter options to export them with, and their oracles.

    ``oracle`` is whatever :meth:`ExporterTests.check_export` compares the written files
    with; ``round_trip`` what importing the export back with the subclass's
    ``round_trip_importer`` must give.
    """

    datasets: Mapping[str, Dataset]
    options: Mapping[str, Any] = field(default_factory=dict)
    oracle: Any = None
    round_trip: ExpectedImport | None = None
    name: str = "case"


@dataclass(frozen=True)
class FailingExport:
    """An export that must fail with ``error`` (message matching ``match``)."""

    datasets: Mapping[str, Dataset]
    options: Mapping[str, Any] = field(default_factory=dict)
    error: type[BaseException] | tuple[type[BaseException], ...] = EpisodataError
    match: str | None = None


def tree_digest(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` (``/`` separators)."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _state(datasets: Mapping[str, Dataset]) -> dict[str, tuple[int, int, str]]:
    return {
        label: (
            dataset.num_episodes,
            dataset.num_steps,
            json.dumps(dataset.manifest.metadata, sort_keys=True),
        )
        for label, dataset in datasets.items()
    }


Exported = tuple[ExportCase, Path, Any]


class ExporterTests(PackagingTests, Generic[ExporterT]):
    """Conformance tests for an :class:`~episodata_core.protocols.Exporter`.

    Subclasses set ``exporter_cls`` and implement :meth:`export_cases`; they may set
    ``round_trip_importer`` and implement :meth:`check_export`,
    :meth:`check_round_trip` and :meth:`failing_exports`.
    """

    plugin_kind: ClassVar[PluginKind] = "exporter"
    exporter_cls: type[ExporterT]
    """The exporter class under test (set it in the subclass's body)."""
    #: registered name of the importer that reads this exporter's output back, if any
    round_trip_importer: ClassVar[str | None] = None

    @property
    def plugin_cls(self) -> type:
        """The class the packaging tests check: :attr:`exporter_cls`."""
        return self.exporter_cls

    # -- hooks a subclass implements ------------------------------------------------------

    def export_cases(self) -> Sequence[ExportCase]:
        """The datasets to export, with options and oracles."""
        raise NotImplementedError(f"{type(self).__name__} must implement export_cases()")

    def failing_exports(self) -> Sequence[FailingExport]:
        """Exports that must fail; none by default."""
        return ()

    def check_export(self, destination: Path, case: ExportCase, report: Any) -> None:
        """Compare the files at ``destination`` with ``case.oracle``; nothing by default."""

    def check_round_trip(self, dataset: Dataset, report: ImportReport, case: ExportCase) -> None:
        """The export of ``case``, imported back, matches ``case.round_trip``."""
        assert case.round_trip is not None, (
            f"{case.name}: set round_trip= on the ExportCase or override check_round_trip()"
        )
        assert dataset.num_episodes == len(case.round_trip.episodes), case.name
        assert_dataset_matches(dataset, case.round_trip, where=f"{case.name} round trip")
        assert_report_matches(report, case.round_trip, f"{case.name} round trip")

    # -- fixtures and helpers -------------------------------------------------------------

    def export(self, case: ExportCase, destination: Path, **options: Any) -> Any:
        """Export ``case`` to ``destination`` by registered name; ``options`` override."""
        return export_datasets(
            self.exporter_cls.name, case.datasets, destination, **{**case.options, **options}
        )

    @pytest.fixture(scope="class")
    @classmethod
    def exported(cls, tmp_path_factory: pytest.TempPathFactory) -> list[Exported]:
        """Each case exported once per test class: ``(case, destination, report)``."""
        tests = cls()
        cases = tests.export_cases()
        assert cases, "export_cases() returned no cases"
        done: list[Exported] = []
        for position, case in enumerate(cases):
            destination = tmp_path_factory.mktemp(f"export-{position}") / "out"
            done.append((case, destination, tests.export(case, destination)))
        return done

    # -- the written files ----------------------------------------------------------------

    def test_export_matches_the_oracle(self, exported: list[Exported]) -> None:
        if type(self).check_export is ExporterTests.check_export:
            pytest.skip(f"{type(self).__name__} does not override check_export()")
        for case, destination, report in exported:
            self.check_export(destination, case, report)

    def test_export_is_reproducible(self, exported: list[Exported], tmp_path: Path) -> None:
        for position, (case, destination, _) in enumerate(exported):
            first = tree_digest(destination)
            assert first, f"{case.name}: the export wrote no files"
            # only the destination itself: no temporary siblings left behind
            assert [p.name for p in destination.parent.iterdir()] == [destination.name]
            before = _state(case.datasets)
            # a second export elsewhere, under the same name, gives the same bytes
            again = tmp_path / str(position) / destination.name
            self.export(case, again)
            assert tree_digest(again) == first, f"{case.name}: a second export differs"
            assert _state(case.datasets) == before, f"{case.name}: the export changed a dataset"

    @pytest.mark.parametrize("backend", ["npz_directory", "zarr"])
    def test_export_does_not_depend_on_the_backend(
        self, exported: list[Exported], tmp_path: Path, backend: str
    ) -> None:
        problem = backend_problem(backend)
        if problem is not None:
            pytest.skip(problem)
        for position, (case, destination, _) in enumerate(exported):
            copies = {
                label: dataset.copy_to(tmp_path / f"{position}-{label}", backend=backend)
                for label, dataset in case.datasets.items()
            }
            try:
                again = tmp_path / str(position) / destination.name
                self.export(replace(case, datasets=copies), again)
            finally:
                for copy in copies.values():
                    copy.close()
            assert tree_digest(again) == tree_digest(destination), f"{case.name} from {backend}"

    def test_refuses_an_existing_destination(
        self, exported: list[Exported], tmp_path: Path
    ) -> None:
        case, fresh, _ = exported[0]
        destination = tmp_path / fresh.name
        destination.mkdir()
        (destination / "keep.txt").write_text("mine")
        with pytest.raises((EpisodataError, FileExistsError)):
            self.export(case, destination)
        assert tree_digest(destination) == {"keep.txt": hashlib.sha256(b"mine").hexdigest()}
        assert [p.name for p in tmp_path.iterdir()] == [destination.name]
        if "overwrite" not in self.exporter_cls.Options.model_fields:
            return
        self.export(case, destination, overwrite=True)
        # the replaced archive is the fresh one: overwrite changes where, never what
        assert tree_digest(destination) == tree_digest(fresh), f"{case.name}: overwrite=True"
        assert [p.name for p in tmp_path.iterdir()] == [destination.name]

    def test_failed_export_leaves_nothing(self, tmp_path: Path) -> None:
        failing = self.failing_exports()
        if not failing:
            pytest.skip(f"{type(self).__name__} defines no failing_exports()")
        for position, bad in enumerate(failing):
            parent = tmp_path / str(position)
            parent.mkdir()
            before = _state(bad.datasets)
            with pytest.raises(bad.error, match=bad.match):
                export_datasets(self.exporter_cls.name, bad.datasets, parent / "out", **bad.options)
            assert list(parent.iterdir()) == [], f"failing export {position} left files"
            assert _state(bad.datasets) == before

    # -- reading it back ------------------------------------------------------------------

    def test_round_trip(self, exported: list[Exported]) -> None:
        if self.round_trip_importer is None:
            pytest.skip(f"{type(self).__name__} names no round_trip_importer")
        for case, destination, _ in exported:
            expected = case.round_trip or ExpectedImport(episodes=())
            dataset, report = checked_import(
                self.round_trip_importer, os.fspath(destination), expected
            )
            self.check_round_trip(dataset, report, case)

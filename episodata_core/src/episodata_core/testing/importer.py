"""``ImporterTests``: the conformance tests every importer passes (oracle types: ``oracle``).

An importer's test module subclasses it, names the class under test and builds tiny
local source files, each with an oracle of the episodes it must give::

    class TestMyImporter(ImporterTests[MyImporter]):
        importer_cls = MyImporter

        def import_cases(self, directory: Path) -> list[tuple[Path, ExpectedImport]]:
            path = write_my_file(directory / "tiny.bin")
            return [(path, ExpectedImport(episodes=[ExpectedEpisode(...), ...]))]

        def bad_sources(self, directory: Path) -> list[BadSource]:  # optional
            return [BadSource(write_broken_file(directory / "bad.bin"), FormatError)]

Imports run through :func:`episodata_core.transfer.import_dataset`, by registered name,
into memory and into the persistent backends that are installed. The expected values
come from the oracle (written by the fixture's author from the arrays the fixture
generates), never from the importer under test.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import pytest

from episodata_core.dataset import Dataset
from episodata_core.protocols import Importer
from episodata_core.testing.oracle import (
    BadSource,
    ExpectedImport,
    assert_dataset_matches,
    assert_report_fields,
    assert_report_matches,
    backend_problem,
    checked_import,
)
from episodata_core.testing.packaging import HEAVY_MODULES, PackagingTests
from episodata_core.transfer import import_dataset

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from episodata_core.registry import PluginKind
    from episodata_core.transfer import ImportReport

__all__ = ["HEAVY_MODULES", "ImporterTests"]  # HEAVY_MODULES: where it was first defined

ImporterT = TypeVar("ImporterT", bound=Importer)

# -- the test class -----------------------------------------------------------------------

Case = tuple[str, ExpectedImport]


class ImporterTests(PackagingTests, Generic[ImporterT]):
    """Conformance tests for an :class:`~episodata_core.protocols.Importer`.

    Subclasses set ``importer_cls`` and implement :meth:`import_cases`; they may
    implement :meth:`bad_sources`, set ``persistent_backends`` and ``heavy_modules``.
    """

    plugin_kind: ClassVar[PluginKind] = "importer"
    importer_cls: type[ImporterT]
    """The importer class under test (set it in the subclass's body)."""
    #: backends the persistent-import test tries (each skipped when not installed)
    persistent_backends: ClassVar[tuple[str, ...]] = ("npz_directory", "zarr")

    @property
    def plugin_cls(self) -> type:
        """The class the packaging tests check: :attr:`importer_cls`."""
        return self.importer_cls

    # -- hooks a subclass implements ------------------------------------------------------

    def import_cases(
        self, directory: Path
    ) -> Sequence[tuple[str | os.PathLike[str], ExpectedImport]]:
        """Write tiny sources into ``directory``; return ``(source, oracle)`` pairs."""
        raise NotImplementedError(f"{type(self).__name__} must implement import_cases()")

    def bad_sources(self, directory: Path) -> Sequence[BadSource]:
        """Write sources the importer must reject into ``directory``; none by default."""
        return ()

    # -- fixtures and helpers -------------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def cases(cls, tmp_path_factory: pytest.TempPathFactory) -> list[Case]:
        """The subclass's import cases, built once per test class."""
        directory = tmp_path_factory.mktemp(f"{cls.importer_cls.name}-sources")
        made = cls().import_cases(directory)
        built = [(os.fspath(source), oracle) for source, oracle in made]
        assert built, "import_cases() returned no cases"
        return built

    def run_import(
        self,
        source: str,
        expected: ExpectedImport,
        destination: Dataset | str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> tuple[Dataset, ImportReport]:
        """Import by registered name; the emitted warnings must be the expected codes."""
        return checked_import(self.importer_cls.name, source, expected, destination, **kwargs)

    def check_record(
        self, record: Mapping[str, Any], source: str, expected: ExpectedImport, first: int
    ) -> None:
        """The ``metadata["imports"]`` record of one import (formats.md §0.2)."""
        where = f"{Path(source).name} import record"
        assert record["format"] == self.importer_cls.name, where
        assert record["source"]["file"] == Path(source).name, where
        assert {"bytes", "sha256"} <= set(record["source"]), where
        if Path(source).is_file():
            size = Path(source).stat().st_size
            assert record["source"]["bytes"] == size, f"{where}: source bytes"
        if not expected.options.get("hash_source", False):
            assert record["source"]["sha256"] is None, f"{where}: sha256 without hash_source"
        for key, value in expected.source.items():
            assert record["source"][key] == value, f"{where}: source {key}"
        alignment = record["alignment"]
        assert alignment["source_convention"] in ("action-out", "action-in"), where
        assert alignment["converted_at_import"] is True, where
        options = self.importer_cls.Options(**expected.options).model_dump(mode="json")
        assert record["options"] == options, where
        assert record["first_episode_id"] == first, where
        count = len(expected.episodes)
        assert record["episode_count"] == count, where
        columns = record["episodes"]
        for name, column in columns.items():
            assert len(column) == count, f"{where}: provenance column {name!r}"
        for name, column in expected.provenance.items():
            assert columns[name] == list(column), f"{where}: provenance column {name!r}"

    # -- imports against the oracle -------------------------------------------------------

    def test_read_schema_is_the_imported_schema(self, cases: list[Case]) -> None:
        for source, expected in cases:
            schema = self.importer_cls().read_schema(
                source, self.importer_cls.Options(**expected.options)
            )
            dataset, _ = self.run_import(source, expected)
            assert schema == dataset.schema, Path(source).name

    def test_transitions_match_the_oracle(self, cases: list[Case]) -> None:
        for source, expected in cases:
            dataset, _ = self.run_import(source, expected)
            assert dataset.num_episodes == len(expected.episodes), Path(source).name
            assert_dataset_matches(dataset, expected, where=Path(source).name)

    def test_report_counts_match_the_oracle(self, cases: list[Case]) -> None:
        for source, expected in cases:
            dataset, report = self.run_import(source, expected)
            assert_report_matches(report, expected, Path(source).name)
            assert_report_fields(report, dataset.schema, Path(source).name)

    def test_import_record(self, cases: list[Case]) -> None:
        for source, expected in cases:
            dataset, report = self.run_import(source, expected)
            imports = dataset.manifest.metadata["imports"]
            assert len(imports) == 1
            self.check_record(imports[0], source, expected, first=0)
            assert imports[0]["report"] == report.model_dump(mode="json")

    def test_hash_source_records_the_digest(self, cases: list[Case]) -> None:
        if "hash_source" not in self.importer_cls.Options.model_fields:
            pytest.skip(f"{self.importer_cls.__name__}.Options has no hash_source")
        files = [(source, expected) for source, expected in cases if Path(source).is_file()]
        if not files:
            pytest.skip("no case imports a single file")
        for source, expected in files:
            hashed = replace(expected, options={**expected.options, "hash_source": True})
            dataset, _ = self.run_import(source, hashed)
            record = dataset.manifest.metadata["imports"][0]
            self.check_record(record, source, hashed, first=0)
            digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
            assert record["source"]["sha256"] == digest, Path(source).name

    @pytest.mark.parametrize("backend", ["npz_directory", "zarr"])
    def test_import_to_a_persistent_backend(
        self, cases: list[Case], tmp_path: Path, backend: str
    ) -> None:
        if backend not in self.persistent_backends:
            pytest.skip(f"{type(self).__name__}.persistent_backends leaves out {backend!r}")
        problem = backend_problem(backend)
        if problem is not None:
            pytest.skip(problem)
        for position, (source, expected) in enumerate(cases):
            where = f"{Path(source).name} in {backend}"
            destination = tmp_path / f"dataset-{position}"
            dataset, _ = self.run_import(source, expected, destination, backend=backend)
            assert_dataset_matches(dataset, expected, where=where)
            record = dataset.manifest.metadata["imports"]
            dataset.close()
            with Dataset.open(destination, read_only=True) as reopened:
                assert reopened.manifest.backend == backend
                assert reopened.num_episodes == len(expected.episodes), where
                assert_dataset_matches(reopened, expected, where=f"{where}, reopened")
                assert reopened.manifest.metadata["imports"] == record, where
            # appending to the stored dataset persists the new episodes and record too
            with Dataset.open(destination) as writable:
                self.run_import(source, expected, writable)
            with Dataset.open(destination, read_only=True) as reopened:
                count = len(expected.episodes)
                assert reopened.num_episodes == 2 * count, f"{where}, appended"
                assert_dataset_matches(reopened, expected, where=f"{where}, first copy")
                assert_dataset_matches(reopened, expected, first=count, where=f"{where}, appended")
                first, second = reopened.manifest.metadata["imports"]
                assert first == record[0], where
                self.check_record(second, source, expected, first=count)

    def test_append_keeps_the_first_episodes(self, cases: list[Case]) -> None:
        for source, expected in cases:
            where = Path(source).name
            dataset, _ = self.run_import(source, expected)
            count = dataset.num_episodes
            appended, report = self.run_import(source, expected, dataset)
            assert appended is dataset
            assert dataset.num_episodes == 2 * count, where
            assert_dataset_matches(dataset, expected, where=f"{where}, first copy")
            assert_dataset_matches(dataset, expected, first=count, where=f"{where}, appended")
            assert_report_matches(report, expected, f"{where}, appended")
            first, second = dataset.manifest.metadata["imports"]
            self.check_record(first, source, expected, first=0)
            self.check_record(second, source, expected, first=count)

    # -- rejected sources -----------------------------------------------------------------

    def _bad(self, tmp_path: Path) -> Sequence[BadSource]:
        bad = self.bad_sources(tmp_path / "bad-sources")
        if not bad:
            pytest.skip(f"{type(self).__name__} defines no bad_sources()")
        return bad

    def test_failed_import_leaves_no_folder(self, tmp_path: Path) -> None:
        (tmp_path / "bad-sources").mkdir()
        usable = [name for name in self.persistent_backends if backend_problem(name) is None]
        if not usable:
            pytest.skip(f"none of {self.persistent_backends} is usable here")
        for position, bad in enumerate(self._bad(tmp_path)):
            parent = tmp_path / f"out-{position}"
            parent.mkdir()
            with pytest.raises(bad.error, match=bad.match):
                import_dataset(
                    self.importer_cls.name,
                    bad.source,
                    parent / "dataset",
                    backend=usable[0],
                    **bad.options,
                )
            assert list(parent.iterdir()) == [], f"{bad.source}: left {list(parent.iterdir())}"

    def test_failed_append_writes_nothing(self, cases: list[Case], tmp_path: Path) -> None:
        (tmp_path / "bad-sources").mkdir()
        bad_sources = self._bad(tmp_path)
        source, expected = cases[0]
        dataset, _ = self.run_import(source, expected)
        before = _state(dataset)
        for bad in bad_sources:
            with pytest.raises(bad.error, match=bad.match):
                import_dataset(self.importer_cls.name, bad.source, dataset, **bad.options)
            # every rejecting check runs before the first write (formats.md §0.2)
            assert _state(dataset) == before, bad.source


def _state(dataset: Dataset) -> tuple[int, int, str]:
    """Episode and step counts and the metadata (as JSON, so later changes show)."""
    metadata = json.dumps(dataset.manifest.metadata, sort_keys=True)
    return dataset.num_episodes, dataset.num_steps, metadata

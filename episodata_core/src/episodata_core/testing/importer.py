"""``ImporterTests``: the conformance tests every importer passes, and its oracle types.

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
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

import numpy as np
import pytest

from episodata_core import registry
from episodata_core.dataset import Dataset
from episodata_core.errors import (
    EpisodataError,
    EpisodataWarning,
    MissingDependencyError,
    PluginError,
)
from episodata_core.protocols import Importer
from episodata_core.testing.packaging import PackagingTests
from episodata_core.transfer import import_dataset
from episodata_core.views import FieldGroup

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt

    from episodata_core.episode import Episode
    from episodata_core.registry import PluginKind
    from episodata_core.schema import DatasetSchema
    from episodata_core.transfer import ImportReport
    from episodata_core.views import TransitionView

__all__ = [
    "BadSource",
    "ExpectedEpisode",
    "ExpectedImport",
    "ImporterTests",
    "assert_dataset_matches",
    "assert_episode_matches",
    "assert_report_fields",
    "assert_report_matches",
    "backend_problem",
    "checked_import",
]

ImporterT = TypeVar("ImporterT", bound=Importer)

#: modules that importing a plugin's entry-point module must not pull in (architecture.md)

Arrays: TypeAlias = "Mapping[str, npt.NDArray[Any]]"


# -- the oracle ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedEpisode:
    """One episode an import must give, as plain arrays.

    Keys are qualified field keys (``"observation/state"``) or keys within the group's
    role (``"state"``); a key that starts with its group's role and ``/`` is taken as
    qualified. ``observations`` and ``infos`` hold T + 1 rows (the reset row first),
    ``actions`` and ``rewards`` T rows (``actions[t]`` led from row t to row t + 1).
    """

    observations: Arrays
    actions: Arrays = field(default_factory=dict)
    rewards: Arrays = field(default_factory=dict)
    infos: Arrays = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False

    @classmethod
    def from_bulk(
        cls,
        initial_observation: Arrays,
        observations: Arrays,
        actions: Arrays | None = None,
        rewards: Arrays | None = None,
        *,
        initial_info: Arrays | None = None,
        infos: Arrays | None = None,
        terminated: bool = False,
        truncated: bool = False,
    ) -> ExpectedEpisode:
        """The oracle of a bulk episode: ``initial_*`` (one row) before T rows each."""

        def joined(first: Arrays | None, rest: Arrays | None) -> dict[str, npt.NDArray[Any]]:
            first, rest = first or {}, rest or {}
            return {
                key: np.concatenate([np.asarray(first[key])[None], np.asarray(rest[key])])
                for key in first
            }

        return cls(
            observations=joined(initial_observation, observations),
            actions=dict(actions or {}),
            rewards=dict(rewards or {}),
            infos=joined(initial_info, infos),
            terminated=terminated,
            truncated=truncated,
        )

    @property
    def transitions(self) -> int:
        """T, the number of transitions."""
        return int(next(iter(self.observations.values())).shape[0]) - 1

    def by_role(self) -> dict[str, dict[str, npt.NDArray[Any]]]:
        """``{role: {qualified key: array}}`` of every expected field."""
        groups = (
            ("observation", self.observations),
            ("action", self.actions),
            ("reward", self.rewards),
            ("info", self.infos),
        )
        return {
            role: {_qualified(role, key): np.asarray(value) for key, value in arrays.items()}
            for role, arrays in groups
        }


def _qualified(role: str, key: str) -> str:
    return key if key.startswith(role + "/") else f"{role}/{key}"


@dataclass(frozen=True)
class ExpectedImport:
    """What importing one source with ``options`` must give.

    ``report`` lists expected values of report keys (a subset of
    ``report.model_dump(mode="json")``); ``provenance`` expected columns of the import
    record's ``episodes`` table and ``source`` expected entries of its ``source`` (both
    subsets); ``warnings`` the warning codes the import reports and emits, and no others.
    """

    episodes: Sequence[ExpectedEpisode]
    options: Mapping[str, Any] = field(default_factory=dict)
    report: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict)
    warnings: frozenset[str] = frozenset()


@dataclass(frozen=True)
class BadSource:
    """A source the importer must reject with ``error`` (message matching ``match``)."""

    source: str | os.PathLike[str]
    error: type[BaseException] | tuple[type[BaseException], ...] = EpisodataError
    match: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


# -- comparisons --------------------------------------------------------------------------


def _equal(actual: Any, expected: npt.NDArray[Any], where: str) -> None:
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, (
        f"{where}: dtype {actual.dtype}, expected {expected.dtype}"
    )
    # NaN equals NaN here, so NaN rewards and diagnostics must sit in the same places
    np.testing.assert_array_equal(actual, expected, err_msg=where, strict=True)


def _role_arrays(view: TransitionView, accessor: str, role: str) -> dict[str, Any]:
    """``{qualified key: array}`` behind one role accessor (``obs``, ``next_info``, ...)."""
    value = getattr(view, accessor)
    if isinstance(value, FieldGroup):
        return {f"{role}/{key}": array for key, array in value.flat().items()}
    return {f"{role}/{role}": value}  # a bare role: one field keyed by the role


# rows of the expected arrays behind each accessor of an episode read (T + 1 obs/info rows,
# T action/reward rows) ...
_SEGMENT_VIEWS: dict[str, tuple[tuple[str, slice], ...]] = {
    "observation": (("obs", slice(0, -1)), ("next_obs", slice(1, None))),
    "info": (("info", slice(0, -1)), ("next_info", slice(1, None))),
    "action": (("action", slice(None)),),
    "reward": (("reward", slice(None)),),
}
# ... and the row offset from t behind each accessor of the single transition t
_STEP_VIEWS: dict[str, tuple[tuple[str, int], ...]] = {
    "observation": (("obs", 0), ("next_obs", 1)),
    "info": (("info", 0), ("next_info", 1)),
    "action": (("action", 0),),
    "reward": (("reward", 0),),
}


def assert_episode_matches(episode: Episode, expected: ExpectedEpisode, where: str = "") -> None:
    """``episode`` holds exactly ``expected``, read through its transition views.

    Checks the length and flags, the set of fields and their dtypes, every row, and
    transition by transition ``obs[i]``/``next_obs[i]``, ``action[i]``, ``reward[i]``,
    ``info[i]``/``next_info[i]`` and the flags.
    """
    steps = expected.transitions
    assert len(episode) == steps, f"{where}: {len(episode)} transitions, expected {steps}"
    assert not episode.ongoing, f"{where}: still ongoing"
    assert episode.terminated is expected.terminated, f"{where}: terminated"
    assert episode.truncated is expected.truncated, f"{where}: truncated"
    groups = expected.by_role()
    read = episode.read()
    wanted = {key for arrays in groups.values() for key in arrays}
    assert set(read.buffers) == wanted, (
        f"{where}: fields {sorted(read.buffers)} != {sorted(wanted)}"
    )
    for role, arrays in groups.items():
        if not arrays:
            continue
        for accessor, rows in _SEGMENT_VIEWS[role]:
            actual = _role_arrays(read, accessor, role)
            for key, values in arrays.items():
                _equal(actual[key], values[rows], f"{where}: {accessor} {key}")
    last = np.arange(steps) == steps - 1
    _equal(read.terminated, last & expected.terminated, f"{where}: terminated flags")
    _equal(read.truncated, last & expected.truncated, f"{where}: truncated flags")
    _equal(read.mask, np.ones(steps, dtype=bool), f"{where}: mask")
    # the boundary transitions once more through the single-transition read
    for t in sorted({0, steps - 1} if steps else set()):
        step = episode.step(t)
        for role, arrays in groups.items():
            for accessor, offset in _STEP_VIEWS[role] if arrays else ():
                actual = _role_arrays(step, accessor, role)
                for key, values in arrays.items():
                    _equal(actual[key], values[t + offset], f"{where}: step({t}).{accessor} {key}")
        final = t == steps - 1
        assert bool(step.terminated) is (final and expected.terminated), f"{where}: step({t})"
        assert bool(step.truncated) is (final and expected.truncated), f"{where}: step({t})"


def assert_dataset_matches(
    dataset: Dataset, expected: ExpectedImport, *, first: int = 0, where: str = ""
) -> None:
    """Episodes ``first, first + 1, ...`` of ``dataset`` are the expected episodes."""
    count = len(expected.episodes)
    assert dataset.num_episodes >= first + count, (
        f"{where}: {dataset.num_episodes} episodes, expected at least {first + count}"
    )
    for offset, episode in enumerate(expected.episodes):
        assert_episode_matches(
            dataset.episode(first + offset), episode, f"{where} episode {first + offset}"
        )


def assert_report_matches(report: ImportReport, expected: ExpectedImport, where: str = "") -> None:
    """The report's counts agree with the expected episodes and its listed values."""
    dumped = report.model_dump(mode="json")
    episodes = expected.episodes
    derived = {
        "episodes_imported": len(episodes),
        "transitions": sum(e.transitions for e in episodes),
    }
    for key, value in derived.items():
        assert dumped[key] == value, f"{where}: report {key} = {dumped[key]}, expected {value}"
    flags = dumped["flag_counts"]
    counted = {
        "terminated": sum(e.terminated for e in episodes),
        "truncated": sum(e.truncated for e in episodes),
        "both": sum(e.terminated and e.truncated for e in episodes),
    }
    for key, value in counted.items():
        assert flags[key] == value, f"{where}: flag_counts {key} = {flags[key]}, expected {value}"
    skipped = sum(dumped["episodes_skipped"].values())
    assert dumped["episodes_found"] == dumped["episodes_imported"] + skipped, (
        f"{where}: episodes_found is not imported + skipped: {dumped}"
    )
    for key, value in expected.report.items():
        assert dumped[key] == value, f"{where}: report {key} = {dumped[key]!r}, expected {value!r}"
    codes = {w["code"] for w in dumped["warnings"]}
    assert codes == set(expected.warnings), f"{where}: report warnings {sorted(codes)}"


def assert_report_fields(report: ImportReport, schema: DatasetSchema, where: str = "") -> None:
    """``report.fields`` describes exactly the schema's fields (role, dtype, shape).

    Entries may be keyed by qualified key (``"observation/state"``) or, when the key is
    unique across roles, by key (``"state"``).
    """
    assert len(report.fields) == len(schema), (
        f"{where}: report fields {sorted(report.fields)} != schema {schema.qualified_keys}"
    )
    for spec in schema:
        entry = report.fields.get(spec.qualified_key, report.fields.get(spec.key))
        assert entry is not None, f"{where}: report.fields lacks {spec.qualified_key!r}"
        described = (entry.role, np.dtype(entry.dtype), tuple(entry.shape))
        assert described == (spec.role, spec.np_dtype, spec.shape), (
            f"{where}: report.fields entry of {spec.qualified_key!r} is {described}"
        )


def checked_import(
    importer: str,
    source: str,
    expected: ExpectedImport,
    destination: Dataset | str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> tuple[Dataset, ImportReport]:
    """Import with ``expected.options``; each expected warning code is emitted once.

    A warning code counts as emitted when it appears in the message of an
    :class:`~episodata_core.errors.EpisodataWarning`; any other warning fails.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset, report = import_dataset(
            importer, source, destination, **kwargs, **expected.options
        )
    messages = [str(w.message) for w in caught]
    for w in caught:
        assert issubclass(w.category, EpisodataWarning), f"{source}: foreign warning {w}"
    for code in expected.warnings:
        hits = sum(code in message for message in messages)
        assert hits == 1, f"{source}: warning {code!r} emitted {hits} times: {messages}"
    assert len(messages) == len(expected.warnings), f"{source}: warnings {messages}"
    return dataset, report


def backend_problem(name: str) -> str | None:
    """Why backend ``name`` cannot be used here, or ``None`` when it loads."""
    try:
        registry.get_backend(name)
    except (PluginError, MissingDependencyError) as err:
        return f"backend {name!r} is not usable here: {err}"
    return None


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

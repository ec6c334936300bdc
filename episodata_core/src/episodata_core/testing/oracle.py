"""The oracle of an import: the episodes a source must give, and the comparisons.

:class:`ExpectedImport` and :class:`ExpectedEpisode` are written by a fixture's author
from the arrays the fixture generates; ``assert_*`` compare what an importer stored
against them, never against the importer under test. :class:`~episodata_core.testing.
importer.ImporterTests` and :class:`~episodata_core.testing.exporter.ExporterTests` use
them, and so may a plugin's own tests.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from episodata_core import registry
from episodata_core.errors import (
    EpisodataError,
    EpisodataWarning,
    MissingDependencyError,
    PluginError,
)
from episodata_core.transfer import import_dataset
from episodata_core.views import FieldGroup

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.episode import Episode
    from episodata_core.schema import DatasetSchema
    from episodata_core.transfer import ImportReport
    from episodata_core.views import TransitionView

__all__ = [
    "BadSource",
    "ExpectedEpisode",
    "ExpectedImport",
    "assert_dataset_matches",
    "assert_episode_matches",
    "assert_report_fields",
    "assert_report_matches",
    "backend_problem",
    "checked_import",
]

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

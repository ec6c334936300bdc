"""The private steps behind :mod:`episodata_core.registry`, each small and testable alone.

Reading (:func:`read_entry_points`, :func:`dedupe`) touches metadata only; selecting
(:func:`disabled_by`, :func:`resolve`) decides which entry point a name means and never
picks by entry-point order; loading (:func:`load`, :func:`check_contract`) imports the
plugin and checks it cheaply against its Protocol. All results live in one
:class:`State` object so tests can snapshot and restore it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from typing import Literal, get_args

from episodata_core.errors import (
    PluginConflictError,
    PluginDisabledError,
    PluginError,
    PluginNotFoundError,
)

PluginKind = Literal["backend", "sampler", "importer", "exporter", "command", "executor", "hook"]

KINDS: tuple[PluginKind, ...] = get_args(PluginKind)
GROUPS: dict[PluginKind, str] = {
    "backend": "episodata.backends",
    "sampler": "episodata.samplers",
    "importer": "episodata.importers",
    "exporter": "episodata.exporters",
    "command": "episodata.commands",
    "executor": "episodata.executors",
    "hook": "episodata.hooks",
}
DISABLED_ENV = "EPISODATA_DISABLED_PLUGINS"
STRICT_ENV = "EPISODATA_STRICT_PLUGINS"

_INSTALL_DEFAULT = "pip install episodata"
# (kind, name) -> (distribution that ships it, install command) for the error hint
WELL_KNOWN: dict[tuple[PluginKind, str], tuple[str, str]] = {
    ("backend", "zarr"): ("episodata-zarr", _INSTALL_DEFAULT),
    ("backend", "npz_directory"): ("episodata-npz", _INSTALL_DEFAULT),
    ("backend", "memory"): ("episodata-memory", _INSTALL_DEFAULT),
    ("importer", "d4rl"): ("episodata-d4rl", 'pip install "episodata[d4rl]"'),
    ("importer", "lewm"): ("episodata-lewm", 'pip install "episodata[lewm]"'),
    ("importer", "minari"): ("episodata-minari", 'pip install "episodata[minari]"'),
    ("importer", "lerobot"): ("episodata-lerobot", 'pip install "episodata[lerobot]"'),
    ("exporter", "lerobot"): ("episodata-lerobot", 'pip install "episodata[lerobot]"'),
    ("importer", "offset-segments"): ("episodata-segments", _INSTALL_DEFAULT),
    ("exporter", "offset-segments"): ("episodata-segments", _INSTALL_DEFAULT),
    ("executor", "local"): ("episodata-core", _INSTALL_DEFAULT),
    ("executor", "ray"): ("episodata-ray", 'pip install "episodata[ray]"'),
    ("sampler", "uniform"): ("episodata-core", _INSTALL_DEFAULT),
    ("sampler", "episode-uniform"): ("episodata-core", _INSTALL_DEFAULT),
    ("sampler", "without-replacement"): ("episodata-core", _INSTALL_DEFAULT),
    ("command", "report"): ("episodata-report", 'pip install "episodata[report]"'),
    ("command", "quickstart"): ("episodata-gym", 'pip install "episodata[gym]"'),
}
# every component class declares these besides the members of its Protocol; a command
# has no options section (its arguments are its configuration)
_DECLARED = ("name", "description", "Options")
_DECLARED_BY_COMMANDS = ("name", "description")


@dataclass(frozen=True)
class Candidate:
    """One entry point read from an installed distribution's metadata."""

    kind: PluginKind
    name: str
    value: str
    distribution: str | None
    version: str | None
    entry_point: metadata.EntryPoint | None = field(default=None, compare=False, repr=False)

    @property
    def origin(self) -> str:
        """``'episodata-zarr 0.3.0'``: where the plugin comes from, for messages."""
        if self.distribution is None:
            return "an unknown distribution"
        return f"{self.distribution} {self.version}"


@dataclass
class State:
    """Everything the registry remembers; one object so tests can snapshot it."""

    candidates: dict[PluginKind, tuple[Candidate, ...]] | None = None  # None: not read yet
    loaded: dict[Candidate, object] = field(default_factory=dict)
    failures: dict[Candidate, tuple[str, BaseException]] = field(default_factory=dict)
    runtime: dict[tuple[PluginKind, str], type] = field(default_factory=dict)
    preferred: dict[tuple[PluginKind, str], str] = field(default_factory=dict)


state = State()


def read_entry_points() -> dict[PluginKind, tuple[Candidate, ...]]:
    """Read the entry points of every episodata group; metadata only, no plugin code."""
    every = metadata.entry_points()  # one scan of the installed distributions for all groups
    return {
        kind: dedupe([from_entry_point(kind, ep) for ep in every.select(group=group)])
        for kind, group in GROUPS.items()
    }


def from_entry_point(kind: PluginKind, ep: metadata.EntryPoint) -> Candidate:
    """Describe ``ep`` with its distribution's name and version (reads metadata only)."""
    dist = ep.dist
    return Candidate(
        kind=kind,
        name=ep.name,
        value=ep.value,
        distribution=dist.name if dist is not None else None,
        version=dist.version if dist is not None else None,
        entry_point=ep,
    )


def dedupe(candidates: list[Candidate]) -> tuple[Candidate, ...]:
    """Drop repeats of one entry point (same name, value and distribution), keep order."""
    return tuple(dict.fromkeys(candidates))


def installed(kind: PluginKind) -> tuple[Candidate, ...]:
    """Every entry point of ``kind``; the first call of the process reads them all."""
    if state.candidates is None:
        state.candidates = read_entry_points()
    return state.candidates[kind]


def by_name(kind: PluginKind, name: str) -> list[Candidate]:
    """Return the entry points of ``kind`` named ``name`` (several if they conflict)."""
    return [c for c in installed(kind) if c.name == name]


def normalize_dist(name: str) -> str:
    """Normalize a distribution name as pip does (``Episodata_Zarr`` -> ``episodata-zarr``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def disabled_entries() -> list[str]:
    """Read ``EPISODATA_DISABLED_PLUGINS`` now (not cached, so tests may change it)."""
    return [part.strip() for part in os.environ.get(DISABLED_ENV, "").split(",") if part.strip()]


def disabled_by(candidate: Candidate, entries: list[str]) -> str | None:
    """Return the ``EPISODATA_DISABLED_PLUGINS`` entry that disables ``candidate``, if any."""
    dist = normalize_dist(candidate.distribution) if candidate.distribution else None
    for entry in entries:
        if entry == f"{candidate.kind}.{candidate.name}" or normalize_dist(entry) == dist:
            return entry
    return None


def conflict_message(kind: PluginKind, name: str, rivals: list[Candidate]) -> str:
    """Name every rival distribution and version, and how to choose one."""
    rivals = sorted(rivals, key=lambda c: (c.distribution or "", c.value))  # not path order
    provided = " and ".join(f"{c.origin} ({c.value})" for c in rivals)
    choice = rivals[-1].distribution or "<distribution>"
    return (
        f"{kind} {name!r} is provided by {provided}. Choose one: "
        f"prefer_plugin({kind!r}, {name!r}, {choice!r}), or uninstall one, or disable one "
        f"with {DISABLED_ENV}={rivals[0].distribution or f'{kind}.{name}'}"
    )


def resolve(kind: PluginKind, name: str, candidates: list[Candidate]) -> Candidate:
    """Pick the one enabled candidate for ``name``; never by entry-point order."""
    entries = disabled_entries()
    enabled = [c for c in candidates if disabled_by(c, entries) is None]
    if not enabled:
        by = sorted({str(disabled_by(c, entries)) for c in candidates})
        raise PluginDisabledError(
            f"{kind} {name!r} from {', '.join(c.origin for c in candidates)} is disabled by "
            f"{DISABLED_ENV} ({', '.join(repr(b) for b in by)}). "
            f"Remove {by[0]!r} from {DISABLED_ENV} to use it"
        )
    preferred = state.preferred.get((kind, name))
    if preferred is not None:
        chosen = [
            c
            for c in enabled
            if c.distribution and normalize_dist(c.distribution) == normalize_dist(preferred)
        ]
        if len(chosen) == 1:
            return chosen[0]
        if not chosen:
            raise PluginNotFoundError(
                f"{kind} {name!r} is preferred from distribution {preferred!r}, which does not "
                f"provide it (provided by {', '.join(c.origin for c in enabled)}). "
                f"Install {preferred!r} or call prefer_plugin({kind!r}, {name!r}, <distribution>)"
            )
        enabled = chosen
    if len(enabled) > 1:
        raise PluginConflictError(conflict_message(kind, name, enabled))
    return enabled[0]


def not_found_message(kind: PluginKind, name: str) -> str:
    """List what is installed for ``kind``, and how to install ``name`` if well known."""
    entries = disabled_entries()
    names = sorted(
        {c.name for c in installed(kind) if disabled_by(c, entries) is None}
        | {n for (k, n) in state.runtime if k == kind}
    )
    listed = ", ".join(repr(n) for n in names) or "none"
    message = f"no {kind} named {name!r} (installed: {listed})."
    hint = WELL_KNOWN.get((kind, name))
    if hint is not None:
        return f"{message} It ships in {hint[0]}: {hint[1]}"
    return f"{message} Run `episodata plugins` to list installed plugins"


def required_members(kind: PluginKind) -> tuple[str, ...]:
    """List the members a ``kind`` plugin class must have: its Protocol's and ``name`` etc."""
    # kept out of `import episodata_core.registry`
    from episodata_core import commands, protocols
    from episodata_core.pipeline.runner import Executor

    protocol: type = {
        "backend": protocols.StorageBackend,
        "sampler": protocols.Sampler,
        "importer": protocols.Importer,
        "exporter": protocols.Exporter,
        "command": commands.Command,
        "executor": Executor,
    }[kind]
    members = {m for m in (*vars(protocol), *protocol.__annotations__) if not m.startswith("_")}
    declared = _DECLARED_BY_COMMANDS if kind == "command" else _DECLARED
    optional = protocols.OPTIONAL_FLAGS if kind == "backend" else {}
    return tuple(sorted((members - optional.keys()) | set(declared)))


def has_member(cls: type, member: str) -> bool:
    """Whether ``cls`` has ``member``, as an attribute or as an annotation only."""
    return hasattr(cls, member) or any(
        member in getattr(base, "__annotations__", {}) for base in cls.__mro__
    )


def check_contract(kind: PluginKind, obj: object) -> list[str]:
    """List what keeps ``obj`` from being a ``kind`` plugin class; cheap, calls nothing."""
    if kind == "hook":
        return []
    if not isinstance(obj, type):
        return [f"expected a class, got {type(obj).__name__} {obj!r}"]
    missing = [m for m in required_members(kind) if not has_member(obj, m)]
    problems = [f"missing {', '.join(repr(m) for m in missing)}"] if missing else []
    from pydantic import BaseModel

    options = getattr(obj, "Options", None)
    if options is not None and not (isinstance(options, type) and issubclass(options, BaseModel)):
        problems.append(f"'Options' is {options!r}, not a pydantic BaseModel subclass")
    for attr in ("name", "description"):
        value = getattr(obj, attr, None)
        if value is not None and not isinstance(value, str):
            problems.append(f"{attr!r} is {value!r}, not a str")
    return problems


def protocol_name(kind: PluginKind) -> str:
    """Name the Protocol a ``kind`` plugin satisfies, for messages."""
    return {"backend": "StorageBackend"}.get(kind, kind.capitalize())


def load(candidate: Candidate) -> object:
    """Import ``candidate`` and check its contract; both results are cached."""
    if candidate in state.loaded:
        return state.loaded[candidate]
    if candidate in state.failures:
        message, cause = state.failures[candidate]
        raise PluginError(message) from cause
    where = f"{candidate.kind} {candidate.name!r} from {candidate.origin} ({candidate.value})"
    remedy = (
        f"Reinstall or upgrade {candidate.distribution or 'the plugin'}, or disable it with "
        f"{DISABLED_ENV}={candidate.kind}.{candidate.name}"
    )
    if candidate.entry_point is None:  # pragma: no cover - candidates come from metadata
        raise PluginError(f"{where} has no entry point to load")
    try:
        obj = candidate.entry_point.load()
    except Exception as err:  # the plugin boundary: any import failure is the plugin's
        message = f"{where} failed to import: {type(err).__name__}: {err}. {remedy}"
        state.failures[candidate] = (message, err)
        raise PluginError(message) from err
    problems = check_contract(candidate.kind, obj)
    if problems:
        message = (
            f"{where} does not satisfy the {protocol_name(candidate.kind)} contract: "
            f"{'; '.join(problems)}. {remedy}"
        )
        cause = TypeError("; ".join(problems))
        state.failures[candidate] = (message, cause)
        raise PluginError(message) from cause
    state.loaded[candidate] = obj
    return obj

"""Entry-point discovery and lookup for every plugin kind.

Plugins are found through the entry-point groups ``episodata.backends``,
``episodata.samplers``, ``episodata.importers``, ``episodata.exporters``,
``episodata.commands`` (verbs of the ``episodata`` command), ``episodata.executors``
(pipeline executors) and ``episodata.hooks``. Nothing is read at import: the first lookup reads the entry points
once (metadata only) and caches them; a plugin's code is imported the first time it is
selected by name, and the loaded class is cached. :func:`refresh_plugins` clears the
caches. Runtime registrations (:func:`register_backend` and friends) are for notebooks
and tests; they and :func:`prefer_plugin` choices survive a refresh. The steps behind
this module live in :mod:`episodata_core._plugins`.

Environment variables
---------------------
``EPISODATA_DISABLED_PLUGINS``
    Comma-separated ``kind.name`` entries (``backend.zarr``) or distribution names
    (``episodata-zarr``); matching entry points are listed as ``disabled`` and never loaded.
``EPISODATA_STRICT_PLUGINS=1``
    A broken hook plugin raises instead of being skipped with a warning.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar, cast, overload

from episodata_core import _plugins
from episodata_core._plugins import DISABLED_ENV, KINDS, STRICT_ENV, PluginKind
from episodata_core.errors import (
    EpisodataPluginWarning,
    PluginConflictError,
    PluginError,
    PluginNotFoundError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from episodata_core.commands import Command
    from episodata_core.pipeline.runner import Executor
    from episodata_core.protocols import Exporter, Importer, Sampler, StorageBackend

__all__ = [
    "DEFAULT_BACKEND",
    "MEMORY_BACKEND",
    "PluginInfo",
    "PluginKind",
    "PluginStatus",
    "default_backend",
    "get_backend",
    "get_command",
    "get_executor",
    "get_exporter",
    "get_importer",
    "get_sampler",
    "list_plugins",
    "load_hook_plugins",
    "prefer_plugin",
    "refresh_plugins",
    "register_backend",
    "register_command",
    "register_executor",
    "register_exporter",
    "register_importer",
    "register_sampler",
    "unregister",
]

PluginStatus = Literal["available", "loaded", "broken", "disabled", "conflict", "runtime"]

_C = TypeVar("_C", bound=type)
_refresh_callbacks: list[Callable[[], None]] = []


@dataclass(frozen=True)
class PluginInfo:
    """One plugin as listed by :func:`list_plugins`; building it never imports the plugin.

    ``value`` is the entry point's ``"module:attr"`` (for a runtime registration, the
    class's module and qualified name); ``distribution`` and ``version`` are ``None`` for
    runtime registrations. ``error`` explains a ``broken``, ``disabled`` or ``conflict``
    status.
    """

    kind: PluginKind
    name: str
    value: str
    distribution: str | None
    version: str | None
    status: PluginStatus
    error: str | None = None


def _get(kind: PluginKind, name: str) -> type:
    runtime = _plugins.state.runtime.get((kind, name))
    if runtime is not None:
        return runtime
    candidates = _plugins.by_name(kind, name)
    if not candidates:
        raise PluginNotFoundError(_plugins.not_found_message(kind, name))
    return cast("type", _plugins.load(_plugins.resolve(kind, name, candidates)))


DEFAULT_BACKEND = "zarr"
"""The backend of a dataset created at a path without ``backend=``."""
MEMORY_BACKEND = "memory"
"""The backend of a dataset created without a path."""


def default_backend(path: object) -> str:
    """The backend name a creation at ``path`` (``None``: in memory) uses by default."""
    return MEMORY_BACKEND if path is None else DEFAULT_BACKEND


def get_backend(name: str) -> type[StorageBackend]:
    """Return the backend class registered as ``name`` (``"zarr"``, ``"memory"``).

    Raises
    ------
    PluginNotFoundError
        No such backend is installed (the message lists those that are), or it is
        disabled (:class:`~episodata_core.errors.PluginDisabledError`).
    PluginConflictError
        Two distributions provide it; choose one with :func:`prefer_plugin`.
    PluginError
        The plugin failed to import or does not satisfy the backend contract.

    Examples
    --------
    >>> from episodata_core.registry import get_backend
    >>> backend_cls = get_backend("memory")  # doctest: +SKIP
    """
    return cast("type[StorageBackend]", _get("backend", name))


def get_sampler(name: str) -> type[Sampler]:
    """Return the sampler class registered as ``name``; raises like :func:`get_backend`."""
    return cast("type[Sampler]", _get("sampler", name))


def get_importer(name: str) -> type[Importer]:
    """Return the importer class registered as ``name``; raises like :func:`get_backend`."""
    return cast("type[Importer]", _get("importer", name))


def get_exporter(name: str) -> type[Exporter]:
    """Return the exporter class registered as ``name``; raises like :func:`get_backend`."""
    return cast("type[Exporter]", _get("exporter", name))


def get_command(name: str) -> type[Command]:
    """Return the ``episodata`` verb class registered as ``name``; raises like :func:`get_backend`."""
    return cast("type[Command]", _get("command", name))


def get_executor(name: str) -> type[Executor]:
    """Return the pipeline executor class registered as ``name`` (``"local"``, ``"ray"``)."""
    return cast("type[Executor]", _get("executor", name))


def prefer_plugin(kind: PluginKind, name: str, distribution: str) -> None:
    """Resolve a conflict: take ``kind`` ``name`` from ``distribution``.

    Examples
    --------
    >>> prefer_plugin("backend", "zarr", "acme-zarr-gpu")  # doctest: +SKIP
    """
    _check_kind(kind)
    _plugins.state.preferred[(kind, name)] = distribution


def load_hook_plugins(
    register: Callable[[object], object] | None = None, *, stacklevel: int = 2
) -> list[object]:
    """Load every enabled ``episodata.hooks`` plugin (modules or objects with hookimpls).

    ``register`` is called with each loaded object (the hook manager's ``register``); if it
    raises, the plugin counts as broken. A broken plugin emits
    :class:`~episodata_core.errors.EpisodataPluginWarning` (at ``stacklevel`` above this
    function's caller) and is skipped, or raises :class:`PluginError` when
    ``EPISODATA_STRICT_PLUGINS=1``.
    """
    entries = _plugins.disabled_entries()
    strict = os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
    objects: list[object] = []
    for candidate in _plugins.installed("hook"):
        if _plugins.disabled_by(candidate, entries) is not None:
            continue
        try:
            obj = _plugins.load(candidate)
            if any(obj is seen for seen in objects):
                continue
            if register is not None:
                _register_hook_object(candidate, obj, register)
        except PluginError as err:
            if strict:
                raise
            warnings.warn(
                f"skipped hook plugin: {err} ({STRICT_ENV}=1 makes this an error)",
                EpisodataPluginWarning,
                stacklevel=stacklevel,
            )
            continue
        objects.append(obj)
    return objects


def _register_hook_object(
    candidate: _plugins.Candidate, obj: object, register: Callable[[object], object]
) -> None:
    try:
        register(obj)
    except Exception as err:  # the plugin boundary: the hook manager rejected the plugin
        message = (
            f"hook {candidate.name!r} from {candidate.origin} ({candidate.value}) does not "
            f"match the episodata hook specifications: {err}. Upgrade "
            f"{candidate.distribution or 'the plugin'} or disable it with "
            f"{DISABLED_ENV}=hook.{candidate.name}"
        )
        _plugins.state.loaded.pop(candidate, None)
        _plugins.state.failures[candidate] = (message, err)
        raise PluginError(message) from err


def _check_kind(kind: str, *, allow_hook: bool = True) -> None:
    allowed = KINDS if allow_hook else tuple(k for k in KINDS if k != "hook")
    if kind not in allowed:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of {allowed}")


def _qualified(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _register(kind: PluginKind, cls: type, name: str | None, replace: bool) -> None:
    name = name if name is not None else getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise PluginError(
            f"cannot register {_qualified(cls)} as a {kind}: it declares no `name`; "
            f"add a class attribute `name = '...'` or pass name=..."
        )
    problems = _plugins.check_contract(kind, cls)
    if problems:
        raise PluginError(
            f"cannot register {_qualified(cls)} as {kind} {name!r}: it does not satisfy the "
            f"{_plugins.protocol_name(kind)} contract: {'; '.join(problems)}"
        )
    existing = _plugins.state.runtime.get((kind, name))
    # re-running a notebook cell defines a new class object with the same qualified name
    if not replace and existing is not None and _qualified(existing) != _qualified(cls):
        raise PluginConflictError(
            f"{kind} {name!r} is already registered at runtime by {_qualified(existing)}; "
            f"pass replace=True to register {_qualified(cls)} instead, or unregister first"
        )
    entries = _plugins.disabled_entries()
    installed = [
        c for c in _plugins.by_name(kind, name) if _plugins.disabled_by(c, entries) is None
    ]
    if not replace and installed:
        raise PluginConflictError(
            f"{kind} {name!r} is already provided by "
            f"{', '.join(f'{c.origin} ({c.value})' for c in installed)}; pass replace=True "
            f"to use {_qualified(cls)} instead, or register it under another name"
        )
    _plugins.state.runtime[(kind, name)] = cls


@overload
def register_backend(cls: _C, *, name: str | None = None, replace: bool = False) -> _C: ...
@overload
def register_backend(
    cls: None = None, *, name: str | None = None, replace: bool = False
) -> Callable[[_C], _C]: ...
def register_backend(
    cls: _C | None = None, *, name: str | None = None, replace: bool = False
) -> _C | Callable[[_C], _C]:
    """Register a backend class at runtime, under ``name`` or its ``name`` attribute.

    Usable as ``register_backend(cls)``, ``@register_backend`` or
    ``@register_backend(name="x")``. A name that is registered already, at runtime or
    by an enabled entry point, raises :class:`PluginConflictError` unless ``replace``.

    Examples
    --------
    >>> @register_backend  # doctest: +SKIP
    ... class MyBackend: ...
    """
    return _registrar("backend", cls, name, replace)


@overload
def register_sampler(cls: _C, *, name: str | None = None, replace: bool = False) -> _C: ...
@overload
def register_sampler(
    cls: None = None, *, name: str | None = None, replace: bool = False
) -> Callable[[_C], _C]: ...
def register_sampler(
    cls: _C | None = None, *, name: str | None = None, replace: bool = False
) -> _C | Callable[[_C], _C]:
    """Register a sampler class at runtime; see :func:`register_backend`."""
    return _registrar("sampler", cls, name, replace)


@overload
def register_importer(cls: _C, *, name: str | None = None, replace: bool = False) -> _C: ...
@overload
def register_importer(
    cls: None = None, *, name: str | None = None, replace: bool = False
) -> Callable[[_C], _C]: ...
def register_importer(
    cls: _C | None = None, *, name: str | None = None, replace: bool = False
) -> _C | Callable[[_C], _C]:
    """Register an importer class at runtime; see :func:`register_backend`."""
    return _registrar("importer", cls, name, replace)


@overload
def register_exporter(cls: _C, *, name: str | None = None, replace: bool = False) -> _C: ...
@overload
def register_exporter(
    cls: None = None, *, name: str | None = None, replace: bool = False
) -> Callable[[_C], _C]: ...
def register_exporter(
    cls: _C | None = None, *, name: str | None = None, replace: bool = False
) -> _C | Callable[[_C], _C]:
    """Register an exporter class at runtime; see :func:`register_backend`."""
    return _registrar("exporter", cls, name, replace)


@overload
def register_command(cls: _C, *, name: str | None = None, replace: bool = False) -> _C: ...
@overload
def register_command(
    cls: None = None, *, name: str | None = None, replace: bool = False
) -> Callable[[_C], _C]: ...
def register_command(
    cls: _C | None = None, *, name: str | None = None, replace: bool = False
) -> _C | Callable[[_C], _C]:
    """Register an ``episodata`` verb class at runtime; see :func:`register_backend`."""
    return _registrar("command", cls, name, replace)


@overload
def register_executor(cls: _C, *, name: str | None = None, replace: bool = False) -> _C: ...
@overload
def register_executor(
    cls: None = None, *, name: str | None = None, replace: bool = False
) -> Callable[[_C], _C]: ...
def register_executor(
    cls: _C | None = None, *, name: str | None = None, replace: bool = False
) -> _C | Callable[[_C], _C]:
    """Register a pipeline executor class at runtime; see :func:`register_backend`."""
    return _registrar("executor", cls, name, replace)


def _registrar(
    kind: PluginKind, cls: _C | None, name: str | None, replace: bool
) -> _C | Callable[[_C], _C]:
    def decorate(target: _C) -> _C:
        _register(kind, target, name, replace)
        return target

    return decorate if cls is None else decorate(cls)


def unregister(kind: PluginKind, name: str) -> None:
    """Remove a runtime registration; installed entry points are disabled instead.

    Raises
    ------
    PluginNotFoundError
        Nothing of ``kind`` is registered at runtime as ``name``.
    """
    _check_kind(kind, allow_hook=False)
    if _plugins.state.runtime.pop((kind, name), None) is None:
        registered = ", ".join(repr(n) for (k, n) in sorted(_plugins.state.runtime) if k == kind)
        raise PluginNotFoundError(
            f"no {kind} named {name!r} is registered at runtime (runtime: "
            f"{registered or 'none'}); to hide an installed plugin set "
            f"{DISABLED_ENV}={kind}.{name}"
        )


def _status(candidate: _plugins.Candidate, entries: list[str]) -> tuple[PluginStatus, str | None]:
    """Work out the listed status of an entry point from caches only (never imports)."""
    by = _plugins.disabled_by(candidate, entries)
    if by is not None:
        return "disabled", f"disabled by {DISABLED_ENV} ({by!r})"
    kind, name = candidate.kind, candidate.name
    if candidate in _plugins.state.failures:
        return "broken", _plugins.state.failures[candidate][0]
    if kind != "hook":
        if (kind, name) in _plugins.state.runtime:
            note = f"replaced at runtime by {_qualified(_plugins.state.runtime[(kind, name)])}"
            return ("loaded" if candidate in _plugins.state.loaded else "available"), note
        try:
            chosen = _plugins.resolve(kind, name, _plugins.by_name(kind, name))
        except PluginConflictError as err:
            return "conflict", str(err)
        except PluginNotFoundError as err:  # a preference names another distribution
            return "conflict", str(err)
        if chosen != candidate:
            return "conflict", f"not selected: {kind} {name!r} is preferred from {chosen.origin}"
    return ("loaded" if candidate in _plugins.state.loaded else "available"), None


def list_plugins(kind: PluginKind | None = None) -> list[PluginInfo]:
    """List every plugin of ``kind`` (default: all kinds), sorted; never imports plugins.

    Entry points are read on the first call and cached. ``status`` is ``"loaded"`` or
    ``"broken"`` only for plugins this process has already tried to load.
    """
    if kind is not None:
        _check_kind(kind)
    entries = _plugins.disabled_entries()
    infos: list[PluginInfo] = []
    for k in KINDS if kind is None else (kind,):
        for c in _plugins.installed(k):
            status, error = _status(c, entries)
            infos.append(PluginInfo(k, c.name, c.value, c.distribution, c.version, status, error))
        infos.extend(
            PluginInfo(k, n, _qualified(cls), None, None, "runtime")
            for (rk, n), cls in _plugins.state.runtime.items()
            if rk == k
        )
    order = {k: i for i, k in enumerate(KINDS)}
    return sorted(infos, key=lambda i: (order[i.kind], i.name, i.distribution or "", i.value))


def refresh_plugins() -> None:
    """Forget cached entry points, loaded classes and failures; re-read on next lookup.

    Runtime registrations and :func:`prefer_plugin` choices are kept. The hook manager
    (:mod:`episodata_core.hooks`) is rebuilt on its next use.
    """
    _plugins.state.candidates = None
    _plugins.state.loaded.clear()
    _plugins.state.failures.clear()
    for callback in _refresh_callbacks:
        callback()


def _add_refresh_callback(callback: Callable[[], None]) -> None:
    """Call ``callback`` on every :func:`refresh_plugins` (used by the hook manager)."""
    if callback not in _refresh_callbacks:
        _refresh_callbacks.append(callback)


def _snapshot() -> _plugins.State:
    """Copy the registry's state, for :func:`_restore` (test isolation)."""
    return _plugins.State(
        candidates=_plugins.state.candidates,
        loaded=dict(_plugins.state.loaded),
        failures=dict(_plugins.state.failures),
        runtime=dict(_plugins.state.runtime),
        preferred=dict(_plugins.state.preferred),
    )


def _restore(snapshot: _plugins.State, *, refresh: bool = True) -> None:
    """Put back runtime registrations and preferences of ``snapshot``; then refresh."""
    _plugins.state.runtime = dict(snapshot.runtime)
    _plugins.state.preferred = dict(snapshot.preferred)
    if refresh:
        refresh_plugins()
    else:
        _plugins.state.candidates = snapshot.candidates
        _plugins.state.loaded = dict(snapshot.loaded)
        _plugins.state.failures = dict(snapshot.failures)

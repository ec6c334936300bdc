"""Lifecycle hooks: every hook specification, the ``hookimpl`` marker and the manager.

Several plugins may act on one event (provenance, statistics), so events go through
pluggy; components that are 1-of-N (backends, samplers) come from the registry instead.
A hook plugin is a module or object whose functions carry :data:`hookimpl` and are named
after a specification in :class:`HookSpecs`; pluggy checks the argument names when the
plugin is registered. Hook plugins are found in the ``episodata.hooks`` entry-point
group, or registered at runtime with :func:`register_hooks`.

Examples
--------
>>> from episodata_core.hooks import hookimpl, register_hooks
>>> class CountEpisodes:
...     count = 0
...
...     @hookimpl
...     def after_episode_written(self, dataset, episode):
...         self.count += 1
>>> counter = register_hooks(CountEpisodes())  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import pluggy

from episodata_core import registry
from episodata_core._plugins import DISABLED_ENV
from episodata_core.errors import PluginError, PluginNotFoundError

__all__ = [
    "PROJECT_NAME",
    "HookSpecs",
    "call_hook",
    "get_plugin_manager",
    "hookimpl",
    "register_hooks",
    "unregister_hooks",
]

PROJECT_NAME = "episodata"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Mark a function or method as an implementation of the episodata hook of its name."""

_T = TypeVar("_T")


class HookSpecs:
    """Every episodata hook; an implementation takes any subset of the arguments by name.

    Argument types are documented rather than annotated, so this module imports nothing
    beyond pluggy: ``dataset`` is a :class:`episodata.Dataset`, ``manifest`` a
    :class:`episodata_core.manifest.Manifest` and ``pipeline`` a pipeline runner.
    Return values are ignored.
    """

    @hookspec
    def after_dataset_created(self, dataset: Any) -> None:
        """Fire once a new dataset exists (manifest written), before its first episode."""

    @hookspec
    def after_episode_written(self, dataset: Any, episode: int) -> None:
        """Fire after the backend's ``finalize_episode`` returns: ``episode`` is durable.

        ``episode`` is the id of the finalized episode. Fires for episodes written in one
        step (``add_episode``) as well as for episodes finalized by a writer.
        """

    @hookspec
    def before_manifest_written(self, dataset: Any, manifest: Any) -> None:
        """Fire just before ``manifest`` is persisted; edit it in place.

        Implementations may add to ``manifest.metadata`` and ``manifest.provenance``;
        whatever they leave there is what gets written.
        """

    @hookspec
    def after_dataset_closed(self, dataset: Any) -> None:
        """Fire after ``dataset`` is closed and its backend released; reads fail now."""

    @hookspec
    def on_pipeline_start(self, pipeline: Any) -> None:
        """Fire when a pipeline run starts, after its configuration and plugins resolved."""

    @hookspec
    def after_pipeline_step(self, pipeline: Any, step: Any) -> None:
        """Fire after each pipeline step (import, store, each export) completes."""

    @hookspec
    def on_pipeline_end(self, pipeline: Any, result: Any) -> None:
        """Fire once a pipeline run finished successfully, with its ``result``."""

    @hookspec
    def on_pipeline_error(self, pipeline: Any, error: BaseException) -> None:
        """Fire when a pipeline step raises, before ``error`` propagates to the caller."""


@dataclass
class _HookState:
    manager: pluggy.PluginManager | None = None  # built on first use
    runtime: list[tuple[object, str | None]] = field(default_factory=list)


_state = _HookState()


def _register_checked(pm: pluggy.PluginManager, obj: object, name: str | None = None) -> None:
    """Register ``obj``; reject wrong argument names and unknown hook names atomically."""
    try:
        pm.register(obj, name=name)
        pm.check_pending()  # a hookimpl matching no spec is a typo, not an optional hook
    except pluggy.PluginValidationError:
        if pm.is_registered(obj):
            pm.unregister(obj)
        raise


def _manager(stacklevel: int) -> pluggy.PluginManager:
    if _state.manager is None:
        pm = pluggy.PluginManager(PROJECT_NAME)
        pm.add_hookspecs(HookSpecs)
        registry.load_hook_plugins(lambda obj: _register_checked(pm, obj), stacklevel=stacklevel)
        for obj, name in _state.runtime:
            _register_checked(pm, obj, name)
        _state.manager = pm
    return _state.manager


def get_plugin_manager() -> pluggy.PluginManager:
    """Return the hook manager, building it on first use.

    The first call reads the ``episodata.hooks`` entry points and registers every
    enabled hook plugin (a broken one is skipped with
    :class:`~episodata_core.errors.EpisodataPluginWarning`), then the runtime ones.
    :func:`episodata_core.registry.refresh_plugins` makes the next call rebuild it.
    """
    return _manager(stacklevel=4)


def call_hook(name: str, **kwargs: Any) -> list[Any]:
    """Call hook ``name`` on every hook plugin with keyword arguments.

    The one way the core fires its hooks. The arguments are checked against the
    specification even when no plugin implements the hook, which then costs no pluggy
    call (most processes register none, and an empty pluggy call costs about as much as
    recording a step in memory).

    Examples
    --------
    >>> call_hook("after_episode_written", dataset=ds, episode=3)  # doctest: +SKIP
    """
    caller = getattr(_manager(stacklevel=4).hook, name, None)
    if caller is None or caller.spec is None:
        known = ", ".join(sorted(n for n in vars(HookSpecs) if not n.startswith("_")))
        raise PluginNotFoundError(f"no episodata hook named {name!r}; the hooks are: {known}")
    expected = set(caller.spec.argnames)
    if set(kwargs) != expected:
        raise TypeError(
            f"hook {name!r} takes the arguments {sorted(expected)}, got {sorted(kwargs)}"
        )
    if not caller.get_hookimpls():
        return []
    return list(caller(**kwargs))


def register_hooks(obj: _T, name: str | None = None) -> _T:
    """Register a hook plugin (an object or module with :data:`hookimpl` functions).

    The registration survives :func:`~episodata_core.registry.refresh_plugins`; remove it
    with :func:`unregister_hooks`. Returns ``obj``.

    Raises
    ------
    PluginError
        An implementation names an argument or a hook that no specification has
        (the message names it), or ``obj`` is registered already.
    """
    pm = _manager(stacklevel=4)
    try:
        _register_checked(pm, obj, name)
    except (pluggy.PluginValidationError, ValueError) as err:
        raise PluginError(
            f"cannot register hooks from {obj!r}: {err}. Each @hookimpl must be named after "
            f"a hook of episodata_core.hooks.HookSpecs and take a subset of its arguments"
        ) from err
    _state.runtime.append((obj, name))
    return obj


def unregister_hooks(obj: object) -> None:
    """Remove a hook plugin registered with :func:`register_hooks`.

    Raises
    ------
    PluginNotFoundError
        ``obj`` was not registered at runtime.
    """
    for index, (registered, _name) in enumerate(_state.runtime):
        if registered is obj:
            del _state.runtime[index]
            break
    else:
        raise PluginNotFoundError(
            f"{obj!r} is not a runtime hook plugin; installed hook plugins are disabled with "
            f"{DISABLED_ENV}=hook.<name>"
        )
    if _state.manager is not None and _state.manager.is_registered(obj):
        _state.manager.unregister(obj)


def _reset() -> None:
    """Drop the manager; the next use rebuilds it (entry points and runtime plugins)."""
    _state.manager = None


def _snapshot() -> _HookState:
    """Copy the runtime hook registrations, for :func:`_restore` (test isolation)."""
    return _HookState(manager=_state.manager, runtime=list(_state.runtime))


def _restore(snapshot: _HookState) -> None:
    """Put back the runtime hook registrations of ``snapshot``; the manager is rebuilt."""
    _state.runtime = list(snapshot.runtime)
    _state.manager = None


registry._add_refresh_callback(_reset)

"""pytest plugin of episodata: fixtures that isolate the plugin registry.

Load it with ``-p episodata_core.testing.pytest_plugin`` (episodata's own suite does so
in ``pyproject.toml``). A plugin author's tests can use it to check that their
distribution is discovered, without touching the real registry.

Fixtures
--------
``isolated_registry``
    Snapshot the registry (runtime registrations, :func:`prefer_plugin` choices) and the
    runtime hook plugins; refresh before and after the test, restoring the snapshot.
``add_dist_path``
    A function ``add_dist_path(path)`` that puts a folder of ``*.dist-info`` distributions
    (and their modules) first on ``sys.path`` and refreshes the registry; undone after
    the test, modules imported from the folder included. Implies ``isolated_registry``.
``hermetic_registry``
    Like ``add_dist_path``, but discovery sees *only* the distributions in the added
    folders, not the ones installed in the environment, so tests do not depend on which
    plugins happen to be installed.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from episodata_core import hooks, registry

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "DistPaths",
    "add_dist_path",
    "hermetic_registry",
    "isolated_plugins",
    "isolated_registry",
]


@contextlib.contextmanager
def isolated_plugins() -> Iterator[None]:
    """Run a block against a fresh registry; put back the previous state afterwards.

    Runtime registrations, preferences and runtime hook plugins made inside the block are
    dropped; caches are cleared on entry and exit, so entry points are read again.
    """
    saved_registry = registry._snapshot()
    saved_hooks = hooks._snapshot()
    registry.refresh_plugins()
    try:
        yield
    finally:
        hooks._restore(saved_hooks)
        registry._restore(saved_registry)


@pytest.fixture
def isolated_registry() -> Iterator[None]:
    """Isolate the plugin registry and the hook manager for one test."""
    with isolated_plugins():
        yield


def _imported_from(module: object, root: Path) -> bool:
    # sys.modules may hold None (a blocked import), which has no __file__
    paths = getattr(module, "__path__", None)
    try:
        # some libraries put objects that are not lists of folders in __path__
        folders = list(paths) if paths is not None else []
    except TypeError:
        folders = []
    files = [getattr(module, "__file__", None), *folders]
    for file in files:
        if isinstance(file, str) and Path(file).resolve().is_relative_to(root):
            return True
    return False


class DistPaths:
    """Callable that prepends folders of fake distributions to ``sys.path``; see fixtures."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, path: str | Path) -> None:
        """Put ``path`` first on ``sys.path`` and refresh the registry."""
        entry = str(Path(path).resolve())
        if not Path(entry).is_dir():
            raise FileNotFoundError(f"add_dist_path: {entry} is not a folder")
        sys.path.insert(0, entry)
        self.paths.append(entry)
        importlib.invalidate_caches()  # also drops importlib.metadata's path cache
        registry.refresh_plugins()

    def undo(self) -> None:
        """Take the folders off ``sys.path`` and forget modules imported from them."""
        roots = [Path(entry) for entry in self.paths]
        for entry in self.paths:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
            sys.path_importer_cache.pop(entry, None)
        for name, module in list(sys.modules.items()):
            if any(_imported_from(module, root) for root in roots):
                del sys.modules[name]
        self.paths.clear()
        importlib.invalidate_caches()
        registry.refresh_plugins()


@pytest.fixture
def add_dist_path(isolated_registry: None) -> Iterator[DistPaths]:
    """Prepend folders of fake installed distributions to ``sys.path`` for one test.

    Examples
    --------
    >>> def test_finds_fake(add_dist_path):  # doctest: +SKIP
    ...     add_dist_path(Path(__file__).parent / "fake_dists" / "basic")
    ...     assert get_backend("fake").name == "fake"
    """
    paths = DistPaths()
    try:
        yield paths
    finally:
        paths.undo()


@pytest.fixture
def hermetic_registry(add_dist_path: DistPaths) -> Iterator[DistPaths]:
    """Make discovery see only the folders given to the returned ``add_dist_path``."""

    def entry_points(**params: Any) -> metadata.EntryPoints:
        found = metadata.distributions(path=list(add_dist_path.paths))
        every = metadata.EntryPoints(ep for dist in found for ep in dist.entry_points)
        return every.select(**params) if params else every

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metadata, "entry_points", entry_points)
        registry.refresh_plugins()
        yield add_dist_path
    registry.refresh_plugins()

"""Packaging checks every plugin kind passes: discoverable, named, light to import.

:class:`PackagingTests` is the base of ``BackendTests``, ``SamplerTests``,
``ImporterTests``, ``ExporterTests`` and ``CommandTests``; each sets ``plugin_kind`` and
``plugin_cls``. The functions are usable alone, from any test::

    check_entry_point_discoverable("backend", MyBackend)
    check_entry_point_is_light("backend", MyBackend, HEAVY_MODULES)

Lightness is checked in a fresh interpreter: importing the module an entry point names
(and reading the class's declared metadata) must not put a heavy library in
``sys.modules``, since listing and selecting plugins imports exactly that module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib import metadata
from typing import TYPE_CHECKING, ClassVar

import pytest
from pydantic import BaseModel, ValidationError

from episodata_core import registry

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from episodata_core.registry import PluginInfo, PluginKind

__all__ = [
    "HEAVY_MODULES",
    "PackagingTests",
    "check_entry_point_discoverable",
    "check_entry_point_is_light",
    "entry_point_of",
]

HEAVY_MODULES = ("h5py", "hdf5plugin", "tensorstore", "zarr", "torch", "tensordict", "gymnasium")
"""Libraries no entry-point module may import (a plugin adds its own, e.g. ``pyarrow``)."""

_GETTERS: dict[str, Callable[[str], type]] = {
    "backend": registry.get_backend,
    "sampler": registry.get_sampler,
    "importer": registry.get_importer,
    "exporter": registry.get_exporter,
    "command": registry.get_command,
}

_LIGHT_PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    module = importlib.import_module({module!r})
    plugin = module
    for part in {attr!r}.split("."):
        plugin = getattr(plugin, part)
    # reading the declared metadata must stay light too
    options = getattr(plugin, "Options", None)
    if options is not None:
        options.model_json_schema()
    print(json.dumps([name for name in {heavy!r} if name in sys.modules]))
    """
)


def entry_point_of(kind: PluginKind, cls: type) -> PluginInfo:
    """The installed entry point that provides ``cls`` as a ``kind`` plugin.

    Raises
    ------
    AssertionError
        No installed distribution has an entry point named ``cls.name`` in the group of
        ``kind``, or it names another object (the message lists what there is).
    """
    name = getattr(cls, "name", None)
    found = [i for i in registry.list_plugins(kind) if i.distribution is not None]
    named = [i for i in found if i.name == name]
    assert named, (
        f"no installed episodata.{kind}s entry point is named {name!r} (the class's "
        f"`name`); installed: {sorted(i.name for i in found)}. Add to pyproject.toml: "
        f'[project.entry-points."episodata.{kind}s"] {name} = "<module>:{cls.__qualname__}"'
    )
    for info in named:
        module, _, attr = info.value.partition(":")
        if (module, attr) == (cls.__module__, cls.__qualname__):
            return info
    return named[0]


def check_entry_point_discoverable(kind: PluginKind, cls: type) -> None:
    """``cls`` is found through its entry point, in the metadata and by the registry.

    The entry point's name is ``cls.name``, its value loads to ``cls`` itself, and the
    registry's lookup by that name returns ``cls``.
    """
    info = entry_point_of(kind, cls)
    group = f"episodata.{kind}s"
    points = metadata.entry_points(group=group, name=info.name)
    assert points, f"{group} has no entry point {info.name!r} in the installed metadata"
    loaded = [ep.load() for ep in points if ep.value == info.value]
    assert loaded == [cls], (
        f"the {group} entry point {info.name!r} = {info.value!r} loads {loaded}, not "
        f"{cls.__module__}:{cls.__qualname__}"
    )
    assert _GETTERS[kind](info.name) is cls


def check_entry_point_is_light(kind: PluginKind, cls: type, heavy: Sequence[str]) -> None:
    """Importing the entry-point module of ``cls`` in a fresh interpreter imports no ``heavy``."""
    try:
        info = entry_point_of(kind, cls)
        module, _, attr = info.value.partition(":")
    except AssertionError:  # a runtime registration: its own module is what gets imported
        module, attr = cls.__module__, cls.__qualname__
    probe = _LIGHT_PROBE.format(module=module, attr=attr, heavy=tuple(heavy))
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert loaded == [], (
        f"importing {module} (entry point of {kind} {cls.__name__}) imported {loaded}; "
        "import them inside the methods that need them"
    )


class PackagingTests:
    """The packaging tests of a plugin class; a kit's ``*Tests`` class derives from it.

    Subclasses (the kit's classes, not plugin authors) set ``plugin_kind`` and return the
    class under test from ``plugin_cls``; plugin authors may extend ``heavy_modules``.
    """

    plugin_kind: ClassVar[PluginKind]
    heavy_modules: ClassVar[tuple[str, ...]] = HEAVY_MODULES
    """Modules the entry-point module must not import."""
    installed: ClassVar[bool] = True
    """False for a class registered at runtime only: the entry-point checks are skipped."""

    @property
    def plugin_cls(self) -> type:
        """The plugin class under test."""
        raise NotImplementedError(f"{type(self).__name__} must define plugin_cls")

    def test_declares_plugin_metadata(self) -> None:
        cls = self.plugin_cls
        for attr in ("name", "description"):
            value = getattr(cls, attr, None)
            assert isinstance(value, str), f"{cls.__name__}.{attr} is {value!r}, not a str"
            assert value, f"{cls.__name__}.{attr} is empty"
        if self.plugin_kind == "command":
            return  # a command's configuration is its arguments
        options = getattr(cls, "Options", None)
        assert isinstance(options, type), f"{cls.__name__}.Options is {options!r}"
        assert issubclass(options, BaseModel)
        if self.plugin_kind in ("importer", "exporter"):
            options()  # every option has a default: `episodata import NAME SOURCE DEST`
            with pytest.raises(ValidationError, match="no_such_option"):
                options(no_such_option=1)

    def test_registered_under_its_name(self) -> None:
        cls = self.plugin_cls
        assert _GETTERS[self.plugin_kind](getattr(cls, "name", "")) is cls

    def _require_installed(self) -> None:
        if not self.installed:
            pytest.skip(f"{self.plugin_cls.__name__} is registered at runtime (installed = False)")

    def test_entry_point_is_discoverable(self) -> None:
        self._require_installed()
        check_entry_point_discoverable(self.plugin_kind, self.plugin_cls)

    def test_entry_point_module_is_light(self) -> None:
        self._require_installed()
        check_entry_point_is_light(self.plugin_kind, self.plugin_cls, self.heavy_modules)

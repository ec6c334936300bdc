"""Entry-point discovery and lookup: tests/fake_dists holds the fake distributions."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from episodata_core import _plugins, registry
from episodata_core.errors import (
    EpisodataPluginWarning,
    PluginConflictError,
    PluginDisabledError,
    PluginError,
    PluginNotFoundError,
)
from episodata_core.testing.pytest_plugin import DistPaths, isolated_plugins

FAKE_DISTS = Path(__file__).resolve().parents[1] / "fake_dists"
DISABLED = "EPISODATA_DISABLED_PLUGINS"
STRICT = "EPISODATA_STRICT_PLUGINS"

pytestmark = pytest.mark.usefixtures("isolated_registry")


@pytest.fixture
def basic(hermetic_registry):
    hermetic_registry(FAKE_DISTS / "basic")
    return hermetic_registry


@pytest.fixture
def broken(hermetic_registry):
    hermetic_registry(FAKE_DISTS / "basic")
    hermetic_registry(FAKE_DISTS / "broken")
    return hermetic_registry


def _info(kind: str, name: str, distribution: str | None = None) -> registry.PluginInfo:
    matches = [
        i
        for i in registry.list_plugins()
        if i.kind == kind and i.name == name and distribution in (None, i.distribution)
    ]
    assert len(matches) == 1, matches
    return matches[0]


def make_plugin(plugin_name: str | None = "runtime-fake") -> type:
    """A class with the members of every plugin contract (never instantiated)."""

    class RuntimePlugin:
        name: ClassVar[str | None] = plugin_name
        description: ClassVar[str] = "registered at runtime"

        class Options(BaseModel):
            pass

        schema: Any  # a data member declared by annotation only still counts
        create = episode_table = start_episode = append_rows = finalize_episode = None
        add_episode = read_rows = gather_rows = close = None
        sample = read_schema = import_into = export = None

    return RuntimePlugin


# -- selection by name ----------------------------------------------------------------


def test_get_backend_returns_the_entry_point_class(basic):
    cls = registry.get_backend("fake")

    assert (cls.__module__, cls.__name__) == ("episodata_fake", "FakeBackend")
    assert registry.get_importer("fakeimp").__name__ == "FakeImporter"
    assert _info("backend", "fake").status == "loaded"


def test_unknown_well_known_name_lists_installed_and_install_command(basic):
    expected = (
        "no importer named 'd4rl' (installed: 'fakeimp'). "
        'It ships in episodata-d4rl: pip install "episodata[d4rl]"'
    )
    with pytest.raises(PluginNotFoundError, match=re.escape(expected)):
        registry.get_importer("d4rl")


def test_unknown_name_lists_installed_and_points_to_the_listing(basic):
    with pytest.raises(
        PluginNotFoundError,
        match=r"no backend named 'nope' \(installed: 'fake'\)\. Run `episodata plugins`",
    ):
        registry.get_backend("nope")


def test_unknown_name_with_nothing_installed(hermetic_registry):
    with pytest.raises(PluginNotFoundError, match=r"no exporter named 'x' \(installed: none\)"):
        registry.get_exporter("x")


@pytest.mark.parametrize(("kind", "name"), sorted(_plugins.WELL_KNOWN))
def test_every_well_known_name_has_an_install_hint(hermetic_registry, kind, name):
    dist, command = _plugins.WELL_KNOWN[(kind, name)]
    message = _plugins.not_found_message(kind, name)

    assert message.endswith(f"It ships in {dist}: {command}")
    assert command.startswith("pip install ")


def test_installed_memory_backend_is_listed_without_the_hermetic_fixture():
    info = _info("backend", "memory")

    assert (info.value, info.distribution) == ("episodata_memory:MemoryBackend", "episodata-memory")
    assert info.version == importlib.metadata.version("episodata-memory")


# -- broken and incompatible plugins --------------------------------------------------


def test_broken_plugin_names_distribution_version_and_original_error(broken):
    with pytest.raises(
        PluginError, match=r"backend 'broken' from episodata-fake-broken 0\.1 "
    ) as e:
        registry.get_backend("broken")

    assert "failed to import: ModuleNotFoundError: No module named " in str(e.value)
    assert "'episodata_fake_missing_dependency'" in str(e.value)
    assert isinstance(e.value.__cause__, ModuleNotFoundError)
    info = _info("backend", "broken")
    assert info.status == "broken"
    assert info.error == str(e.value)


def test_broken_plugin_does_not_break_the_others(broken):
    with pytest.raises(PluginError, match="failed to import"):
        registry.get_backend("broken")

    assert registry.get_backend("fake").__name__ == "FakeBackend"


def test_a_failure_is_cached_until_refresh(broken, monkeypatch):
    with pytest.raises(PluginError, match="failed to import"):
        registry.get_backend("broken")
    # the missing dependency appears (as if installed); the cached failure still holds
    monkeypatch.setitem(sys.modules, "episodata_fake_missing_dependency", ModuleType("dep"))

    with pytest.raises(PluginError, match="failed to import") as again:
        registry.get_backend("broken")
    assert isinstance(again.value.__cause__, ModuleNotFoundError)

    registry.refresh_plugins()  # now it imports, and fails the contract check instead
    with pytest.raises(PluginError, match=r"BrokenBackend\) does not satisfy the StorageBackend"):
        registry.get_backend("broken")


def test_incompatible_plugin_names_what_is_missing(broken):
    with pytest.raises(
        PluginError,
        match=r"backend 'incompatible' from episodata-fake-incompatible 0\.1 "
        r"\(episodata_fake_incompatible:NoOptionsBackend\) does not satisfy the "
        r"StorageBackend contract: missing 'Options', ",
    ):
        registry.get_backend("incompatible")

    assert _info("backend", "incompatible").status == "broken"


def test_check_contract_reports_each_problem():
    class Bad:
        name = 3
        description = "ok"
        Options = dict

        def sample(self) -> None: ...

    problems = _plugins.check_contract("sampler", Bad)

    assert problems == [
        "'Options' is <class 'dict'>, not a pydantic BaseModel subclass",
        "'name' is 3, not a str",
    ]
    assert _plugins.check_contract("sampler", Bad())[0].startswith("expected a class, got Bad")
    del Bad.sample
    assert _plugins.check_contract("sampler", Bad)[0] == "missing 'sample'"


def test_broken_hook_plugin_warns_and_is_skipped(broken, monkeypatch):
    monkeypatch.setenv(DISABLED, "hook.badargs")

    with pytest.warns(
        EpisodataPluginWarning,
        match=r"skipped hook plugin: hook 'brokenhooks' from episodata-fake-broken 0\.1 .*"
        r"No module named 'episodata_fake_missing_dependency'.*EPISODATA_STRICT_PLUGINS=1",
    ) as record:
        loaded = registry.load_hook_plugins()

    assert [getattr(obj, "__name__", None) for obj in loaded] == ["episodata_fake.hooks"]
    assert record[0].filename == __file__  # stacklevel points at the caller
    assert _info("hook", "brokenhooks").status == "broken"


def test_strict_mode_makes_a_broken_hook_plugin_raise(broken, monkeypatch):
    monkeypatch.setenv(DISABLED, "hook.badargs")
    monkeypatch.setenv(STRICT, "1")

    with pytest.raises(PluginError, match=r"hook 'brokenhooks' from episodata-fake-broken 0\.1"):
        registry.load_hook_plugins()


# -- conflicts ------------------------------------------------------------------------


@pytest.mark.parametrize("order", [("basic", "conflict"), ("conflict", "basic")])
def test_two_distributions_with_one_name_conflict_at_selection(hermetic_registry, order):
    for scenario in order:
        hermetic_registry(FAKE_DISTS / scenario)
    expected = (
        "backend 'fake' is provided by episodata-fake 0.1 (episodata_fake:FakeBackend) and "
        "episodata-fake-rival 0.2 (episodata_fake_rival:RivalBackend). Choose one: "
        "prefer_plugin('backend', 'fake', 'episodata-fake-rival')"
    )

    statuses = {i.distribution: i.status for i in registry.list_plugins("backend")}
    with pytest.raises(PluginConflictError, match=re.escape(expected)):
        registry.get_backend("fake")

    assert statuses == {"episodata-fake": "conflict", "episodata-fake-rival": "conflict"}
    # neither was imported: the choice is never made by entry-point order
    assert "episodata_fake" not in sys.modules
    assert "episodata_fake_rival" not in sys.modules


def test_prefer_plugin_resolves_a_conflict(hermetic_registry):
    hermetic_registry(FAKE_DISTS / "basic")
    hermetic_registry(FAKE_DISTS / "conflict")

    registry.prefer_plugin("backend", "fake", "episodata-fake-rival")

    assert registry.get_backend("fake").__name__ == "RivalBackend"
    assert _info("backend", "fake", "episodata-fake-rival").status == "loaded"
    other = _info("backend", "fake", "episodata-fake")
    assert other.status == "conflict"
    assert other.error == (
        "not selected: backend 'fake' is preferred from episodata-fake-rival 0.2"
    )
    # distribution names compare as pip normalizes them
    registry.prefer_plugin("backend", "fake", "Episodata_Fake")
    assert registry.get_backend("fake").__name__ == "FakeBackend"


def test_preferring_a_distribution_that_lacks_the_plugin_is_an_error(basic):
    registry.prefer_plugin("backend", "fake", "acme-fake")

    with pytest.raises(
        PluginNotFoundError,
        match=r"backend 'fake' is preferred from distribution 'acme-fake', which does not "
        r"provide it \(provided by episodata-fake 0\.1\)",
    ):
        registry.get_backend("fake")


# -- disabling ------------------------------------------------------------------------


def test_disabled_by_kind_and_name(basic, monkeypatch):
    monkeypatch.setenv(DISABLED, " backend.fake ,other.thing")

    with pytest.raises(
        PluginDisabledError,
        match=r"backend 'fake' from episodata-fake 0\.1 is disabled by "
        r"EPISODATA_DISABLED_PLUGINS \('backend\.fake'\)\. Remove 'backend\.fake'",
    ):
        registry.get_backend("fake")

    assert registry.get_importer("fakeimp").__name__ == "FakeImporter"
    info = _info("backend", "fake")
    assert (info.status, info.error) == (
        "disabled",
        "disabled by EPISODATA_DISABLED_PLUGINS ('backend.fake')",
    )
    assert "episodata_fake:FakeBackend" not in str(registry.list_plugins("importer"))


def test_disabled_by_distribution_name(basic, monkeypatch):
    monkeypatch.setenv(DISABLED, "Episodata_Fake")

    with pytest.raises(PluginDisabledError, match=r"\('Episodata_Fake'\)"):
        registry.get_importer("fakeimp")

    assert {i.status for i in registry.list_plugins()} == {"disabled"}
    assert registry.load_hook_plugins() == []
    assert "episodata_fake" not in sys.modules


def test_disabling_one_rival_resolves_the_conflict(hermetic_registry, monkeypatch):
    hermetic_registry(FAKE_DISTS / "basic")
    hermetic_registry(FAKE_DISTS / "conflict")
    monkeypatch.setenv(DISABLED, "episodata-fake")

    assert registry.get_backend("fake").__name__ == "RivalBackend"


# -- dedupe and caching ---------------------------------------------------------------


def test_dedupe_keeps_one_of_identical_entry_points_in_order():
    a = _plugins.Candidate("backend", "zarr", "m:A", "episodata-zarr", "1.0")
    b = _plugins.Candidate("backend", "zarr", "m:A", "acme-zarr", "2.0")
    c = _plugins.Candidate("backend", "npz", "m:B", "episodata-npz", "1.0")

    assert _plugins.dedupe([a, c, a, b, c]) == (a, c, b)


def test_an_entry_point_listed_twice_is_one_plugin(hermetic_registry):
    hermetic_registry(FAKE_DISTS / "duplicate")

    infos = registry.list_plugins("backend")

    assert [(i.name, i.status) for i in infos] == [("twice", "available")]
    assert registry.get_backend("twice").__name__ == "TwiceBackend"


def test_a_folder_on_sys_path_twice_is_read_once(basic):
    basic(FAKE_DISTS / "basic")

    assert [i.name for i in registry.list_plugins("backend")] == ["fake"]


def test_entry_points_are_read_once_until_refresh(basic, monkeypatch):
    calls = []
    read = importlib.metadata.entry_points

    def counting(**params):
        calls.append(params)
        return read(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", counting)

    registry.list_plugins()
    registry.get_backend("fake")
    registry.get_importer("fakeimp")
    with pytest.raises(PluginNotFoundError):
        registry.get_sampler("uniform")
    registry.list_plugins("hook")
    assert len(calls) == 1

    registry.refresh_plugins()
    assert len(calls) == 1  # refreshing reads nothing by itself
    registry.get_backend("fake")
    assert len(calls) == 2


def test_loaded_classes_are_cached_until_refresh(basic):
    first = registry.get_backend("fake")
    del sys.modules["episodata_fake"]

    assert registry.get_backend("fake") is first
    assert "episodata_fake" not in sys.modules  # not imported again

    registry.refresh_plugins()
    again = registry.get_backend("fake")
    assert again is not first
    assert "episodata_fake" in sys.modules


def test_listing_never_imports_plugin_code(broken):
    infos = registry.list_plugins()

    assert {i.status for i in infos} == {"available"}
    assert {i.kind for i in infos} == {"backend", "importer", "hook"}
    imported = [m for m in sys.modules if m.startswith("episodata_fake")]
    assert imported == []


def test_list_plugins_filters_by_kind_and_rejects_unknown_kinds(basic):
    assert [(i.kind, i.name) for i in registry.list_plugins("importer")] == [
        ("importer", "fakeimp")
    ]
    with pytest.raises(ValueError, match=r"unknown plugin kind 'engine'; expected one of"):
        registry.list_plugins("engine")  # type: ignore[arg-type]


# -- runtime registration -------------------------------------------------------------


def test_register_backend_then_unregister(basic):
    cls = registry.register_backend(make_plugin())

    assert registry.get_backend("runtime-fake") is cls
    info = _info("backend", "runtime-fake")
    assert (info.status, info.distribution, info.version) == ("runtime", None, None)
    assert info.value == f"{__name__}:make_plugin.<locals>.RuntimePlugin"

    registry.unregister("backend", "runtime-fake")
    with pytest.raises(PluginNotFoundError, match=r"no backend named 'runtime-fake'"):
        registry.get_backend("runtime-fake")


def test_register_as_decorator_with_and_without_arguments(basic):
    named = registry.register_sampler(name="mine")
    decorated = named(make_plugin(None))
    bare = registry.register_exporter(make_plugin("exp"))

    assert registry.get_sampler("mine") is decorated
    assert registry.get_exporter("exp") is bare
    assert [i.name for i in registry.list_plugins() if i.status == "runtime"] == ["mine", "exp"]


def test_register_conflicts_with_an_entry_point_unless_replace(basic):
    with pytest.raises(
        PluginConflictError,
        match=r"backend 'fake' is already provided by episodata-fake 0\.1 "
        r"\(episodata_fake:FakeBackend\); pass replace=True",
    ):
        registry.register_backend(make_plugin("fake"))

    cls = registry.register_backend(make_plugin("fake"), replace=True)

    assert registry.get_backend("fake") is cls
    shadowed = _info("backend", "fake", "episodata-fake")
    assert shadowed.error is not None
    assert shadowed.error.startswith("replaced at runtime by ")


def test_register_conflicts_with_another_runtime_class(basic):
    class Other(make_plugin("dup")):
        pass

    registry.register_backend(make_plugin("dup"))
    registry.register_backend(make_plugin("dup"))  # same qualified name: a re-run cell

    with pytest.raises(PluginConflictError, match=r"backend 'dup' is already registered at"):
        registry.register_backend(Other)
    assert registry.register_backend(Other, replace=True) is Other


def test_register_rejects_classes_without_name_or_contract(basic):
    with pytest.raises(PluginError, match=r"declares no `name`; add a class attribute"):
        registry.register_backend(make_plugin(None))

    class NoReader:
        name = "imp"
        description = "an importer that cannot read"
        Options = BaseModel

    with pytest.raises(
        PluginError,
        match=r"cannot register .*NoReader as importer 'imp': it does not satisfy the Importer "
        r"contract: missing 'import_into', 'read_schema'",
    ):
        registry.register_importer(NoReader)


def test_unregister_unknown_name_says_what_is_registered(basic):
    registry.register_backend(make_plugin("here"))

    with pytest.raises(
        PluginNotFoundError,
        match=r"no backend named 'fake' is registered at runtime \(runtime: 'here'\); to hide "
        r"an installed plugin set EPISODATA_DISABLED_PLUGINS=backend\.fake",
    ):
        registry.unregister("backend", "fake")


def test_runtime_registrations_and_preferences_survive_refresh(basic):
    cls = registry.register_backend(make_plugin())
    registry.prefer_plugin("backend", "fake", "episodata-fake")

    registry.refresh_plugins()

    assert registry.get_backend("runtime-fake") is cls
    assert registry.get_backend("fake").__name__ == "FakeBackend"


def test_isolation_restores_the_registry(basic):
    with isolated_plugins():
        registry.register_backend(make_plugin("temporary"))
        registry.prefer_plugin("backend", "fake", "acme-fake")
        assert registry.get_backend("temporary").name == "temporary"

    with pytest.raises(PluginNotFoundError, match="no backend named 'temporary'"):
        registry.get_backend("temporary")
    assert registry.get_backend("fake").__name__ == "FakeBackend"  # preference is gone


def test_dist_paths_undo_removes_the_folder_and_its_modules():
    paths = DistPaths()
    paths(FAKE_DISTS / "basic")
    assert registry.get_backend("fake").__module__ == "episodata_fake"

    paths.undo()

    assert str(FAKE_DISTS / "basic") not in sys.path
    assert "episodata_fake" not in sys.modules
    with pytest.raises(PluginNotFoundError, match="no backend named 'fake'"):
        registry.get_backend("fake")

"""Lifecycle hooks: specs, plugins from entry points and at runtime, validation."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from episodata_core import hooks, registry
from episodata_core.errors import EpisodataPluginWarning, PluginError, PluginNotFoundError

FAKE_DISTS = Path(__file__).resolve().parents[1] / "fake_dists"
DISABLED = "EPISODATA_DISABLED_PLUGINS"

pytestmark = pytest.mark.usefixtures("isolated_registry")

SPECS = {
    "after_dataset_created": ["dataset"],
    "after_episode_written": ["dataset", "episode"],
    "before_manifest_written": ["dataset", "manifest"],
    "after_dataset_closed": ["dataset"],
    "on_pipeline_start": ["pipeline"],
    "after_pipeline_step": ["pipeline", "step"],
    "on_pipeline_end": ["pipeline", "result"],
    "on_pipeline_error": ["pipeline", "error"],
}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    @hooks.hookimpl
    def after_episode_written(self, episode: int) -> None:  # a subset of the arguments
        self.calls.append(("after_episode_written", episode))

    @hooks.hookimpl
    def before_manifest_written(self, manifest: dict[str, object]) -> None:
        manifest["edited"] = True


def test_every_spec_is_declared_with_its_arguments_and_says_when_it_fires():
    pm = hooks.get_plugin_manager()
    declared = {
        name: list(caller.spec.argnames)
        for name, caller in vars(pm.hook).items()
        if not name.startswith("_") and caller.spec is not None
    }

    assert declared == SPECS
    for name in SPECS:
        doc = inspect.getdoc(getattr(hooks.HookSpecs, name))
        assert doc is not None
        assert doc.startswith("Fire "), name


def test_hook_plugin_from_an_installed_distribution_fires(hermetic_registry):
    hermetic_registry(FAKE_DISTS / "basic")
    dataset = object()

    assert "episodata_fake.hooks" not in sys.modules  # loaded on first use, not before
    hooks.call_hook("after_episode_written", dataset=dataset, episode=3)

    assert [(dataset, 3)] == sys.modules["episodata_fake.hooks"].CALLS


def test_disabled_hook_plugin_is_not_loaded(hermetic_registry, monkeypatch):
    hermetic_registry(FAKE_DISTS / "basic")
    monkeypatch.setenv(DISABLED, "hook.fakehooks")

    assert hooks.call_hook("after_episode_written", dataset=None, episode=0) == []
    assert "episodata_fake.hooks" not in sys.modules


def test_runtime_hook_fires_until_unregistered(hermetic_registry):
    recorder = hooks.register_hooks(Recorder())
    manifest: dict[str, object] = {}

    hooks.call_hook("after_episode_written", dataset=None, episode=7)
    hooks.call_hook("before_manifest_written", dataset=None, manifest=manifest)
    hooks.unregister_hooks(recorder)
    hooks.call_hook("after_episode_written", dataset=None, episode=8)

    assert recorder.calls == [("after_episode_written", 7)]
    assert manifest == {"edited": True}
    with pytest.raises(PluginNotFoundError, match=r"is not a runtime hook plugin"):
        hooks.unregister_hooks(recorder)


def test_runtime_hooks_survive_refresh_and_the_manager_is_rebuilt(hermetic_registry):
    recorder = hooks.register_hooks(Recorder())
    before = hooks.get_plugin_manager()

    registry.refresh_plugins()
    after = hooks.get_plugin_manager()
    hooks.call_hook("after_episode_written", dataset=None, episode=1)

    assert after is not before
    assert hooks.get_plugin_manager() is after  # built once, then cached
    assert recorder.calls == [("after_episode_written", 1)]


def test_wrong_argument_name_fails_clearly_and_registers_nothing(hermetic_registry):
    class Typo:
        @hooks.hookimpl
        def after_episode_written(self, dataset: object, episod: int) -> None:
            raise AssertionError("never called")

    with pytest.raises(
        PluginError,
        match=r"(?s)cannot register hooks from .*Typo.*after_episode_written.*"
        r"Argument\(s\) \{'episod'\} are declared in the hookimpl but can not be found",
    ):
        hooks.register_hooks(Typo())

    assert hooks.call_hook("after_episode_written", dataset=None, episode=0) == []


def test_unknown_hook_name_fails_clearly(hermetic_registry):
    class Misspelled:
        @hooks.hookimpl
        def after_episode_writen(self, episode: int) -> None:
            raise AssertionError("never called")

    with pytest.raises(PluginError, match=r"unknown hook 'after_episode_writen'"):
        hooks.register_hooks(Misspelled())


def test_entry_point_hook_with_wrong_argument_warns_and_is_skipped(hermetic_registry, monkeypatch):
    hermetic_registry(FAKE_DISTS / "basic")
    hermetic_registry(FAKE_DISTS / "broken")
    monkeypatch.setenv(DISABLED, "hook.brokenhooks")

    with pytest.warns(
        EpisodataPluginWarning,
        match=r"(?s)hook 'badargs' from episodata-fake-broken 0\.1 \(episodata_fake_broken\."
        r"badargs\) does not match the episodata hook specifications: .*'episode_index'",
    ) as record:
        hooks.call_hook("after_episode_written", dataset=None, episode=2)

    assert len(record) == 1
    assert record[0].filename == __file__
    assert sys.modules["episodata_fake.hooks"].CALLS == [(None, 2)]  # the good one still runs
    assert [i.status for i in registry.list_plugins("hook") if i.name == "badargs"] == ["broken"]


def test_strict_mode_raises_for_a_broken_hook_plugin_and_keeps_no_manager(
    hermetic_registry, monkeypatch
):
    hermetic_registry(FAKE_DISTS / "broken")
    monkeypatch.setenv("EPISODATA_STRICT_PLUGINS", "1")

    for _ in range(2):  # a failed build is not cached
        with pytest.raises(PluginError, match=r"hook '(badargs|brokenhooks)' from"):
            hooks.get_plugin_manager()


def test_call_hook_checks_the_hook_name_and_arguments(hermetic_registry):
    with pytest.raises(PluginNotFoundError, match=r"no episodata hook named 'after_write'; the "):
        hooks.call_hook("after_write", dataset=None)
    with pytest.raises(
        TypeError,
        match=r"hook 'after_episode_written' takes the arguments \['dataset', 'episode'\], "
        r"got \['dataset'\]",
    ):
        hooks.call_hook("after_episode_written", dataset=None)

"""``episodata plugins``: what is installed, and whether it loads."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from episodata_core import registry
from episodata_core._plugins import KINDS
from episodata_core.cli._command import Verb, arg, table
from episodata_core.errors import EpisodataPluginWarning, PluginError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

__all__ = ["COMMANDS"]


def _cmd_plugins(args: argparse.Namespace) -> int:
    """List installed plugins; with ``--check``, import each one to find broken ones."""
    kind: registry.PluginKind | None = args.kind
    if args.check:
        _load_all(kind)
    infos = registry.list_plugins(kind)
    if not infos:
        print(f"no {kind or 'episodata'} plugins installed")
        return 0
    rows = [
        (
            i.name,
            i.kind,
            f"{i.distribution}=={i.version}" if i.distribution else "(runtime)",
            i.status,
        )
        for i in infos
    ]
    print(table(("NAME", "KIND", "DISTRIBUTION", "STATUS"), rows))
    problems = [i for i in infos if i.error and i.status in {"broken", "conflict", "disabled"}]
    for info in problems:
        print(f"\n{info.kind} {info.name!r} ({info.status}): {info.error}")
    return 1 if args.check and any(i.status in {"broken", "conflict"} for i in infos) else 0


def _load_all(kind: registry.PluginKind | None) -> None:
    """Import every listed plugin so that ``list_plugins`` reports broken ones."""
    getters: dict[str, Callable[[str], type]] = {
        "backend": registry.get_backend,
        "sampler": registry.get_sampler,
        "importer": registry.get_importer,
        "exporter": registry.get_exporter,
        "command": registry.get_command,
        "executor": registry.get_executor,
    }
    # a failure is recorded in the registry and shown in the listing, so it is not
    # reported twice here (no exception, no warning)
    for info in registry.list_plugins(kind):
        if info.status == "available" and info.kind != "hook":
            try:
                getters[info.kind](info.name)
            except PluginError:
                continue
    if kind in (None, "hook"):
        from episodata_core import hooks

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EpisodataPluginWarning)
            hooks.get_plugin_manager()


COMMANDS: tuple[Verb, ...] = (
    Verb(
        "plugins",
        help="list installed plugins: name, kind, distribution==version, status",
        run=_cmd_plugins,
        arguments=(
            arg("--kind", choices=KINDS, help="only plugins of this kind"),
            arg(
                "--check",
                action="store_true",
                help="import every plugin to find broken ones (exit code 1 if any)",
            ),
        ),
        description=(
            "List the plugins found through entry points and registered at runtime. "
            "Listing reads package metadata only; --check also imports each plugin."
        ),
    ),
)

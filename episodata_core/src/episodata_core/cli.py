"""The ``episodata`` command.

Each verb is one ``_cmd_*`` function taking the parsed arguments and returning an exit
code, plus one row in :data:`_COMMANDS` naming it, its help and its arguments. Exit codes:
0 success, 1 an episodata error (one line on stderr, no traceback), 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

from episodata_core import __version__, registry
from episodata_core._plugins import KINDS
from episodata_core.errors import EpisodataError, EpisodataPluginWarning, PluginError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["main"]

PROG = "episodata"


@dataclass(frozen=True)
class _Arg:
    """One ``add_argument`` call: its flags and keyword arguments."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


def _arg(*flags: str, **options: Any) -> _Arg:
    return _Arg(flags, options)


@dataclass(frozen=True)
class _Command:
    """A verb: ``run`` gets the parsed arguments and returns the exit code."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    arguments: tuple[_Arg, ...] = ()
    description: str | None = None


def _versions() -> str:
    lines = [f"episodata-core {__version__}"]
    try:
        lines.append(f"episodata {metadata.version('episodata')}")
    except metadata.PackageNotFoundError:
        lines.append("episodata (the meta distribution) is not installed")
    return "\n".join(lines)


class _VersionAction(argparse.Action):
    """``--version``: look the versions up only when asked (metadata reads are not free)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show the versions of episodata-core and episodata and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(_versions())
        parser.exit()


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
    print(_table(("NAME", "KIND", "DISTRIBUTION", "STATUS"), rows))
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


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )


_COMMANDS: tuple[_Command, ...] = (
    _Command(
        "plugins",
        help="list installed plugins: name, kind, distribution==version, status",
        run=_cmd_plugins,
        arguments=(
            _arg("--kind", choices=KINDS, help="only plugins of this kind"),
            _arg(
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


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="episodata: episodic data for world models, control and RL.",
    )
    parser.add_argument("--version", action=_VersionAction)
    verbs = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    for command in _COMMANDS:
        sub = verbs.add_parser(
            command.name, help=command.help, description=command.description or command.help
        )
        for argument in command.arguments:
            sub.add_argument(*argument.flags, **argument.options)
        sub.set_defaults(run=command.run)
    return parser


def _one_line(message: str) -> str:
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``episodata`` command with ``argv`` (default: ``sys.argv[1:]``).

    Returns the exit code: 0 on success, 1 for an episodata error (reported on one
    line of stderr), 2 for a usage error.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        run: Callable[[argparse.Namespace], int] = args.run
        return run(args)
    except SystemExit as exit_:  # argparse exits for --help, --version and usage errors
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except EpisodataError as err:
        print(f"{PROG}: error: {_one_line(str(err))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``episodata`` command.

Each verb is one ``_cmd_*`` function taking the parsed arguments and returning an exit
code, plus one :class:`Command` row in the ``COMMANDS`` table of its module. Exit codes:
0 success, 1 an episodata error (one line on stderr, no traceback), 2 a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

from episodata_core._version import __version__
from episodata_core.errors import EpisodataError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from episodata_core.cli._command import Command

__all__ = ["main"]

PROG = "episodata"


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


def _commands() -> tuple[Command, ...]:
    # each verb module is imported only when the parser is built
    from episodata_core.cli import (
        _datasets,
        _migrate,
        _pipeline,
        _plugins,
        _quickstart,
        _report,
        _transfer,
    )

    return (
        *_quickstart.COMMANDS,
        *_datasets.COMMANDS,
        *_transfer.COMMANDS,
        *_migrate.COMMANDS,
        *_pipeline.COMMANDS,
        *_plugins.COMMANDS,
        *_report.COMMANDS,
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
    for command in _commands():
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
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130

"""The ``episodata`` command.

Each core verb is one ``_cmd_*`` function taking the parsed arguments and returning an
exit code, plus one :class:`~episodata_core.cli._command.Verb` row in the ``COMMANDS``
table of its module. Every other verb (``report``, ``quickstart``, a third party's) is a
plugin: a class in the ``episodata.commands`` entry-point group
(:class:`episodata_core.commands.Command`), found through the registry like every other
plugin kind, so ``episodata --help`` lists what is installed. Exit codes: 0 success, 1 an
error (one line on stderr, no traceback; ``--debug`` shows it), 2 a usage error.
Warnings are printed once each, as ``episodata: warning: ...``.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from importlib import metadata
from typing import TYPE_CHECKING, Any

from episodata_core._version import __version__
from episodata_core.errors import EpisodataError, EpisodataPluginWarning, PluginError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from episodata_core.cli._command import Verb
    from episodata_core.registry import PluginInfo

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


def _core_verbs() -> tuple[Verb, ...]:
    # each verb module is imported only when the parser is built
    from episodata_core.cli import _datasets, _migrate, _pipeline, _plugins, _transfer

    return (
        *_datasets.COMMANDS,
        *_transfer.COMMANDS,
        *_migrate.COMMANDS,
        *_pipeline.COMMANDS,
        *_plugins.COMMANDS,
    )


def _plugin_verb(info: PluginInfo, taken: set[str]) -> Verb:
    """Load the ``episodata.commands`` plugin ``info`` and turn it into a verb row."""
    from episodata_core import registry
    from episodata_core.cli._command import Verb

    where = f"command {info.name!r} from {info.distribution or 'a runtime registration'}"
    if info.name in taken:
        raise PluginError(f"{where} is a verb of the core, which a plugin cannot replace")
    cls = registry.get_command(info.name)
    if cls.name != info.name:
        raise PluginError(
            f"{where} ({info.value}) declares name = {cls.name!r}; the entry point's name "
            f"and the class's `name` must be the same verb"
        )
    try:
        command = cls()
        # a plugin's argument that argparse refuses must not take every verb down
        probe = argparse.ArgumentParser(add_help=False)
        for argument in cls.arguments:
            probe.add_argument(*argument.flags, **argument.options)
    except Exception as err:  # the plugin boundary: the failure is the plugin's
        raise PluginError(
            f"{where} ({info.value}) cannot be set up: {type(err).__name__}: {err}"
        ) from err
    origin = f"{info.distribution} {info.version}" if info.distribution else None
    help_text = cls.description if origin is None else f"{cls.description} [{info.distribution}]"
    return Verb(
        info.name,
        help=help_text,
        run=command.run,
        arguments=tuple(cls.arguments),
        description=getattr(cls, "epilog", None) or cls.description,
        origin=origin,
    )


def _verbs() -> tuple[Verb, ...]:
    """The core's verbs, then each installed command plugin's, sorted by name.

    A command plugin that fails to load is skipped with an
    :class:`~episodata_core.errors.EpisodataPluginWarning` naming it and its distribution
    (or raises with ``EPISODATA_STRICT_PLUGINS=1``), so one broken plugin never takes
    the other verbs down.
    """
    from episodata_core import registry
    from episodata_core._plugins import STRICT_ENV

    core = _core_verbs()
    taken = {verb.name for verb in core}
    strict = os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
    plugins: list[Verb] = []
    for info in registry.list_plugins("command"):
        if info.status == "disabled" or any(v.name == info.name for v in plugins):
            continue  # a runtime registration and the entry point it replaced: one verb
        try:
            plugins.append(_plugin_verb(info, taken))
        except PluginError as err:
            if strict:
                raise
            warnings.warn(
                f"skipped command plugin: {err} ({STRICT_ENV}=1 makes this an error)",
                EpisodataPluginWarning,
                stacklevel=3,
            )
    return (*core, *sorted(plugins, key=lambda verb: verb.name))


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="episodata: episodic data for world models, control and RL.",
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of an error instead of its one-line summary",
    )
    verbs = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True
    )
    for verb in _verbs():
        sub = verbs.add_parser(verb.name, help=verb.help, description=verb.description or verb.help)
        for argument in verb.arguments:
            sub.add_argument(*argument.flags, **argument.options)
        sub.set_defaults(run=verb.run)
    return parser


def _not_installed(argv: Sequence[str], parser: argparse.ArgumentParser) -> str | None:
    """The install hint for a well-known plugin verb that is not installed, if ``argv`` names one."""
    from episodata_core._plugins import WELL_KNOWN

    verb = next((a for a in argv if not a.startswith("-")), None)
    hint = WELL_KNOWN.get(("command", verb)) if verb is not None else None
    choices = next(
        (a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {}
    )
    if hint is None or verb in (choices or {}):
        return None
    return f"no command named {verb!r}: it ships in {hint[0]}: {hint[1]}"


def _one_line(message: str) -> str:
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


_OS_FIXES: dict[type[OSError], str] = {
    FileNotFoundError: "check the path",
    PermissionError: "choose a location you may write to, or change its permissions",
    IsADirectoryError: "give a file, not a folder",
    NotADirectoryError: "a part of the path is a file, not a folder",
    FileExistsError: "choose a new path",
}


def _describe_os_error(err: OSError) -> str:
    """``no such file or directory: 'x.hdf5' (check the path)``: what, where and the fix."""
    if err.strerror is None:  # raised with a message of its own, which says the fix
        return str(err)
    what = err.strerror[:1].lower() + err.strerror[1:]
    where = f": {err.filename!r}" if err.filename else ""
    fix = next((text for kind, text in _OS_FIXES.items() if isinstance(err, kind)), "")
    return f"{what}{where}" + (f" ({fix})" if fix else "")


def _show_warning(seen: set[str]) -> Callable[..., None]:
    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        text = _one_line(str(message))
        if text not in seen:  # a warning raised once per episode is printed once
            seen.add(text)
            print(f"{PROG}: warning: {text}", file=sys.stderr)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``episodata`` command with ``argv`` (default: ``sys.argv[1:]``).

    Returns the exit code: 0 on success, 1 for an error (reported on one line of
    stderr, with the full traceback under ``--debug``), 2 for a usage error.
    """
    debug = False
    try:
        parser = _build_parser()
        argv = sys.argv[1:] if argv is None else list(argv)
        missing = _not_installed(argv, parser)
        if missing is not None:
            print(f"{PROG}: error: {missing}", file=sys.stderr)
            return 2
        args = parser.parse_args(argv)
        debug = args.debug
        run: Callable[[argparse.Namespace], int] = args.run
        with warnings.catch_warnings():
            # warnings as one line each, without the source line Python would print
            # (which is this module's call, not the user's code)
            warnings.showwarning = _show_warning(set())
            return run(args)
    except SystemExit as exit_:  # argparse exits for --help, --version and usage errors
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except EpisodataError as err:
        if debug:
            raise
        print(f"{PROG}: error: {_one_line(str(err))}", file=sys.stderr)
        return 1
    except OSError as err:
        if debug or isinstance(err, BrokenPipeError):
            if isinstance(err, BrokenPipeError):
                return _broken_pipe()
            raise
        print(f"{PROG}: error: {_describe_os_error(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        # a bug (ours or a plugin's): one line that says how to see and report it
        if debug:
            raise
        print(
            f"{PROG}: error: {type(err).__name__}: {_one_line(str(err))} (an unexpected "
            "error: run again with --debug for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


def _broken_pipe() -> int:
    # the reader (e.g. `| head`) went away: stop quietly, as Unix tools do
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141

"""The contract of an ``episodata`` command (``episodata.commands`` entry points).

A plugin adds a verb to the ``episodata`` command by naming a class in the
``episodata.commands`` entry-point group; the entry point's name is the verb::

    [project.entry-points."episodata.commands"]
    report = "episodata_report._command:ReportCommand"

The class is found like every other plugin kind (:func:`episodata_core.registry.get_command`),
imported when the command line is parsed, and instantiated with no arguments to run.
Keep the module the entry point names light: import heavy libraries inside ``run``.
The built-in verbs (``info``, ``verify``, ``copy``, ``import``, ``export``,
``pipeline``, ``plugins``) are the core's and cannot be replaced by a plugin.

Examples
--------
>>> import argparse
>>> from episodata_core.commands import Arg, arg
>>> class HelloCommand:
...     name = "hello"
...     description = "print a greeting"
...     arguments: tuple[Arg, ...] = (arg("--who", default="world"),)
...
...     def run(self, args: argparse.Namespace) -> int:
...         print(f"hello, {args.who}")
...         return 0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import argparse

__all__ = ["Arg", "Command", "arg"]


@dataclass(frozen=True)
class Arg:
    """One ``argparse`` ``add_argument`` call: its flags and keyword arguments."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


def arg(*flags: str, **options: Any) -> Arg:
    """Shorthand for :class:`Arg`: ``arg("--seed", type=int, default=0)``."""
    return Arg(flags, options)


class Command(Protocol):
    """A verb of the ``episodata`` command, contributed by a plugin.

    ``name`` is the verb (it must equal the entry point's name), ``description`` the
    one line ``episodata --help`` shows; a longer ``epilog`` may be given for
    ``episodata VERB --help``. ``run`` gets the parsed arguments and returns the exit
    code; an :class:`~episodata_core.errors.EpisodataError` it raises is printed on one
    line of stderr with exit code 1.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    arguments: ClassVar[tuple[Arg, ...]]

    def run(self, args: argparse.Namespace) -> int:
        """Run the verb with the parsed ``args``; return the exit code."""
        ...

"""The shape of a verb: its name, help, arguments and the function that runs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from episodata_core.commands import Arg, arg

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

__all__ = ["Arg", "Verb", "arg", "table"]


@dataclass(frozen=True)
class Verb:
    """A verb: ``run`` gets the parsed arguments and returns the exit code.

    The core's verbs are written as rows of this table; a plugin's
    :class:`~episodata_core.commands.Command` class is turned into one (``origin``
    names its distribution).
    """

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    arguments: tuple[Arg, ...] = ()
    description: str | None = None
    origin: str | None = None


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )

"""The shape of a verb: its name, help, arguments and the function that runs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

__all__ = ["Arg", "Command", "arg", "table"]


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call: its flags and keyword arguments."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


def arg(*flags: str, **options: Any) -> Arg:
    """Shorthand for :class:`Arg`."""
    return Arg(flags, options)


@dataclass(frozen=True)
class Command:
    """A verb: ``run`` gets the parsed arguments and returns the exit code."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    arguments: tuple[Arg, ...] = ()
    description: str | None = None


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )

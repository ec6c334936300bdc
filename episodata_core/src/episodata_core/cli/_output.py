"""What the command line prints: counts in words, and whether to draw progress bars."""

from __future__ import annotations

import sys

__all__ = ["counted", "progress_wanted"]


def counted(count: int, noun: str) -> str:
    """``1 episode``, ``2 episodes``: a count with its noun in the right number."""
    return f"{count} {noun if count == 1 else noun + 's'}"


def progress_wanted(quiet: bool) -> bool:
    """Progress bars on a terminal only: piped or redirected output stays clean."""
    return not quiet and sys.stderr.isatty()

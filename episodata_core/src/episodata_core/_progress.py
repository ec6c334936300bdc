"""Progress bars for long work: tqdm when it is installed, nothing otherwise."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, cast

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["progress_bar"]

T = TypeVar("T")


def progress_bar(items: Iterable[T], *, enabled: bool, what: str, action: str) -> Iterable[T]:
    """``items``, shown as a progress bar on stderr when ``enabled`` and tqdm is installed.

    tqdm is optional: the core depends on numpy, pydantic and pluggy only, and the
    ``episodata`` distribution adds tqdm for the command line.
    """
    if not enabled:
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return items
    return cast("Iterable[T]", tqdm(items, unit=what.rstrip("s"), desc=f"{action} {what}"))

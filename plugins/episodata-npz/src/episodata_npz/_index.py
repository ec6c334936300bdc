"""The in-memory index: per-episode columns and the rows of ongoing episodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.authoring import Growable
from episodata_core.protocols import EpisodeTable

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Index", "Ongoing"]


@dataclass
class Ongoing:
    """Rows of an ongoing episode and how many of them its spill on disk holds."""

    buffers: dict[str, Growable]
    num_rows: int
    durable_rows: int = 0  # rows in ongoing/episode_N.npz; 0 while there is no spill
    signature: tuple[int, int, int] | None = None  # (inode, size, mtime) of the loaded spill


class Index:
    """Per-episode columns that ``episode_table()`` returns views of."""

    def __init__(self, optional: Iterable[str]) -> None:
        self.length = Growable((), np.dtype(np.int64), 64)
        self.terminated = Growable((), np.dtype(np.bool_), 64)
        self.truncated = Growable((), np.dtype(np.bool_), 64)
        self.ongoing = Growable((), np.dtype(np.bool_), 64)
        self.present = {key: Growable((), np.dtype(np.bool_), 64) for key in optional}

    def __len__(self) -> int:
        return len(self.length)

    def put(
        self,
        episode: int,
        length: int,
        *,
        terminated: bool,
        truncated: bool,
        ongoing: bool,
        fields: Iterable[str],
    ) -> None:
        """Set the entry of ``episode``, appending it when it is the next id."""
        assert episode <= len(self), "episodes are indexed in id order"
        stored = set(fields)
        values: list[tuple[Growable, Any]] = [
            (self.length, length),
            (self.terminated, terminated),
            (self.truncated, truncated),
            (self.ongoing, ongoing),
            *((column, key in stored) for key, column in self.present.items()),
        ]
        append = episode == len(self)
        for column, value in values:
            if append:
                column.append(value)
            else:
                column.data[episode] = value

    def table(self) -> EpisodeTable:
        """Read-only views of every column, valid until the next change."""
        return EpisodeTable(
            length=_read_only(self.length.view()),
            terminated=_read_only(self.terminated.view()),
            truncated=_read_only(self.truncated.view()),
            ongoing=_read_only(self.ongoing.view()),
            present={key: _read_only(column.view()) for key, column in self.present.items()},
        )


def _read_only(view: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    # a column is a view of the index itself: a caller must not be able to edit it
    view.flags.writeable = False
    return view

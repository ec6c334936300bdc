"""The in-memory episode index: where each episode's rows live, its length and flags.

Both the writer and readers keep one; readers rebuild theirs from the commit records in
``data.h5`` and the ongoing spill. It needs nothing beyond NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from episodata_core.authoring import Growable
from episodata_core.protocols import EpisodeTable

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    import numpy.typing as npt

__all__ = ["ONGOING", "EpisodeIndex"]

ONGOING = -1
"""``row_start`` of an episode whose rows are not in ``data.h5`` yet."""


class EpisodeIndex:
    """Per-episode arrays, indexed by episode id; ``row_start`` is -1 for ongoing episodes.

    ``known`` marks ids that some record or spill described: a reader that finds an
    unknown id below the highest known one raced a commit and reads again.
    """

    def __init__(self, optional: Iterable[str]) -> None:
        self.row_start = Growable((), np.dtype(np.int64))
        self.length = Growable((), np.dtype(np.int64))
        self.terminated = Growable((), np.dtype(np.bool_))
        self.truncated = Growable((), np.dtype(np.bool_))
        self.ongoing = Growable((), np.dtype(np.bool_))
        self.known = Growable((), np.dtype(np.bool_))
        self.present = {key: Growable((), np.dtype(np.bool_)) for key in optional}

    def __len__(self) -> int:
        return len(self.length)

    def _columns(self) -> list[Growable]:
        fixed = [self.row_start, self.length, self.terminated, self.truncated, self.ongoing]
        return [*fixed, self.known, *self.present.values()]

    def _reserve(self, size: int) -> None:
        if size > len(self):
            for column in self._columns():
                column.resize(size)

    def table(self) -> EpisodeTable:
        """Views of the index, valid until the next write or refresh."""
        return EpisodeTable(
            length=self.length.view(),
            terminated=self.terminated.view(),
            truncated=self.truncated.view(),
            ongoing=self.ongoing.view(),
            present={key: column.view() for key, column in self.present.items()},
        )

    def put(
        self,
        episode: int,
        *,
        row_start: int,
        length: int,
        terminated: bool,
        truncated: bool,
        fields: Collection[str],
    ) -> None:
        """Describe one episode; ``row_start == ONGOING`` marks it ongoing."""
        self._reserve(episode + 1)
        self.row_start.data[episode] = row_start
        self.length.data[episode] = length
        self.terminated.data[episode] = terminated
        self.truncated.data[episode] = truncated
        self.ongoing.data[episode] = row_start == ONGOING
        self.known.data[episode] = True
        for key, column in self.present.items():
            column.data[episode] = key in fields

    def put_finalized(
        self,
        episodes: npt.NDArray[np.int64],
        row_start: npt.NDArray[np.int64],
        num_rows: npt.NDArray[np.int64],
        flags: npt.NDArray[np.uint8],
        present: dict[str, npt.NDArray[np.bool_]],
    ) -> None:
        """Describe many finalized episodes at once (``[n]`` arrays from commit records)."""
        if not len(episodes):
            return
        self._reserve(int(episodes.max()) + 1)
        self.row_start.data[episodes] = row_start
        self.length.data[episodes] = num_rows - 1
        self.terminated.data[episodes] = (flags & 1).astype(bool)
        self.truncated.data[episodes] = (flags & 2).astype(bool)
        self.ongoing.data[episodes] = False
        self.known.data[episodes] = True
        for key, column in self.present.items():
            column.data[episodes] = present[key]

    def first_gap(self) -> int | None:
        """The lowest episode id that nothing described, or ``None``."""
        missing = np.flatnonzero(~self.known.view())
        return int(missing[0]) if len(missing) else None

    def stores(self, episode: int, key: str) -> bool:
        """Whether ``episode`` stores field ``key`` (required fields always do)."""
        column = self.present.get(key)
        return column is None or bool(column.data[episode])

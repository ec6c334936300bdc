"""The tail: rows of every episode not (yet) in the arrays, held in memory.

Finalized episodes that the log holds take the data rows right after the arrays'
committed ones, in the order they were finalized: the tail keeps them as one buffer per
field, rows ``[base, base + len)``, so a batch gathers them with one fancy index, as fast
as from a decoded chunk. Ongoing episodes keep one buffer each (:class:`Ongoing`). A
fold moves the finalized rows into the arrays and the tail forgets them (``rebase``).

The writer fills the tail as it logs; a reader fills it from the log at ``refresh()``.
Both read their tail from memory only: bounded by ``fold_bytes`` plus the ongoing
episodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from episodata_core.authoring import Growable, check_fields
from episodata_core.errors import DatasetStateError

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy.typing as npt

    from episodata_core.protocols import Rows
    from episodata_zarr._layout import FieldLayout

__all__ = ["Ongoing", "Tail", "TailEpisode"]


class Ongoing:
    """An ongoing episode: all its rows in memory; the first ``logged`` are in the log.

    Its fields share one row count and capacity, so a step costs one store per field
    (this runs per field per step: the hottest path of recording).
    """

    __slots__ = ("capacity", "data", "logged", "size")

    def __init__(self, rows: Rows) -> None:
        count = len(next(iter(rows.values())))
        self.capacity = max(64, count)
        self.data: dict[str, npt.NDArray[Any]] = {}
        for key, block in rows.items():
            array = np.empty((self.capacity, *block.shape[1:]), dtype=block.dtype)
            array[:count] = block
            self.data[key] = array
        self.size = count
        self.logged = 0

    def __len__(self) -> int:
        return self.size

    def _reserve(self, needed: int) -> None:
        self.capacity = max(needed, 2 * self.capacity)
        for key, array in self.data.items():
            grown = np.empty((self.capacity, *array.shape[1:]), dtype=array.dtype)
            grown[: self.size] = array[: self.size]
            self.data[key] = grown

    def _check_fields(self, episode: int, keys: Any) -> None:
        check_fields(keys, self.data.keys(), f"episode {episode}", error=DatasetStateError)

    def append(self, episode: int, rows: Rows) -> int:
        """Append ``[n, ...]`` rows of every field; returns ``n``."""
        self._check_fields(episode, rows.keys())
        counts = {len(block) for block in rows.values()}
        if len(counts) != 1:
            raise DatasetStateError(
                f"episode {episode}: the fields' blocks have different row counts "
                f"{ {key: len(block) for key, block in rows.items()} }"
            )
        count = counts.pop()
        start = self.size
        if start + count > self.capacity:
            self._reserve(start + count)
        for key, block in rows.items():
            self.data[key][start : start + count] = block
        self.size = start + count
        return count

    def append_step(self, episode: int, values: Mapping[str, Any]) -> None:
        """Append one row of exact values (see ``SupportsAppendStep``)."""
        data = self.data
        if values.keys() != data.keys():
            self._check_fields(episode, values.keys())
        row = self.size
        if row == self.capacity:
            self._reserve(row + 1)
        for key, value in values.items():
            data[key][row] = value
        self.size = row + 1

    def view(self, key: str) -> npt.NDArray[Any]:
        """The rows so far of one field (a view; stale after the next growth)."""
        return self.data[key][: self.size]

    def rows(self) -> dict[str, npt.NDArray[Any]]:
        """Views of every row so far, per field."""
        return {key: array[: self.size] for key, array in self.data.items()}


class TailEpisode(NamedTuple):
    """A finalized episode in the tail: where its rows are, its flags, its fields."""

    row_start: int
    rows: int
    terminated: bool
    truncated: bool
    present: frozenset[str]


class Tail:
    """Finalized rows ``[base, base + len)`` per field, and the ongoing episodes."""

    def __init__(self, layouts: Mapping[str, FieldLayout], base: int) -> None:
        self.layouts = layouts
        self.base = base
        self.buffers = {
            key: Growable(layout.shape, layout.dtype, 64) for key, layout in layouts.items()
        }
        self.row_bytes = sum(layout.row_bytes for layout in layouts.values())
        self.episodes: dict[int, TailEpisode] = {}  # finalized, by id, in row order
        self.ongoing: dict[int, Ongoing] = {}

    def __len__(self) -> int:
        """Finalized rows held."""
        return len(next(iter(self.buffers.values()))) if self.buffers else 0

    @property
    def end(self) -> int:
        """The row the next finalized episode takes."""
        return self.base + len(self)

    @property
    def nbytes(self) -> int:
        """Bytes of finalized rows held (what a fold would write)."""
        return self.row_bytes * len(self)

    def add(
        self,
        episode: int,
        rows: Mapping[str, npt.NDArray[Any]],
        *,
        terminated: bool,
        truncated: bool,
        row_start: int | None = None,
    ) -> int:
        """Append a finalized episode's rows (absent fields get zeros); returns its first row."""
        start = self.end
        if row_start is not None and row_start != start:
            raise ValueError(f"episode {episode} logged at row {row_start}, expected {start}")
        count = len(next(iter(rows.values())))
        for key, grow in self.buffers.items():
            block = rows.get(key)
            if block is None:
                # absent optional fields take zero rows: every field shares one numbering
                block = np.zeros((count, *self.layouts[key].shape), self.layouts[key].dtype)
            grow.extend(block)
        self.episodes[episode] = TailEpisode(
            start, count, terminated, truncated, frozenset(rows.keys())
        )
        return start

    def holds(self, row_start: int) -> bool:
        """Whether a finalized episode starting at ``row_start`` lives in the tail."""
        return row_start >= self.base

    def window(self, key: str, start: int, stop: int) -> npt.NDArray[Any]:
        """Rows ``[start, stop)`` (absolute row numbers) of one field, read-only view."""
        view = self.buffers[key].view()[start - self.base : stop - self.base]
        view.flags.writeable = False
        return view

    def take(self, key: str, rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The rows at absolute row numbers ``rows`` of one field (a copy)."""
        return self.buffers[key].view()[rows - self.base]

    def rebase(self, base: int) -> None:
        """Forget the rows below ``base`` and their episodes: a fold put them in the arrays."""
        drop = base - self.base
        for key, grow in self.buffers.items():
            kept = grow.view()[drop:].copy()
            fresh = Growable(grow.data.shape[1:], grow.data.dtype, max(64, len(kept)))
            fresh.extend(kept)
            self.buffers[key] = fresh
        self.episodes = {e: p for e, p in self.episodes.items() if p.row_start >= base}
        self.base = base

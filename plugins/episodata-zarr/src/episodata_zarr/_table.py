"""The per-episode index in memory, and its rows in ``index/episodes``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from episodata_core.authoring import Growable
from episodata_core.errors import EpisodataError
from episodata_core.protocols import EpisodeTable

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from episodata_zarr._layout import IndexLayout

__all__ = ["EpisodeIndex", "entry_hash"]

_MASK64 = (1 << 64) - 1


def _multipliers(width: int) -> npt.NDArray[np.uint64]:
    # odd multipliers are invertible modulo 2**64, so changing any one column by any
    # amount always changes the hash
    return np.array(
        [(((i + 1) * 0x9E3779B97F4A7C15) & _MASK64) | 1 for i in range(width)], dtype=np.uint64
    )


def entry_hash(columns: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``[n]`` checksum of ``[n, k]`` index columns: a wrapping weighted sum, vectorized."""
    weights = _multipliers(columns.shape[1])
    mixed = (columns.view(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    hashed: npt.NDArray[np.int64] = mixed.view(np.int64)
    return hashed


class EpisodeIndex:
    """Lengths, flags, presence and checksums of every episode, by episode id."""

    def __init__(self, layout: IndexLayout) -> None:
        self.layout = layout
        self.row_start = Growable((), np.dtype(np.int64))
        self.length = Growable((), np.dtype(np.int64))
        self.terminated = Growable((), np.dtype(np.bool_))
        self.truncated = Growable((), np.dtype(np.bool_))
        self.ongoing = Growable((), np.dtype(np.bool_))
        self.present = Growable((len(layout.optional),), np.dtype(np.bool_))

    def __len__(self) -> int:
        return len(self.length)

    def table(self) -> EpisodeTable:
        """Views of the index, valid until the next change."""
        present = self.present.view()
        return EpisodeTable(
            length=self.length.view(),
            terminated=self.terminated.view(),
            truncated=self.truncated.view(),
            ongoing=self.ongoing.view(),
            present={key: present[:, i] for i, key in enumerate(self.layout.optional)},
        )

    def add_ongoing(self, present: Collection[str], rows: int) -> int:
        """Index a new ongoing episode; returns its id (one append per column: hot path)."""
        episode = len(self)
        self.row_start.append(-1)
        self.length.append(rows - 1)
        self.terminated.append(False)
        self.truncated.append(False)
        self.ongoing.append(True)
        self.present.append([key in present for key in self.layout.optional])
        return episode

    def set_finalized(
        self, episode: int, row_start: int, length: int, *, terminated: bool, truncated: bool
    ) -> None:
        """Mark an episode (already indexed) finalized at ``row_start`` (hot path)."""
        self.row_start.data[episode] = row_start
        self.length.data[episode] = length
        self.terminated.data[episode] = terminated
        self.truncated.data[episode] = truncated
        self.ongoing.data[episode] = False

    def make_entries(
        self,
        row_start: Sequence[int],
        length: Sequence[int],
        terminated: Sequence[bool],
        truncated: Sequence[bool],
        ongoing: Sequence[bool],
        present: Sequence[Collection[str]],
        crc32: Sequence[Mapping[str, int]] | None = None,
    ) -> npt.NDArray[np.int64]:
        """``[n, columns]`` index rows, entry hash included."""
        count = len(row_start)
        optional, fields = self.layout.optional, self.layout.fields
        entries = np.zeros((count, len(self.layout.columns)), dtype=np.int64)
        entries[:, 0] = row_start
        entries[:, 1] = length
        entries[:, 2] = terminated
        entries[:, 3] = truncated
        entries[:, 4] = ongoing
        if optional:
            entries[:, 5 : 5 + len(optional)] = [[key in p for key in optional] for p in present]
        if crc32 is not None and count:
            entries[:, 5 + len(optional) : -1] = [[c.get(key, 0) for key in fields] for c in crc32]
        entries[:, -1] = entry_hash(entries[:, :-1])
        return entries

    def ongoing_entries(self, episodes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The stored form of ongoing episodes' entries (their checksum columns are 0).

        The CRC-32 columns of finalized episodes live on disk only: ``verify`` reads them,
        nothing else needs them, and a million episodes would hold them in memory for
        nothing.
        """
        assert self.ongoing.view()[episodes].all()
        entries = np.zeros((len(episodes), len(self.layout.columns)), dtype=np.int64)
        n_opt = len(self.layout.optional)
        entries[:, 0] = self.row_start.view()[episodes]
        entries[:, 1] = self.length.view()[episodes]
        entries[:, 2] = self.terminated.view()[episodes]
        entries[:, 3] = self.truncated.view()[episodes]
        entries[:, 4] = self.ongoing.view()[episodes]
        entries[:, 5 : 5 + n_opt] = self.present.view()[episodes]
        entries[:, -1] = entry_hash(entries[:, :-1])
        return entries

    def store(self, first: int, entries: npt.NDArray[np.int64]) -> None:
        """Replace the entries of episodes ``first, first + 1, ...`` (appending new ids)."""
        end = first + len(entries)
        if end > len(self):
            self._append(np.zeros((end - len(self), entries.shape[1]), dtype=np.int64))
        n_opt = len(self.layout.optional)
        rows = slice(first, end)
        self.row_start.data[rows] = entries[:, 0]
        self.length.data[rows] = entries[:, 1]
        self.terminated.data[rows] = entries[:, 2] != 0
        self.truncated.data[rows] = entries[:, 3] != 0
        self.ongoing.data[rows] = entries[:, 4] != 0
        self.present.data[rows] = entries[:, 5 : 5 + n_opt] != 0

    def _append(self, entries: npt.NDArray[np.int64]) -> None:
        n_opt = len(self.layout.optional)
        self.row_start.extend(entries[:, 0])
        self.length.extend(entries[:, 1])
        self.terminated.extend(entries[:, 2] != 0)
        self.truncated.extend(entries[:, 3] != 0)
        self.ongoing.extend(entries[:, 4] != 0)
        self.present.extend(entries[:, 5 : 5 + n_opt] != 0)

    def truncate(self, size: int) -> None:
        """Forget episodes from id ``size`` on."""
        for grow in (self.row_start, self.length, self.terminated, self.truncated):
            grow.truncate(size)
        for grow in (self.ongoing, self.present):
            grow.truncate(size)


def check_entries(
    entries: npt.NDArray[np.int64],
    first: int,
    *,
    rows: int,
    ongoing: Collection[int],
    where: str,
) -> None:
    """Refuse damaged or impossible index rows before anything relies on them.

    Finalized entries must stay inside the ``rows`` committed data rows; an ongoing
    entry may be a torn write ahead of the commit record, which overrides it.
    """
    expected = entry_hash(entries[:, :-1])
    bad = np.flatnonzero(expected != entries[:, -1])
    if len(bad):
        ids = (bad[:8] + first).tolist()
        raise EpisodataError(
            f"{where}: the index entries of episodes {ids} do not match their checksums; the "
            "index is damaged (run `episodata verify` for a full report)"
        )
    ids = np.arange(first, first + len(entries))
    finalized = ~np.isin(ids, np.fromiter(ongoing, dtype=np.int64, count=len(ongoing)))
    start, length = entries[finalized, 0], entries[finalized, 1]
    flags = entries[finalized, 2:5]
    impossible = (start < 0) | (length < 0) | (start + length + 1 > rows) | (flags[:, 2] != 0)
    impossible |= ((flags != 0) & (flags != 1)).any(axis=1)
    if impossible.any():
        episode = int(ids[finalized][np.flatnonzero(impossible)[0]])
        raise EpisodataError(
            f"{where}: the index entry of episode {episode} points outside the {rows} committed "
            "rows or has invalid flags; the index is damaged"
        )

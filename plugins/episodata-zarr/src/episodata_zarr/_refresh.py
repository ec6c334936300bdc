"""Moving a store's memory to a commit record: its index entries, the log, ``refresh()``.

A reader pins one commit record; ``refresh()`` adopts a newer one (arrays, index, what
left the tail) and, on local disk, a new snapshot of the log. The commit record is read
before and after the log's snapshot: equal, the snapshot was taken after that fold and
before any next one, so together they name every episode exactly once; a fold in
between (which may have taken episodes out of the log) means another round.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_zarr._adopt import adopt
from episodata_zarr._layout import INDEX_PATH
from episodata_zarr._reads import result
from episodata_zarr._table import check_entries

if TYPE_CHECKING:
    from episodata_zarr._commit import CommitRecord
    from episodata_zarr._impl import ZarrStore

__all__ = ["adopt_record", "adopt_snapshot", "load_index", "refresh"]


def load_index(store: ZarrStore, record: CommitRecord, first: int = 0) -> None:
    """Read ``record``'s index entries from episode ``first`` on; adopt ``record``."""
    arrays = store.arrays
    for key, handle in arrays.data.items():
        if handle.shape[0] < record.rows:
            raise EpisodataError(
                f"{store.layouts[key].path}: holds {handle.shape[0]} rows but commit.json "
                f"commits {record.rows}; the dataset is damaged"
            )
    if arrays.index.shape[0] < record.episodes:
        raise EpisodataError(
            f"{INDEX_PATH}: holds {arrays.index.shape[0]} episodes but commit.json "
            f"commits {record.episodes}; the dataset is damaged"
        )
    entries = result(
        arrays.index[first : record.episodes].read(), f"cannot read {INDEX_PATH}"
    ).astype(np.int64, copy=False)
    # an entry past the committed rows is a later fold's (it rewrote the entry of an
    # episode that was in the log as of this record): the log still has it, or a
    # newer record will say so; its hash is checked all the same
    ahead = (entries[:, 4] == 0) & (entries[:, 0] + entries[:, 1] + 1 > record.rows)
    unfolded = (np.flatnonzero((entries[:, 4] == 1) | ahead) + first).tolist()
    check_entries(entries, first, rows=record.rows, ongoing=unfolded, where=INDEX_PATH)
    store.torn_entries = (np.flatnonzero(ahead) + first).tolist()
    if ahead.any():
        entries = entries.copy()
        entries[ahead, 0], entries[ahead, 2:5] = -1, (0, 0, 1)
    store.index.truncate(first)
    store.index.store(first, entries)
    store.record = record


def refresh(store: ZarrStore) -> None:
    """Adopt the newest commit and log: new and changed episodes become visible."""
    store.check()
    if os.getpid() != store.pid:
        raise DatasetStateError(
            "refresh() is not available in a fork()ed child: it reads the snapshot it "
            "inherited; refresh in the parent before starting workers"
        )
    if store.writable:
        return  # the one writer's memory is always the newest state
    record = store.read_record()
    if record.generation != store.record.generation:
        adopt_record(store, record)
    elif store.remote is not None or not store.log.changed():
        return
    if store.remote is None:  # on object storage the log is the writer's, local to it
        adopt_snapshot(store)


def adopt_record(store: ZarrStore, record: CommitRecord) -> None:
    """A reader moves to a newer commit record: arrays, index, what left the tail."""
    old = store.record
    store.arrays.open()
    # entries from the first that may have changed: new ids, or unfolded ones
    unfolded = np.flatnonzero(store.index.ongoing.view()[: old.episodes]).tolist()
    load_index(store, record, min([old.episodes, *unfolded]))
    store.tail.rebase(record.rows)
    for episode in [e for e in store.tail.ongoing if e < record.episodes]:
        if not store.index.ongoing.data[episode]:
            del store.tail.ongoing[episode]  # finalized and folded since


def adopt_snapshot(store: ZarrStore) -> list[int]:
    """Take the log beyond the arrays into index and tail; a reader retries around folds.

    Returns the ids of stale entries (see :func:`episodata_zarr._adopt.adopt`).
    """
    while True:
        try:
            stale = adopt(
                store.log, store.record, store.index, store.tail, store.layouts, store.folder
            )
        except EpisodataError:
            if store.writable or store.read_record().generation == store.record.generation:
                raise
        else:
            if store.writable or store.read_record().generation == store.record.generation:
                return stale
        adopt_record(store, store.read_record())

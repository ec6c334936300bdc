"""A reader's (or a recovering writer's) view of the episode log: index and tail updates.

:func:`adopt` turns one snapshot of the log into index entries and tail rows, beyond
what the arrays hold as of a commit record. Everything is checked before anything
changes (contiguous ids, whole episodes, contiguous rows, every episode the arrays'
index sends to the log present), so a reader that meets a fold halfway simply tries
again with the newer record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import EpisodataError
from episodata_zarr._tail import Ongoing

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    import numpy.typing as npt

    from episodata_zarr._commit import CommitRecord
    from episodata_zarr._layout import FieldLayout
    from episodata_zarr._log import EpisodeLog, LogEntry
    from episodata_zarr._table import EpisodeIndex
    from episodata_zarr._tail import Tail

__all__ = ["adopt"]


def adopt(
    log: EpisodeLog,
    record: CommitRecord,
    index: EpisodeIndex,
    tail: Tail,
    layouts: Mapping[str, FieldLayout],
    folder: Path,
) -> list[int]:
    """Take what the log holds beyond the arrays into the index and the tail.

    Everything is checked before anything changes, so a refresh that meets a fold
    halfway can simply try again. Returns the ids of stale entries: episodes a fold
    put into the arrays whose log entries a crash kept (the writer removes them).
    """
    finalized_in_arrays = ~index.ongoing.view()[: record.episodes].copy()

    def folded(entry: LogEntry) -> bool:
        return entry.id < record.episodes and bool(finalized_in_arrays[entry.id])

    def need(entry: LogEntry) -> int | None:
        if folded(entry) or entry.id in tail.episodes:
            return None
        state = tail.ongoing.get(entry.id)
        return 0 if state is None or not entry.ongoing else len(state)

    entries = log.read(need)
    stale = [entry.id for entry in entries if folded(entry)]
    live = [entry for entry in entries if not folded(entry)]
    # -- check: contiguous ids, whole episodes, contiguous rows, nothing missing
    next_id = len(index)
    new_rows: dict[int, dict[str, npt.NDArray[Any]]] = {}
    for entry in live:
        if entry.id > next_id:
            raise EpisodataError(
                f"{log.path}: holds episode {entry.id} but no episode {next_id}; the log is damaged"
            )
        next_id = max(next_id, entry.id + 1)
        if entry.ongoing or entry.id not in tail.episodes:
            new_rows[entry.id] = _joined(log, layouts, entry, tail.ongoing.get(entry.id))
    finals = sorted(
        (e for e in live if not e.ongoing and e.id not in tail.episodes),
        key=lambda entry: entry.row_start,
    )
    row = tail.end
    for entry in finals:
        if entry.row_start != row:
            raise EpisodataError(
                f"{log.path}: episode {entry.id} is logged at row {entry.row_start}, "
                f"but the rows before it end at {row}; the log is damaged"
            )
        row += entry.rows
    in_log = {entry.id for entry in live} | set(tail.episodes)
    sent = np.flatnonzero(index.ongoing.view()[: record.episodes] & ~finalized_in_arrays)
    missing = [e for e in sent.tolist() if e not in in_log and e not in tail.ongoing]
    if missing:
        raise EpisodataError(
            f"{folder}: episodes {missing[:8]} are marked as in the episode log, but "
            f"{log.path} does not hold them; the log is damaged or was removed"
        )
    # -- apply
    for entry in live:
        if entry.ongoing:
            state = tail.ongoing.get(entry.id)
            if state is None:
                state = tail.ongoing[entry.id] = Ongoing(new_rows[entry.id])
            else:
                state.append(entry.id, new_rows[entry.id])
            state.logged = len(state)
            matrix = index.make_entries(
                [-1], [entry.rows - 1], [False], [False], [True], [entry.fields]
            )
        else:
            tail.ongoing.pop(entry.id, None)  # its log entry holds every row
            matrix = _final_matrix(index, entry)
        index.store(entry.id, matrix)
    for entry in finals:
        tail.add(
            entry.id,
            new_rows[entry.id],
            terminated=entry.terminated,
            truncated=entry.truncated,
            row_start=entry.row_start,
        )
    return stale


def _final_matrix(index: EpisodeIndex, entry: LogEntry) -> npt.NDArray[np.int64]:
    return index.make_entries(
        [entry.row_start],
        [entry.rows - 1],
        [entry.terminated],
        [entry.truncated],
        [False],
        [entry.fields],
    )


def _joined(
    log: EpisodeLog, fields: Mapping[str, FieldLayout], entry: LogEntry, state: Ongoing | None
) -> dict[str, npt.NDArray[Any]]:
    """An entry's new blocks as rows per field, decoded; checks they are contiguous."""
    have = 0 if state is None or not entry.ongoing else len(state)
    layouts = []
    for key in entry.fields:
        layout = fields.get(key)
        if layout is None:
            raise EpisodataError(
                f"{log.path}: episode {entry.id} stores field {key!r}, which the "
                "schema does not have; the log is damaged"
            )
        layouts.append(layout)
    width = sum(layout.row_bytes for layout in layouts)  # bytes of one row, all fields
    parts: dict[str, list[npt.NDArray[Any]]] = {key: [] for key in entry.fields}
    expected = have
    for block in entry.blocks:
        if block.first > expected or len(block.data) != block.rows * width:
            raise EpisodataError(
                f"{log.path}: episode {entry.id} holds rows {block.first}-"
                f"{block.first + block.rows} where rows from {expected} on, "
                f"{width} bytes each, were expected; the log is damaged"
            )
        skip, offset = expected - block.first, 0
        for layout in layouts:
            size = block.rows * layout.row_bytes
            stored = np.frombuffer(
                block.data, layout.storage_dtype, size // layout.storage_dtype.itemsize, offset
            )
            stored = stored.reshape(block.rows, *layout.storage_shape)[skip:]
            parts[layout.key].append(layout.decode(stored))
            offset += size
        expected = block.first + block.rows
    if expected != entry.rows:
        raise EpisodataError(
            f"{log.path}: episode {entry.id} lists {entry.rows} rows but holds "
            f"{expected}; the log is damaged"
        )
    joined = {}
    for key, rows in parts.items():
        layout = fields[key]
        if not rows:  # nothing new since the caller's last look
            joined[key] = np.empty((0, *layout.shape), dtype=layout.dtype)
        else:
            joined[key] = np.concatenate(rows) if len(rows) > 1 else rows[0].copy()
    return joined

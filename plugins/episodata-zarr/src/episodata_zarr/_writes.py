"""The writer's path from memory to the log and the arrays: entries, commits, flushes.

Ongoing episodes live in memory (``_tail.Ongoing``) until a finalize or a ``flush()``
logs them; every log append is one SQLite commit, and memory follows only once it is
done. Ongoing episodes below a finalized one are logged with it as placeholders (at
least their reset row), so that episode ids stay contiguous after a crash.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

from episodata_zarr._fold import fold
from episodata_zarr._log import Block, LogEntry

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt

    from episodata_core.protocols import EpisodeRows
    from episodata_zarr._commit import CommitRecord
    from episodata_zarr._impl import ZarrStore

__all__ = ["DIRECT_FOLD_BYTES", "add_episodes", "flush", "log_finals", "run_fold"]

DIRECT_FOLD_BYTES = 4 << 20
"""Bulk batches from this size on skip the log: a fold costs ~4 ms however small, and
logging first writes every byte twice (log, then arrays); past a few MB the second
write costs more than the fold's fixed part, and bulk imports keep their throughput."""


def add_episodes(store: ZarrStore, episodes: Sequence[EpisodeRows]) -> list[int]:
    """Finalized episodes in one commit: all of them (or none) after a crash.

    Batches of at least ``DIRECT_FOLD_BYTES`` (or ``fold_bytes``) go straight into
    the arrays with the tail (one fold), smaller ones into the log.
    """
    store.check(write=True)
    first = len(store.index)
    finals = [(first + i, e.rows, e.terminated, e.truncated) for i, e in enumerate(episodes)]
    written = sum(block.nbytes for e in episodes for block in e.rows.values())
    if written >= min(store.options.fold_bytes, DIRECT_FOLD_BYTES):
        _log_placeholders(store, first + len(finals))
        store.record = run_fold(store, finals)
    else:
        log_finals(store, finals, {})
    if written * 16 >= store.options.cache_pool_bytes > 0:
        # the written chunks now fill TensorStore's cache, where bulk writes are seldom
        # read back soon: a fresh cache gives that memory back at once (an import's
        # RSS stays bounded by its read budget). Reopening costs a few milliseconds,
        # so smaller calls keep the cache
        store.arrays.fresh_cache()
    return [episode for episode, *_ in finals]


def log_finals(
    store: ZarrStore,
    finals: Sequence[tuple[int, Mapping[str, npt.NDArray[Any]], bool, bool]],
    logged: Mapping[int, int],
) -> None:
    """Log finalized episodes (their rows from ``logged[id]`` on) in one commit."""
    if not finals:
        return
    tail, index = store.tail, store.index
    start = tail.end
    entries = _placeholders(store, max(e for e, *_ in finals))
    for episode, rows, terminated, truncated in finals:
        count = len(next(iter(rows.values())))
        entries.append(
            _entry(store, episode, rows, logged.get(episode, 0), start, terminated, truncated)
        )
        start += count
    store.log.append(entries)  # the commit: memory follows only once it is done
    for entry in entries:
        state = tail.ongoing.get(entry.id)
        if entry.ongoing and state is not None:
            state.logged = entry.rows
    for episode, rows, terminated, truncated in finals:
        if tail.ongoing.pop(episode, None) is None:
            index.add_ongoing(rows.keys(), 1)  # a new id, finalized below
        row_start = tail.add(episode, rows, terminated=terminated, truncated=truncated)
        count = len(next(iter(rows.values())))
        index.set_finalized(
            episode, row_start, count - 1, terminated=terminated, truncated=truncated
        )
    if tail.nbytes >= store.options.fold_bytes:
        store.record = run_fold(store)


def flush(store: ZarrStore) -> None:
    """A sync point: log ongoing episodes' new rows, fold the tail, sync the log."""
    if not store.writable:
        return
    store.check()
    entries = [
        _entry(store, e, state.rows(), state.logged, -1, False, False, ongoing=True)
        for e, state in sorted(store.tail.ongoing.items())
        if len(state) > state.logged
    ]
    if entries:
        store.log.append(entries)
        for entry in entries:
            store.tail.ongoing[entry.id].logged = entry.rows
    store.record = run_fold(store)
    store.log.sync()


def run_fold(store: ZarrStore, extra: Sequence[Any] = ()) -> CommitRecord:
    """Fold the tail (and ``extra`` finalized episodes) into the arrays; the new record."""
    return fold(store.arrays, store.index, store.tail, store.log, store.guard, store.record, extra)


def _entry(
    store: ZarrStore,
    episode: int,
    rows: Mapping[str, npt.NDArray[Any]],
    first: int,
    row_start: int,
    terminated: bool,
    truncated: bool,
    *,
    ongoing: bool = False,
) -> LogEntry:
    """The log entry of an episode with its rows from ``first`` on as new blocks."""
    count = len(next(iter(rows.values())))
    blocks = []
    if count > first:
        parts = [
            store.layouts[key].encode(values[first:]).data.cast("B") for key, values in rows.items()
        ]
        data = b"".join(parts)
        blocks.append(Block(first, count - first, data, zlib.crc32(data)))
    return LogEntry(
        episode,
        -1 if ongoing else row_start,
        count,
        terminated,
        truncated,
        ongoing,
        tuple(rows),
        blocks,
    )


def _placeholders(store: ZarrStore, below: int) -> list[LogEntry]:
    """Entries of ongoing episodes below ``below`` that the log does not hold yet."""
    return [
        _entry(store, e, state.rows(), 0, -1, False, False, ongoing=True)
        for e, state in sorted(store.tail.ongoing.items())
        if e < below and not state.logged
    ]


def _log_placeholders(store: ZarrStore, below: int) -> None:
    entries = _placeholders(store, below)
    if entries:
        store.log.append(entries)
        for entry in entries:
            store.tail.ongoing[entry.id].logged = entry.rows

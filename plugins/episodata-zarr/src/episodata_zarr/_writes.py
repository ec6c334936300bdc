"""The writer's side: ongoing episodes in memory, and the commit protocol.

A commit writes, all at once and concurrently: the rows of finalized episodes to the
data arrays, the unflushed rows of ongoing episodes to their spill arrays, and the
changed index entries. When every write is on disk, ``commit.json`` is replaced; only
then does the in-memory state move on, so a failed commit changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import DatasetStateError
from episodata_core.location import inside, write_json_atomic
from episodata_zarr._commit import OngoingRecord, write_commit
from episodata_zarr._layout import GROUP_DOCUMENT, crc32, group_paths, spill_group
from episodata_zarr._reads import result
from episodata_zarr._table import Growable

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import numpy.typing as npt

    from episodata_core.protocols import Rows
    from episodata_zarr._impl import ZarrStore
    from episodata_zarr._layout import FieldLayout

__all__ = ["Final", "Ongoing", "commit", "trim"]

Final = tuple[int, "Rows", bool, bool]
"""A finalized episode to commit: ``(episode id, rows, terminated, truncated)``."""

_Target = tuple[int, str] | str  # a spill (episode, field), a field, or "" for the index
_RUN_BYTES = 8 << 20  # rows of adjacent episodes joined into one write


class Ongoing:
    """An ongoing episode in the writer: all its rows in memory; ``durable`` are flushed."""

    __slots__ = ("buffers", "crc32", "durable")

    def __init__(self, rows: Rows) -> None:
        self.buffers: dict[str, Growable] = {}
        for key, block in rows.items():
            grow = Growable(block.shape[1:], block.dtype, max(64, len(block)))
            grow.extend(block)
            self.buffers[key] = grow
        self.durable = 0
        self.crc32 = dict.fromkeys(rows, 0)

    def __len__(self) -> int:
        return len(next(iter(self.buffers.values())))

    def append(self, episode: int, rows: Rows) -> int:
        """Append rows; returns how many."""
        if rows.keys() != self.buffers.keys():
            raise DatasetStateError(
                f"episode {episode}: rows for {sorted(rows)} do not match the episode's "
                f"fields {sorted(self.buffers)}"
            )
        count = 0
        for key, block in rows.items():
            self.buffers[key].extend(block)
            count = len(block)
        return count


def commit(store: ZarrStore, finals: Sequence[Final], *, flush: bool = False) -> None:
    """Write finalized episodes (and, with ``flush``, every ongoing one), then commit.

    Every ongoing episode below the highest id this commit makes durable is spilled too
    (at least its reset row), so episode ids stay contiguous after a crash.
    """
    record, final_ids = store.record, {episode for episode, *_ in finals}
    top = max(final_ids, default=-1) + 1
    spills = sorted(
        e
        for e, s in store.ongoing.items()
        if e not in final_ids and ((flush and len(s) > s.durable) or (e < top and not s.durable))
    )
    if not finals and not spills:
        return
    episodes = max(record.episodes, top, max(spills, default=-1) + 1)
    rows = record.rows
    blocks: list[tuple[int, int, dict[str, npt.NDArray[Any]]]] = []
    entries: list[npt.NDArray[np.int64]] = []
    for _, data, terminated, truncated in finals:
        count = len(next(iter(data.values())))
        encoded = {key: store.layouts[key].encode(values) for key, values in data.items()}
        checksums = {key: crc32(values) for key, values in encoded.items()}
        blocks.append((rows, count, encoded))
        entries.append(
            store.index.make_entries(
                [rows], [count - 1], [terminated], [truncated], [False], [data.keys()], [checksums]
            )
        )
        rows += count
    if spills:
        entries.append(store.index.ongoing_entries(np.array(spills, dtype=np.int64)))
    if blocks:  # writes never follow a link out of the folder either (an appended stranger)
        lo = np.array([start for start, _, _ in blocks], dtype=np.int64)
        hi = lo + np.array([count for _, count, _ in blocks], dtype=np.int64)
        for key, handle in store.data.items():
            store.checked.check_ranges(store.layouts[key].path, handle, lo, hi)
    spill_crc = {e: _spill_crc(store, e) for e in spills}
    ids = [episode for episode, *_ in finals] + spills
    # before anything is written: the writes merge into chunks that hold committed rows
    store.guard.check(
        store, rows=rows, entries=ids, spills=[(e, len(store.ongoing[e])) for e in spills]
    )
    _grow(store, rows, episodes, spills)
    futures = _write_blocks(store, blocks)
    futures += [f for e in spills for f in _write_spill(store, e)]
    futures += _write_entries(store, ids, np.concatenate(entries))
    for future in futures:
        result(future, f"cannot write to {str(store.folder)!r}")
    ongoing = {
        e: OngoingRecord(rows=s.durable, crc32=s.crc32)
        for e, s in store.ongoing.items()
        if s.durable and e not in final_ids
    }
    ongoing.update(
        {e: OngoingRecord(rows=len(store.ongoing[e]), crc32=spill_crc[e]) for e in spills}
    )
    new = record.model_copy(
        update={
            "generation": record.generation + 1,
            "episodes": episodes,
            "rows": rows,
            "ongoing": ongoing,
        }
    )
    write_commit(store.folder, new, durable=store.options.fsync)
    # durable now: the in-memory state may follow, and spills that no commit names go
    store.record = new
    for i, (episode, *_) in enumerate(finals):
        store.index.store(episode, entries[i])
        state = store.ongoing.pop(episode, None)
        if state is not None and state.durable:
            store.drop_spill(episode)
    for episode in spills:
        state = store.ongoing[episode]
        state.durable, state.crc32 = len(state), spill_crc[episode]
    store.guard.remember(store)


def _spill_crc(store: ZarrStore, episode: int) -> dict[str, int]:
    state = store.ongoing[episode]
    return {
        key: crc32(store.layouts[key].encode(grow.view()[state.durable :]), state.crc32[key])
        for key, grow in state.buffers.items()
    }


def _capacity(current: int, needed: int, minimum: int) -> int:
    # geometric growth: most commits fit without rewriting any zarr.json
    return max(needed, 2 * current, minimum)


def _grow(store: ZarrStore, rows: int, episodes: int, spills: Iterable[int]) -> None:
    """Resize arrays (metadata only) and create spill arrays so that the writes fit."""
    pending: list[tuple[_Target, Any]] = []
    for key, handle in store.data.items():
        if handle.shape[0] < rows:
            size = _capacity(handle.shape[0], rows, store.chunk_rows(handle))
            pending.append((key, _resize(handle, size, grow=True)))
    index = store.index_store
    if index.shape[0] < episodes:
        pending.append(("", _resize(index, _capacity(index.shape[0], episodes, 1024), grow=True)))
    for episode in spills:
        pending += _grow_spill(store, episode)
    for target, future in pending:
        handle = result(future, f"cannot resize arrays in {str(store.folder)!r}")
        if isinstance(target, tuple):
            store.spills[target] = handle
        elif target:
            store.data[target] = handle
        else:
            store.index_store = handle


def _grow_spill(store: ZarrStore, episode: int) -> list[tuple[_Target, Any]]:
    state = store.ongoing[episode]
    count = len(state)
    if state.durable:
        # spill arrays keep exact shapes: they are small and short-lived
        return [
            ((episode, key), _resize(store.spill_store(episode, key), count, grow=True))
            for key in state.buffers
        ]
    paths = [store.layouts[key].spill_path(episode) for key in state.buffers]
    for group in group_paths(paths, within=spill_group(episode)):
        folder = inside(store.folder, group)
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / "zarr.json", GROUP_DOCUMENT, durable=store.options.fsync)
    pending: list[tuple[_Target, Any]] = []
    for key, path in zip(state.buffers, paths, strict=True):
        # the data array's own metadata: same chunks and codecs, and the same checksum
        document = {**store.documents[key]}
        document["shape"] = [count, *document["shape"][1:]]
        pending.append(((episode, key), store.create_spill(path, document)))
    return pending


def _resize(handle: Any, rows: int, *, grow: bool) -> Any:
    """A future of ``handle`` resized to ``rows`` rows along the first axis."""
    bounds = [rows, *[None] * (handle.rank - 1)]
    if grow:
        # only zarr.json changes; chunks beyond the commit are overwritten later
        return handle.resize(exclusive_max=bounds, resize_metadata_only=True, expand_only=True)
    return handle.resize(exclusive_max=bounds, shrink_only=True)


def _write_blocks(
    store: ZarrStore, blocks: Sequence[tuple[int, int, dict[str, npt.NDArray[Any]]]]
) -> list[Any]:
    """Write the ``(start, count, encoded)`` blocks of consecutive rows of finalized episodes.

    Several blocks go through one TensorStore transaction: without it, writes that are
    in flight together and share a chunk each rewrite that chunk, so a commit of many
    short episodes would encode and store every chunk many times. Adjacent blocks are
    joined into writes of about ``_RUN_BYTES`` each: a write costs tens of microseconds
    however small, and short episodes are many.
    """
    if len(blocks) <= 1:
        return [
            store.data[key][start : start + count].write(_rows_of(layout, key, count, encoded))
            for start, count, encoded in blocks
            for key, layout in store.layouts.items()
        ]
    import tensorstore as ts

    transaction = ts.Transaction()
    for key, layout in store.layouts.items():
        handle = store.data[key].with_transaction(transaction)
        run: list[npt.NDArray[Any]] = []
        first = rows = size = 0
        for index, (start, count, encoded) in enumerate(blocks):
            if not run:
                first = start
            run.append(_rows_of(layout, key, count, encoded))
            rows, size = rows + count, size + run[-1].nbytes
            if size >= _RUN_BYTES or index == len(blocks) - 1:
                joined = run[0] if len(run) == 1 else np.concatenate(run)
                # waited for at once: the joined copy is freed before the next is made
                future = handle[first : first + rows].write(joined)
                result(future, f"cannot write to {str(store.folder)!r}")
                run, rows, size = [], 0, 0
    return [transaction.commit_async()]


def _rows_of(
    layout: FieldLayout, key: str, count: int, encoded: dict[str, npt.NDArray[Any]]
) -> npt.NDArray[Any]:
    block = encoded.get(key)
    if block is None:
        # absent optional fields take zero rows: every field shares one row numbering
        block = np.zeros((count, *layout.storage_shape), dtype=layout.storage_dtype)
    return block


def _write_spill(store: ZarrStore, episode: int) -> list[Any]:
    state = store.ongoing[episode]
    count = len(state)
    return [
        store.spill_store(episode, key)[state.durable : count].write(
            store.layouts[key].encode(grow.view()[state.durable :])
        )
        for key, grow in state.buffers.items()
    ]


def _write_entries(store: ZarrStore, ids: list[int], matrix: npt.NDArray[np.int64]) -> list[Any]:
    order = np.argsort(ids)
    ids_sorted, matrix = np.asarray(ids, dtype=np.int64)[order], matrix[order]
    # one write per run of consecutive ids: usually a single run, the newest episode
    breaks = np.flatnonzero(np.diff(ids_sorted) != 1) + 1
    futures = []
    for run in np.split(np.arange(len(ids_sorted)), breaks):
        first = int(ids_sorted[run[0]])
        futures.append(store.index_store[first : first + len(run)].write(matrix[run]))
    return futures


def trim(store: ZarrStore) -> None:
    """Shrink arrays to the committed rows, so zarr-python sees exact shapes."""
    record = store.record
    targets = [(handle, record.rows) for handle in store.data.values()]
    targets.append((store.index_store, record.episodes))
    targets += [
        (store.spill_store(e, key), ongoing.rows)
        for e, ongoing in record.ongoing.items()
        for key in store.present_keys(e)
    ]
    futures = [
        _resize(handle, rows, grow=False) for handle, rows in targets if handle.shape[0] > rows
    ]
    for future in futures:
        result(future, f"cannot trim the arrays of {str(store.folder)!r}")

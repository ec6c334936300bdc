"""Folding: the tail's finalized episodes move from the log into the arrays, in one batch.

A fold is the storage engine's only commit of the arrays, expressed as key-value
operations so that object storage can run it too:

1. sync the log (the commit record may name ongoing episodes that only the log holds);
2. write the new chunks and index entries, synced (TensorStore writes each key to a new
   file and renames it over the old one: committed bytes are never changed in place);
3. publish the commit record ``commit.json`` (atomically replaced, synced): from now on
   readers find the episodes in the arrays;
4. remove the folded episodes from the log. A crash before 3 leaves them in the log
   (the array rows beyond the record are ignored and overwritten); a crash between 3
   and 4 leaves stale log entries, which readers skip (the record says they are folded)
   and the next writer removes.

Bulk writes (``add_episodes`` of at least ``fold_bytes``) skip the log: they are folded
at once, with the tail, as ``extra`` episodes.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_zarr._commit import write_commit
from episodata_zarr._layout import FORMAT_VERSION

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt

    from episodata_zarr._arrays import Arrays, Block
    from episodata_zarr._commit import CommitRecord
    from episodata_zarr._disk import ChunkGuard
    from episodata_zarr._log import EpisodeLog
    from episodata_zarr._table import EpisodeIndex
    from episodata_zarr._tail import Tail

__all__ = ["Final", "fold"]

Final = tuple[int, "Mapping[str, npt.NDArray[Any]]", bool, bool]
"""A finalized episode folded without the log: ``(id, rows, terminated, truncated)``."""


def fold(
    arrays: Arrays,
    index: EpisodeIndex,
    tail: Tail,
    log: EpisodeLog,
    guard: ChunkGuard,
    record: CommitRecord,
    extra: Sequence[Final] = (),
) -> CommitRecord:
    """Fold the tail (and ``extra``) into the arrays; returns the new commit record.

    Nothing in memory changes unless the commit record was written.
    """
    logged = sorted(tail.episodes.items(), key=lambda item: item[1].row_start)
    if not logged and not extra:
        return record
    layouts = arrays.layouts
    blocks: list[Block] = []
    ids: list[int] = []
    entries: list[npt.NDArray[np.int64]] = []
    if logged:
        stored = {key: layouts[key].encode(grow.view()) for key, grow in tail.buffers.items()}
        blocks.append((tail.base, len(tail), stored))
        checksums: list[dict[str, int]] = []
        for _, placed in logged:
            lo, hi = placed.row_start - tail.base, placed.row_start - tail.base + placed.rows
            checksums.append({key: zlib.crc32(stored[key][lo:hi].data) for key in placed.present})
        placements = [placed for _, placed in logged]
        ids += [episode for episode, _ in logged]
        entries.append(
            index.make_entries(
                [p.row_start for p in placements],
                [p.rows - 1 for p in placements],
                [p.terminated for p in placements],
                [p.truncated for p in placements],
                [False] * len(placements),
                [p.present for p in placements],
                checksums,
            )
        )
    rows = tail.end
    extra_entries = []
    for episode, data, terminated, truncated in extra:
        count = len(next(iter(data.values())))
        encoded = {key: layouts[key].encode(values) for key, values in data.items()}
        crc = {key: zlib.crc32(block.data) for key, block in encoded.items()}
        blocks.append((rows, count, encoded))
        entry = index.make_entries(
            [rows], [count - 1], [terminated], [truncated], [False], [data.keys()], [crc]
        )
        ids.append(episode)
        entries.append(entry)
        extra_entries.append((episode, entry))
        rows += count
    episodes = max(record.episodes, max(ids) + 1)
    # ongoing episodes below the new count get entries that send readers to the log
    ongoing = np.array(
        sorted(e for e in tail.ongoing if record.episodes <= e < episodes), dtype=np.int64
    )
    if len(ongoing):
        ids += ongoing.tolist()
        entries.append(index.ongoing_entries(ongoing))
    firsts = np.array([start for start, _, _ in blocks], dtype=np.int64)
    ends = firsts + np.array([count for _, count, _ in blocks], dtype=np.int64)
    for key, handle in arrays.data.items():
        # writes never follow a link out of the folder either (an appended stranger)
        arrays.checked.check_ranges(layouts[key].path, handle, firsts, ends)
    if arrays.remote is None:
        # before anything is written: the writes merge into chunks that hold committed rows
        guard.check(arrays, record, rows=rows, entries=ids)
    arrays.check_writer()
    log.sync()
    arrays.grow(rows, episodes)
    arrays.write(blocks, ids, np.concatenate(entries))
    new = record.model_copy(
        update={
            "format_version": FORMAT_VERSION,
            "generation": record.generation + 1,
            "episodes": episodes,
            "rows": rows,
        }
    )
    if arrays.remote is None:
        write_commit(arrays.folder, new, durable=arrays.options.fsync)
    else:
        arrays.publish(new)  # a new generation-numbered object, conditionally
    # committed: memory follows, and the log forgets what the arrays now hold
    if arrays.remote is None:
        guard.remember(arrays, new, ongoing=sorted(tail.ongoing))
    for episode, entry in extra_entries:
        index.store(episode, entry)
    folded = [episode for episode, _ in logged]
    tail.rebase(rows)
    log.forget(folded)
    return new

"""The bytes on disk, not TensorStore's cache: dead writers' leftovers, chunks a commit rewrites.

TensorStore's file kvstore writes a key by filling a temporary file next to it and renaming
that over the key. In its default locking mode the temporary is ``<key>.__lock``, which
a killed writer leaves behind and the next writer reuses *without truncating it*: the key
then holds the new bytes plus a stale tail, and every episode in that chunk is lost. Our
contexts turn TensorStore's locking off (``ZarrStore.new_context``: one writer holds our
own lock), so the temporary becomes ``<key>_<random hex>.__lock``, never reused; and a
writable open removes the ``*.__lock`` files a dead writer left (storage-engine.md,
promise 4: nothing a dead writer left is trusted).

A write into a chunk that holds committed rows makes TensorStore read that chunk, merge
the new rows in and write it back. A chunk that is missing reads as fill values there,
so the committed rows would become zeros inside a valid chunk: :class:`ChunkGuard`
checks every such chunk before a commit writes anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from episodata_core.errors import EpisodataError, IntegrityError
from episodata_zarr._layout import INDEX_PATH
from episodata_zarr._reads import result

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from episodata_zarr._arrays import Arrays
    from episodata_zarr._commit import CommitRecord

__all__ = ["ChunkGuard", "chunk_file", "open_uncached", "remove_leftovers"]

LOCK_SUFFIX = ".__lock"
"""Suffix of TensorStore's temporaries: ``<key>.__lock`` and ``<key>_<hex>.__lock``."""


def remove_leftovers(arrays: Arrays, record: CommitRecord, ongoing: Iterable[int]) -> int:
    """Remove TensorStore's temporaries wherever a dead writer can have left them.

    A fold writes array metadata, the chunks of each data array from the one that holds
    the last committed row up to the array's shape (it grows the metadata before writing
    rows), and the index chunks of new and ongoing entries. Older chunks are never
    written again: a leftover there would never be used, and looking costs ~70 us per
    chunk folder (seconds for a large dataset). Only a writable open calls this, before
    it trims the arrays, under the writer lock (so no live writer owns one). Returns how
    many files it removed.
    """
    places = [
        (layout.path, arrays.data[key], record.rows) for key, layout in arrays.layouts.items()
    ]
    places.append((INDEX_PATH, arrays.index, min([record.episodes, *ongoing])))
    removed = 0
    for path, handle, first in places:
        folder = arrays.folder / path
        removed += _remove_under(folder, depth=0)  # zarr.json's
        width = int(handle.chunk_layout.write_chunk.shape[0])
        if handle.rank == 1:  # chunks are files in c/, their temporaries too
            removed += _remove_under(folder / "c", depth=0)
            continue
        for chunk in range(first // width, -(-int(handle.shape[0]) // width)):
            removed += _remove_under(folder / "c" / str(chunk))
    return removed


def _remove_under(folder: Path, depth: int | None = None) -> int:
    """Remove the ``*.__lock`` files in ``folder`` (and ``depth`` levels below; None: all)."""
    removed = 0
    # os.walk does not follow symlinks: nothing outside the dataset is touched
    for root, dirs, files in os.walk(folder):
        for name in files:
            if name.endswith(LOCK_SUFFIX):
                os.unlink(os.path.join(root, name))
                removed += 1
        if depth is not None and root.count(os.sep) - str(folder).count(os.sep) >= depth:
            dirs.clear()
    return removed


def open_uncached(arrays: Arrays, paths: Iterable[str]) -> dict[str, Any]:
    """Fresh handles of the arrays at ``paths`` whose reads go to the disk, or errors.

    They share a context without a cache pool, so nothing the writer cached answers for
    the files. A path that cannot be opened maps to the :class:`EpisodataError` saying why.
    """
    if arrays.files:
        return arrays.open_uncached_files(paths)
    import tensorstore as ts

    remote = {} if arrays.remote is None else arrays.remote.context_spec()
    context = ts.Context({**remote, "cache_pool": {"total_bytes_limit": 0}})
    futures = {path: ts.open(arrays.spec(path), context=context) for path in paths}
    handles: dict[str, Any] = {}
    for path, future in futures.items():
        try:
            handles[path] = result(future, f"cannot open {arrays.folder / path}")
        except EpisodataError as err:
            handles[path] = err
    return handles


def chunk_file(folder: Path | str, path: str, handle: Any, row: int) -> str:
    """The file holding ``row`` of the array at ``path``: its chunk, or its shard if sharded."""
    rows = int(handle.chunk_layout.write_chunk.shape[0])
    return _chunk_name(folder, path, row // rows, int(handle.rank))


def _chunk_name(folder: Path | str, path: str, chunk: int, rank: int) -> str:
    # default chunk key encoding: c/<row chunk>/0/... (every other axis has one chunk)
    return f"{folder}/{path}/c/{chunk}" + "/0" * (rank - 1)


@dataclass(frozen=True)
class _Write:
    """Rows ``[start, stop)`` of the array at ``path`` that a commit writes."""

    what: str  # for messages: "field 'observation/state'"
    path: str
    width: int  # rows per chunk file (per shard if sharded)
    rank: int
    committed: int  # rows of the array that the commit record covers
    start: int
    stop: int

    def chunks(self) -> range:
        """The numbers of the chunks (shards if sharded) the write touches."""
        return range(self.start // self.width, (self.stop - 1) // self.width + 1)

    def committed_chunks(self) -> list[tuple[int, int, int]]:
        """``(chunk, lo, hi)`` of each touched chunk that holds committed rows ``[lo, hi)``."""
        width = self.width
        return [
            (c, c * width, min((c + 1) * width, self.committed))
            for c in self.chunks()
            if c * width < self.committed
        ]


def _signature(file: str) -> tuple[int, int, int] | None:
    try:
        status = os.stat(file)
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_size, status.st_mtime_ns


class ChunkGuard:
    """Refuses a commit that would rewrite a committed chunk that is missing or damaged.

    It remembers the file identity (inode, size, mtime) of each chunk that a next commit
    may rewrite, as this writer left it. A chunk found as it was left costs one ``stat``;
    any other (at the first commit after an open, or a file someone changed) is read
    from the disk and decoded, which the chunks' CRC-32C codec makes a check of every byte.
    """

    def __init__(self) -> None:
        self.known: dict[str, tuple[int, int, int]] = {}
        self.written: set[tuple[str, int]] = set()  # (array, chunk) the commit writes
        self.geometry: dict[str, tuple[int, int]] = {}  # field ("" index): rows per file, rank

    def _geometry(self, key: str, handle: Any) -> tuple[int, int]:
        # asking TensorStore for a chunk layout costs ~10 us: once per array
        found = self.geometry.get(key)
        if found is None:
            found = int(handle.chunk_layout.write_chunk.shape[0]), int(handle.rank)
            self.geometry[key] = found
        return found

    def _writes(
        self, arrays: Arrays, record: CommitRecord, rows: int, entries: Iterable[int]
    ) -> list[_Write]:
        """What a fold writes: data rows up to ``rows`` and the index ``entries``."""
        writes: list[_Write] = []
        if rows > record.rows:
            for key, layout in arrays.layouts.items():
                # every field gets rows, absent optional ones zeros
                shape = self._geometry(key, arrays.data[key])
                what = f"field {key!r}"
                writes.append(_Write(what, layout.path, *shape, record.rows, record.rows, rows))
        shape = self._geometry("", arrays.index)
        writes.extend(
            _Write("the index", INDEX_PATH, *shape, record.episodes, entry, entry + 1)
            for entry in sorted(set(entries))
        )
        return writes

    def check(
        self, arrays: Arrays, record: CommitRecord, *, rows: int, entries: Iterable[int]
    ) -> None:
        """Refuse (:class:`IntegrityError`) a fold that would rewrite a damaged chunk.

        Called before the fold writes anything. ``rows``: the data rows after it;
        ``entries``: the index entries it writes.
        """
        writes = self._writes(arrays, record, rows, entries)
        self.written = {(w.path, c) for w in writes for c in w.chunks()}
        unknown: list[tuple[_Write, int, int, str, tuple[int, int, int]]] = []
        for write in writes:
            for chunk, lo, hi in write.committed_chunks():
                file = _chunk_name(arrays.folder, write.path, chunk, write.rank)
                signature = _signature(file)
                if signature is None:
                    raise _refusal(arrays.folder, write, file, lo, hi, "is missing")
                if self.known.get(file) != signature:
                    unknown.append((write, lo, hi, file, signature))
        if not unknown:
            return
        handles = open_uncached(arrays, {write.path for write, *_ in unknown})
        reads = []
        for write, lo, hi, file, signature in unknown:
            handle = handles[write.path]
            if isinstance(handle, EpisodataError):
                raise _refusal(arrays.folder, write, file, lo, hi, "cannot be checked", handle)
            reads.append((write, lo, hi, file, signature, handle[lo:hi].read()))
        for write, lo, hi, file, signature, future in reads:
            try:
                result(future, "read")
            except EpisodataError as err:
                raise _refusal(arrays.folder, write, file, lo, hi, "is damaged", err) from err
            self.known[file] = signature

    def remember(self, arrays: Arrays, record: CommitRecord, *, ongoing: Iterable[int]) -> None:
        """After a fold: note the chunks a next fold may rewrite, as they are now.

        Trusted are those this fold wrote and those unchanged since they were checked.
        """
        nexts = self._writes(arrays, record, record.rows + 1, [record.episodes, *ongoing])
        known = {}  # only these: bounded, however many chunks were ever written
        for write in nexts:
            for chunk, _, _ in write.committed_chunks():
                file = _chunk_name(arrays.folder, write.path, chunk, write.rank)
                if (write.path, chunk) in self.written:
                    signature = _signature(file)
                    if signature is not None:
                        known[file] = signature
                elif file in self.known:
                    # unchanged by this fold; if someone changed it, check() sees that
                    known[file] = self.known[file]
        self.known, self.written = known, set()


def _refusal(
    folder: Path,
    write: _Write,
    file: str,
    lo: int,
    hi: int,
    problem: str,
    cause: EpisodataError | None = None,
) -> IntegrityError:
    # TensorStore would merge the new rows into the chunk as it reads it: a missing one
    # as zeros, a damaged one not at all, after the other fields were written
    return IntegrityError(
        f"{write.what}: chunk {file} holds the committed rows {lo}-{hi} of {write.path} "
        f"but {problem}; the fold was refused before anything was written to the arrays "
        "(the episodes stay in the episode log). Run "
        f"`episodata verify {folder}` to list the damaged episodes, and restore "
        "the file from a copy of the dataset" + (f" ({cause})" if cause else "")
    )

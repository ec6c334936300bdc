"""The Zarr arrays of a dataset folder and every TensorStore handle on them.

:class:`Arrays` owns the TensorStore context, one handle per data array and the index
array, and the operations a fold needs: grow (metadata only), write many episodes'
rows in one transaction, write index entries, trim to the committed shapes.

In a ``fork()`` child of the process that imported TensorStore (a DataLoader worker),
TensorStore aborts the process on first use. There the handles of a local folder are
:class:`~episodata_zarr._chunkfiles.FileArray` handles instead, which read the chunk files
themselves and answer the same read calls; such arrays are read-only.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorstore as ts

from episodata_core.errors import EpisodataError
from episodata_core.location import inside
from episodata_zarr._commit import write_commit
from episodata_zarr._confine import CheckedChunks, check_array
from episodata_zarr._disk import chunk_file
from episodata_zarr._layout import INDEX_PATH, IndexLayout
from episodata_zarr._reads import result

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from pathlib import Path

    import numpy.typing as npt

    from episodata_core.location import Location
    from episodata_zarr._chunkfiles import ChunkCache
    from episodata_zarr._commit import CommitRecord
    from episodata_zarr._layout import FieldLayout
    from episodata_zarr._options import ZarrOptions

__all__ = ["LOADED_IN", "Arrays", "Block", "tensorstore_usable"]

LOADED_IN = os.getpid()
"""The process that imported TensorStore; a fork() child of it must not touch TensorStore."""


def tensorstore_usable() -> bool:
    """Whether TensorStore may run in this process (not in a fork() child of its importer)."""
    return os.getpid() == LOADED_IN


Block = tuple[int, int, "Mapping[str, npt.NDArray[Any]]"]
"""Consecutive rows to write: ``(first row, count, stored rows per field)``."""

_RUN_BYTES = 8 << 20  # rows of adjacent blocks joined into one write
_SYNC_THREADS = 16  # folder syncs in flight at once (they wait on the disk, not the CPU)


class Arrays:
    """TensorStore handles of ``data/<role>/<key>`` and ``index/episodes``."""

    def __init__(
        self,
        folder: Path,
        layouts: Mapping[str, FieldLayout],
        index_layout: IndexLayout,
        options: ZarrOptions,
        remote: Location | None = None,
    ) -> None:
        self.folder = folder
        self.remote = remote
        """Where the arrays are on object storage; ``None``: in ``folder``."""
        self.name = str(folder) if remote is None else remote.url
        """The dataset's folder or URL, for messages."""
        self.layouts = layouts
        self.index_layout = index_layout
        self.options = options
        self.files = remote is None and not tensorstore_usable()
        """Whether the handles read chunk files themselves (a fork() child; read-only)."""
        # a fork() child creates no TensorStore object at all: not even a context
        self.context = None if self.files else self.new_context()
        self.data: dict[str, Any] = {}
        self.chunks: dict[str, int] = {}  # rows per decoded chunk of each data array
        self.index: Any = None
        # chunk files seen not to link outside (object stores have no links)
        self.checked: CheckedChunks | _NoLinks = (
            CheckedChunks(folder) if remote is None else _NoLinks()
        )
        self.durable_folders: set[str] = set()  # chunk folders whose entries were synced

    def new_context(self) -> Any:
        """A TensorStore context with an empty cache pool of ``cache_pool_bytes``."""
        remote = {} if self.remote is None else self.remote.context_spec()
        return ts.Context(
            {
                **remote,
                "cache_pool": {"total_bytes_limit": self.options.cache_pool_bytes},
                # folds sync their chunks before the commit record that relies on them
                "file_io_sync": self.options.fsync,
                # one writer holds our own lock; TensorStore's own locking would write
                # each key through a reused <key>.__lock that a killed writer leaves
                # half-written, and the next writer fills without truncating it (see _disk)
                "file_io_locking": {"mode": "none"},
            }
        )

    def spec(self, path: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """The TensorStore spec of the array at ``path`` (created when ``metadata`` is given)."""
        if self.remote is None:
            kvstore = {"driver": "file", "path": f"{check_array(self.folder, path)}/"}
        else:
            kvstore = self.remote.kvstore_spec(f"{path}/")
        spec: dict[str, Any] = {
            "driver": "zarr3",
            "kvstore": kvstore,
            # a reopened handle revalidates what was cached before: that is how readers
            # see chunks a fold rewrote
            "recheck_cached_data": "open",
            "recheck_cached_metadata": "open",
            # a missing chunk is damage, never zeros; so chunks equal to the fill value
            # must be stored too
            "fill_missing_data_reads": False,
            "store_data_equal_to_fill_value": True,
        }
        if metadata is not None:
            spec["metadata"] = metadata
            spec["create"] = True
        return spec

    def create(self) -> None:
        """Create every array, empty."""
        futures = [
            ts.open(self.spec(lay.path, lay.metadata(0)), context=self.context)
            for lay in self.layouts.values()
        ]
        futures.append(
            ts.open(self.spec(INDEX_PATH, self.index_layout.metadata(0)), context=self.context)
        )
        for future in futures:
            result(future, f"cannot create arrays in {self.name!r}")

    def open(self) -> None:
        """(Re)open every handle; checks what the arrays hold against the layout.

        Raises :class:`~episodata_zarr._chunkfiles.UnsupportedLayout` in a fork() child
        when an array's metadata is not this backend's (the chunk-file reader cannot
        decode it).
        """
        if self.files:
            from episodata_zarr._chunkfiles import ChunkCache

            # a fresh cache per open, as a new TensorStore handle revalidates its chunks:
            # a chunk cached past the old commit's rows may since hold newer rows
            cache = ChunkCache(self.options.cache_pool_bytes)
            opener = self._open_files(cache)
        else:
            opener = self._open_tensorstore()
        futures = {key: opener(layout.path) for key, layout in self.layouts.items()}
        index = opener(INDEX_PATH)
        for key, future in futures.items():
            layout = self.layouts[key]
            store = result(future, f"cannot open {layout.path}/zarr.json of field {key!r}")
            stored = (store.dtype.numpy_dtype, tuple(store.shape[1:]))
            if stored != (layout.storage_dtype, layout.storage_shape):
                raise EpisodataError(
                    f"{layout.path}/zarr.json: field {key!r} is stored as {stored[0]} "
                    f"{list(stored[1])} per row, but the schema says "
                    f"{layout.storage_dtype} {list(layout.storage_shape)}; the dataset is damaged"
                )
            self.data[key] = store
            self.chunks[key] = self.chunk_rows(store)
        self.index = result(index, f"cannot open {INDEX_PATH}/zarr.json")
        width = len(self.index_layout.columns)
        if self.index.rank != 2 or self.index.shape[1] != width:
            raise EpisodataError(
                f"{INDEX_PATH}/zarr.json: expected {width} columns, found shape "
                f"{list(self.index.shape)}; the dataset is damaged"
            )

    def _open_tensorstore(self) -> Callable[[str], Any]:
        return lambda path: ts.open(self.spec(path), context=self.context)

    def _open_files(self, cache: ChunkCache) -> Callable[[str], Any]:
        from episodata_zarr._chunkfiles import Done, UnsupportedLayout, open_file_array

        def opener(path: str) -> Done:
            folder = check_array(self.folder, path)
            try:
                return Done(open_file_array(folder, cache))
            except UnsupportedLayout:
                raise  # not damage: the caller reads another way
            except EpisodataError as err:
                return Done(error=err)  # raised where the open is waited on, as TensorStore's

        return opener

    def open_uncached_files(self, paths: Iterable[str]) -> dict[str, Any]:
        """:func:`~episodata_zarr._disk.open_uncached` in a fork() child: chunk-file handles."""
        from episodata_zarr._chunkfiles import ChunkCache

        opener = self._open_files(ChunkCache(0))
        handles: dict[str, Any] = {}
        for path in paths:
            try:
                handles[path] = result(opener(path), f"cannot open {self.folder / path}")
            except EpisodataError as err:
                handles[path] = err
        return handles

    def fresh_cache(self) -> None:
        """Drop every cached chunk (a new context), then reopen."""
        self.context = self.new_context()
        self.open()

    @staticmethod
    def chunk_rows(store: Any) -> int:
        """Rows per chunk that is read and decoded as a whole (an inner chunk if sharded)."""
        return int(store.chunk_layout.read_chunk.shape[0])

    def read_document(self, path: str) -> dict[str, Any]:
        """The parsed ``zarr.json`` of the node at ``path``."""
        if self.remote is not None:
            from episodata_core.location import key_value

            file: Any = f"{self.remote.url}/{path}/zarr.json"
            data = key_value(self.remote).get(f"{path}/zarr.json")
            if data is None:
                raise EpisodataError(f"{file}: missing (the dataset is damaged)")
        else:
            file = inside(self.folder, f"{path}/zarr.json")
            try:
                data = file.read_bytes()
            except OSError as err:
                raise EpisodataError(f"{file}: cannot be read as Zarr metadata ({err})") from err
        try:
            document = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise EpisodataError(f"{file}: cannot be read as Zarr metadata ({err})") from err
        if not isinstance(document, dict):
            raise EpisodataError(f"{file}: Zarr metadata must be a JSON object")
        return document

    def close(self) -> None:
        """Release every handle."""
        self.data.clear()
        self.index = None

    # -- writes ---------------------------------------------------------------------------

    def check_writer(self) -> None:
        """On object storage, refuse to write unless this process still holds the lease.

        Object stores have no fencing: a writer whose lease expired while it stalled
        would overwrite the chunks of the writer that took over.
        """
        if self.remote is not None:
            from episodata_core.location import check_lease

            check_lease(self.remote.url)

    def grow(self, rows: int, episodes: int) -> None:
        """Resize the arrays (metadata only) so that ``rows`` data rows and ``episodes`` fit."""
        pending: list[tuple[str | None, Any]] = []
        for key, handle in self.data.items():
            if handle.shape[0] < rows:
                size = _capacity(handle.shape[0], rows, self.chunk_rows(handle))
                pending.append((key, _resize(handle, size, grow=True)))
        if self.index.shape[0] < episodes:
            size = _capacity(self.index.shape[0], episodes, 1024)
            pending.append((None, _resize(self.index, size, grow=True)))
        for target, future in pending:
            handle = result(future, f"cannot resize arrays in {self.name!r}")
            if target is None:
                self.index = handle
            else:
                self.data[target] = handle

    def write(self, blocks: Sequence[Block], ids: Sequence[int], entries: Any) -> None:
        """Write data blocks and index entries (rows ``ids``) in one transaction; wait.

        Without one transaction, writes in flight together that share a chunk would each
        rewrite it, so a fold of many short episodes would encode every chunk many times.
        Adjacent blocks are joined into writes of about ``_RUN_BYTES``: a write costs tens
        of microseconds however small, and short episodes are many.
        """
        transaction = ts.Transaction()
        where = f"cannot write to {self.name!r}"
        for key, layout in self.layouts.items():
            handle = self.data[key].with_transaction(transaction)
            run: list[npt.NDArray[Any]] = []
            first = rows = size = 0
            for number, (start, count, stored) in enumerate(blocks):
                if not run:
                    first = start
                run.append(_rows_of(layout, key, count, stored))
                rows, size = rows + count, size + run[-1].nbytes
                if size >= _RUN_BYTES or number == len(blocks) - 1:
                    joined = run[0] if len(run) == 1 else np.concatenate(run)
                    # waited for at once: the joined copy is freed before the next is made
                    result(handle[first : first + rows].write(joined), where)
                    run, rows, size = [], 0, 0
        index = self.index.with_transaction(transaction)
        order = np.argsort(ids)
        sorted_ids, matrix = np.asarray(ids, dtype=np.int64)[order], entries[order]
        # one write per run of consecutive ids: usually a single run
        breaks = np.flatnonzero(np.diff(sorted_ids) != 1) + 1
        for run_ids in np.split(np.arange(len(sorted_ids)), breaks):
            if len(run_ids):
                first_id = int(sorted_ids[run_ids[0]])
                result(index[first_id : first_id + len(run_ids)].write(matrix[run_ids]), where)
        result(transaction.commit_async(), where)
        if self.options.fsync and self.remote is None:
            self._sync_folders(blocks, ids)

    def publish(self, record: CommitRecord) -> None:
        """Publish the commit record that makes what was written visible (see ``_fold``)."""
        if self.remote is None:
            write_commit(self.folder, record, durable=self.options.fsync)
            return
        from episodata_core.location import key_value
        from episodata_zarr._objects import write_remote_commit

        write_remote_commit(key_value(self.remote), self.remote, record)

    def _sync_folders(self, blocks: Sequence[Block], ids: Sequence[int]) -> None:
        """Sync the folders above the chunks just written, so their names survive power loss.

        TensorStore syncs each chunk file and the folder it lands in (``c/<n>/0/0`` for
        ``c/<n>/0/0/0``), but not the folders it creates above it: each new folder's name
        lives in its parent (``c/<n>/0`` in ``c/<n>``, ``c/<n>`` in ``c/``), and only a
        sync of that parent makes it durable. So exactly those parents are synced, each
        once per call, and all at once: a folder sync waits for the file system's journal,
        and concurrent syncs share its commits (200 folders: 1.3 s one after the other,
        about 0.07 s in 16 threads, measured on this project's ext4 disk). A folder counts
        as durable once its parent was synced, for as long as this process has it open.
        """
        rows = [(start, start + count - 1) for start, count, _ in blocks]
        targets = [(self.layouts[key].path, handle, rows) for key, handle in self.data.items()]
        if len(ids):
            targets.append((INDEX_PATH, self.index, [(min(ids), max(ids))]))
        made: set[str] = set()  # folders whose names are to be made durable
        for path, handle, spans in targets:
            top = os.fspath(self.folder / path)
            width = int(handle.chunk_layout.write_chunk.shape[0])
            chunks = {c for lo, hi in spans for c in range(lo // width, hi // width + 1)}
            for chunk in chunks:
                folder = os.path.dirname(chunk_file(self.folder, path, handle, chunk * width))
                while len(folder) > len(top) and folder not in self.durable_folders:
                    made.add(folder)
                    folder = os.path.dirname(folder)
        parents = sorted({os.path.dirname(folder) for folder in made})
        if len(parents) == 1:
            _fsync(parents[0])
        elif parents:
            with ThreadPoolExecutor(min(_SYNC_THREADS, len(parents))) as pool:
                list(pool.map(_fsync, parents))  # list(): the first failure raises here
        self.durable_folders |= made

    def trim(self, rows: int, episodes: int) -> None:
        """Shrink the arrays to the committed rows, so zarr-python sees exact shapes."""
        targets = [(handle, rows) for handle in self.data.values()]
        targets.append((self.index, episodes))
        futures = [_resize(h, n, grow=False) for h, n in targets if h.shape[0] > n]
        for future in futures:
            result(future, f"cannot trim the arrays of {self.name!r}")
        if futures:
            self.open()


class _NoLinks:
    """:class:`CheckedChunks` on object storage, where no key can link anywhere."""

    def check_ranges(self, path: str, handle: Any, lo: Any, hi: Any) -> None:
        """Nothing to check."""

    def check_rows(self, path: str, handle: Any, rows: Any) -> None:
        """Nothing to check."""


def _fsync(folder: str) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _capacity(current: int, needed: int, minimum: int) -> int:
    # geometric growth: most folds fit without rewriting any zarr.json
    return max(needed, 2 * current, minimum)


def _resize(handle: Any, rows: int, *, grow: bool) -> Any:
    """A future of ``handle`` resized to ``rows`` rows along the first axis."""
    bounds = [rows, *[None] * (handle.rank - 1)]
    if grow:
        # only zarr.json changes; chunks beyond the commit are overwritten later
        return handle.resize(exclusive_max=bounds, resize_metadata_only=True, expand_only=True)
    return handle.resize(exclusive_max=bounds, shrink_only=True)


def _rows_of(
    layout: FieldLayout, key: str, count: int, stored: Mapping[str, npt.NDArray[Any]]
) -> npt.NDArray[Any]:
    block = stored.get(key)
    if block is None:
        # absent optional fields take zero rows: every field shares one row numbering
        block = np.zeros((count, *layout.storage_shape), dtype=layout.storage_dtype)
    return block

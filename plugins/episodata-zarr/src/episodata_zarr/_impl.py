"""TensorStore I/O of the zarr backend: create, open and recover, commit, read.

Only ever imported from inside :class:`episodata_zarr.ZarrBackend`'s methods, so that
``import episodata_zarr`` stays light.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorstore as ts

from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.location import inside, write_json_atomic
from episodata_core.schema import DatasetSchema
from episodata_zarr._commit import CommitRecord, read_commit, write_commit
from episodata_zarr._confine import CheckedChunks, check_array, check_files
from episodata_zarr._disk import ChunkGuard, remove_leftovers
from episodata_zarr._layout import (
    COMMIT_NAME,
    FORMAT,
    FORMAT_VERSION,
    GROUP_DOCUMENT,
    INDEX_PATH,
    FieldLayout,
    IndexLayout,
    crc32,
    field_layouts,
    group_paths,
    metadata_digest,
    spill_group,
)
from episodata_zarr._manifest import check_manifest
from episodata_zarr._options import worker_share
from episodata_zarr._reads import SpillGoneError, gather_rows, read_rows, result
from episodata_zarr._table import EpisodeIndex, check_entries
from episodata_zarr._writes import Ongoing, commit, trim

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy.typing as npt

    from episodata_core.protocols import EpisodeRows, EpisodeTable, GatherRequest, Rows
    from episodata_zarr._forked import ForkedReader
    from episodata_zarr._options import ZarrOptions

__all__ = ["LOADED_IN", "ZarrStore"]

LOADED_IN = os.getpid()
"""The process that imported TensorStore; a fork() child of it must not touch TensorStore."""


class ZarrStore:
    """One dataset folder: TensorStore handles, the in-memory index, the commit protocol."""

    def __init__(
        self,
        folder: Path,
        schema: DatasetSchema,
        layouts: dict[str, FieldLayout],
        options: ZarrOptions,
        record: CommitRecord,
        *,
        writable: bool,
    ) -> None:
        self.folder = folder
        self.schema = schema
        self.layouts = layouts
        self.options = options
        self.record = record
        self.writable = writable
        self.context = self.new_context()
        optional = tuple(spec.qualified_key for spec in schema if spec.optional)
        self.index_layout = IndexLayout(optional, schema.qualified_keys)
        self.index = EpisodeIndex(self.index_layout)
        self.ongoing: dict[int, Ongoing] = {}
        self.data: dict[str, Any] = {}
        self.chunks: dict[str, int] = {}  # rows per decoded chunk of each data array
        self.index_store: Any = None
        self.spills: dict[tuple[int, str], Any] = {}
        self.documents: dict[str, dict[str, Any]] = {}  # data arrays' zarr.json, for spills
        self.spill_contexts: tuple[Any, Any] | None = None  # (parent, uncached child)
        self.checked = CheckedChunks(folder)  # chunk files seen not to link outside
        self.guard = ChunkGuard()  # what commits may rewrite, as this writer left it
        self.pid = os.getpid()
        self.helper: tuple[int, ForkedReader] | None = None  # (pid, reader) in a fork child
        self.closed = False

    # -- paths and handles ----------------------------------------------------------------

    def new_context(self) -> Any:
        """A TensorStore context with an empty cache pool of ``cache_pool_bytes``."""
        return ts.Context(
            {
                "cache_pool": {"total_bytes_limit": self.options.cache_pool_bytes},
                "file_io_sync": self.options.fsync,
                # one writer holds our own lock; TensorStore's own locking would write
                # each key through a reused <key>.__lock that a killed writer leaves
                # half-written, and the next writer fills without truncating it (see _disk)
                "file_io_locking": {"mode": "none"},
            }
        )

    def spec(self, path: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """The TensorStore spec of the array at ``path`` (created when ``metadata`` is given)."""
        spec: dict[str, Any] = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": f"{check_array(self.folder, path)}/"},
            # a reopened handle revalidates what was cached before: that is how readers
            # see chunks the writer rewrote
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

    def spill_context(self) -> Any:
        """The context of spill arrays; a writer's has a cache pool of 0 bytes.

        The writer keeps ongoing rows in memory and never reads its spills back: cached,
        every flushed episode left a decoded chunk per field in the pool (about 1.8 MB
        each for the example schema, measured), which the pool did not give back. A
        reader samples ongoing episodes from their spills, so its spills stay cached.
        """
        if not self.writable:
            return self.context
        if self.spill_contexts is None or self.spill_contexts[0] is not self.context:
            uncached = ts.Context.Spec({"cache_pool": {"total_bytes_limit": 0}})
            self.spill_contexts = (self.context, ts.Context(uncached, self.context))
        return self.spill_contexts[1]

    def create_spill(self, path: str, metadata: dict[str, Any]) -> Any:
        """A future of a new spill array at ``path``."""
        return ts.open(self.spec(path, metadata), context=self.spill_context())

    def drop_spill(self, episode: int) -> None:
        """Forget the spill handles of an episode and remove its spill folder.

        Call it only once a commit record that no longer names the episode as ongoing is
        on disk: until then, recovery may need those files. Should the removal fail, the
        next writable open removes the folder (:meth:`recover`).
        """
        for key in self.layouts:
            self.spills.pop((episode, key), None)
        shutil.rmtree(inside(self.folder, spill_group(episode)), ignore_errors=True)

    def open_arrays(self) -> None:
        """(Re)open the data and index arrays; checks what they hold against the layout."""
        futures = {
            key: ts.open(self.spec(layout.path), context=self.context)
            for key, layout in self.layouts.items()
        }
        index = ts.open(self.spec(INDEX_PATH), context=self.context)
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
        self.index_store = result(index, f"cannot open {INDEX_PATH}/zarr.json")
        width = len(self.index_layout.columns)
        if self.index_store.rank != 2 or self.index_store.shape[1] != width:
            raise EpisodataError(
                f"{INDEX_PATH}/zarr.json: expected {width} columns, found shape "
                f"{list(self.index_store.shape)}; the dataset is damaged"
            )
        self.spills.clear()

    def chunk_rows(self, store: Any) -> int:
        """Rows per chunk that is read and decoded as a whole (an inner chunk if sharded)."""
        return int(store.chunk_layout.read_chunk.shape[0])

    def spill_store(self, episode: int, key: str) -> Any:
        """The spill array of one field of an ongoing episode (opened lazily)."""
        store = self.spills.get((episode, key))
        if store is None:
            path = self.layouts[key].spill_path(episode)
            store = result(
                ts.open(self.spec(path), context=self.spill_context()),
                f"ongoing episode {episode}: cannot open {path}",
            )
            self.spills[(episode, key)] = store
        return store

    # -- creation and opening -------------------------------------------------------------

    @classmethod
    def create(cls, schema: DatasetSchema, location: str, options: ZarrOptions) -> ZarrStore:
        """Write an empty dataset into ``location`` (an empty or missing folder)."""
        folder = Path(location)
        folder.mkdir(parents=True, exist_ok=True)
        # the core's lock file is a dotfile; anything else means the folder is in use
        leftovers = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        if leftovers:
            raise DatasetStateError(
                f"cannot create a Zarr dataset in {location!r}: it already holds {leftovers[:5]}"
            )
        layouts = field_layouts(schema, options)
        root = {
            **GROUP_DOCUMENT,
            "attributes": {
                "episodata": {
                    "format": FORMAT,
                    "format_version": FORMAT_VERSION,
                    "schema": schema.model_dump(mode="json"),
                    "commit_record": "commit.json",
                }
            },
        }
        write_json_atomic(folder / "zarr.json", root)
        for group in ["index", "ongoing", *group_paths(lay.path for lay in layouts.values())]:
            (folder / group).mkdir(parents=True, exist_ok=True)
            write_json_atomic(folder / group / "zarr.json", GROUP_DOCUMENT)
        record = CommitRecord(
            format=FORMAT,
            format_version=FORMAT_VERSION,
            generation=0,
            episodes=0,
            rows=0,
            metadata={},
            root=zlib.crc32((folder / "zarr.json").read_bytes()),
        )
        store = cls(folder, schema, layouts, options, record, writable=True)
        creating = [
            ts.open(store.spec(lay.path, lay.metadata(0)), context=store.context)
            for lay in layouts.values()
        ]
        creating.append(
            ts.open(store.spec(INDEX_PATH, store.index_layout.metadata(0)), context=store.context)
        )
        for future in creating:
            result(future, f"cannot create arrays in {location!r}")
        digests = {
            path: metadata_digest(store.read_document(path))
            for path in [INDEX_PATH, *(lay.path for lay in layouts.values())]
        }
        store.record = record.model_copy(update={"metadata": digests})
        write_commit(folder, store.record)
        store.open_arrays()
        store.documents = {key: store.read_document(lay.path) for key, lay in layouts.items()}
        return store

    def read_document(self, path: str) -> dict[str, Any]:
        """The parsed ``zarr.json`` of the node at ``path``."""
        file = inside(self.folder, f"{path}/zarr.json")
        try:
            document = json.loads(file.read_bytes())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise EpisodataError(f"{file}: cannot be read as Zarr metadata ({err})") from err
        if not isinstance(document, dict):
            raise EpisodataError(f"{file}: Zarr metadata must be a JSON object")
        return document

    @classmethod
    def open(cls, location: str, options: ZarrOptions, *, writable: bool) -> ZarrStore:
        """Open a dataset folder; a writable open also recovers after a crashed writer."""
        folder = Path(location)
        check_files(folder, [COMMIT_NAME, "zarr.json"])  # no link out of the folder is read
        record = read_commit(folder)
        root_file = folder / "zarr.json"
        try:
            root_bytes = root_file.read_bytes()
        except OSError as err:
            raise EpisodataError(f"{root_file}: cannot be read ({err})") from err
        if zlib.crc32(root_bytes) != record.root:
            raise EpisodataError(
                f"{root_file}: damaged (it differs from the checksum in commit.json); it holds "
                "the schema, so the dataset cannot be read"
            )
        try:
            schema = DatasetSchema.model_validate(
                json.loads(root_bytes)["attributes"]["episodata"]["schema"]
            )
        except (ValueError, KeyError, TypeError) as err:
            raise EpisodataError(f"{root_file}: no valid episodata schema ({err})") from err
        check_manifest(folder, schema)  # before anything is sized or read by either schema
        store = cls(
            folder, schema, field_layouts(schema, options), options, record, writable=writable
        )
        store.open_arrays()
        store.load_index(record)
        if writable:
            store.documents = {k: store.read_document(lay.path) for k, lay in store.layouts.items()}
            store.recover()
        return store

    def load_index(self, record: CommitRecord, first: int = 0) -> None:
        """Read ``record``'s index entries from episode ``first`` on; adopt ``record``."""
        for key, store in self.data.items():
            if store.shape[0] < record.rows:
                raise EpisodataError(
                    f"{self.layouts[key].path}: holds {store.shape[0]} rows but commit.json "
                    f"commits {record.rows}; the dataset is damaged"
                )
        if self.index_store.shape[0] < record.episodes:
            raise EpisodataError(
                f"{INDEX_PATH}: holds {self.index_store.shape[0]} episodes but commit.json "
                f"commits {record.episodes}; the dataset is damaged"
            )
        entries = result(
            self.index_store[first : record.episodes].read(), f"cannot read {INDEX_PATH}"
        ).astype(np.int64, copy=False)
        check_entries(entries, first, rows=record.rows, ongoing=record.ongoing, where=INDEX_PATH)
        for episode, ongoing in record.ongoing.items():
            if episode >= first:
                # the commit record overrides an entry a torn commit may have rewritten
                entry = entries[episode - first]
                entry[0], entry[1], entry[2:5] = -1, ongoing.rows - 1, (0, 0, 1)
        self.index.truncate(first)
        self.index.store(first, entries)
        self.record = record

    def recover(self) -> None:
        """Load flushed ongoing episodes into memory and drop what no commit covers."""
        record = self.record
        remove_leftovers(self)  # TensorStore's temporaries of a killed writer
        for episode, ongoing in sorted(record.ongoing.items()):
            present = self.present_keys(episode)
            rows: dict[str, npt.NDArray[Any]] = {}
            for key in present:
                layout = self.layouts[key]
                stored = result(
                    self.spill_store(episode, key)[: ongoing.rows].read(),
                    f"ongoing episode {episode}: cannot read {layout.spill_path(episode)}",
                )
                if crc32(stored) != ongoing.crc32.get(key):
                    raise EpisodataError(
                        f"ongoing episode {episode}: {layout.spill_path(episode)} differs from "
                        "the checksum of its last flush; the dataset is damaged"
                    )
                rows[key] = layout.decode(stored)
            state = Ongoing(rows)
            state.durable, state.crc32 = ongoing.rows, dict(ongoing.crc32)
            self.ongoing[episode] = state
        for temporary in self.folder.glob(f".{COMMIT_NAME}.*.tmp"):
            temporary.unlink(missing_ok=True)  # a commit record a killed writer never renamed
        spill_root = inside(self.folder, "ongoing")
        for child in sorted(spill_root.iterdir()) if spill_root.is_dir() else []:
            if child.is_dir() and child.name not in {str(e) for e in record.ongoing}:
                shutil.rmtree(child)  # a finalized episode's or an uncommitted flush
        trim(self)
        self.open_arrays()

    def present_keys(self, episode: int) -> list[str]:
        """The fields an episode stores."""
        table = self.index.table()
        return [
            k
            for k in self.schema.qualified_keys
            if k not in table.present or bool(table.present[k][episode])
        ]

    # -- state ----------------------------------------------------------------------------

    def check(self, *, write: bool = False) -> None:
        """Refuse use after close, writes to a read-only open, writes in a forked child."""
        if self.closed:
            raise DatasetStateError(f"the Zarr dataset {str(self.folder)!r} is closed")
        if write and not self.writable:
            raise DatasetStateError(
                f"the Zarr dataset {str(self.folder)!r} was opened read-only; writes go "
                "through Dataset, which reopens it writable under the writer lock"
            )
        if write and os.getpid() != self.pid:
            raise DatasetStateError(
                f"the Zarr dataset {str(self.folder)!r} was opened in process {self.pid} and "
                "inherited through fork(); write from the process that opened it"
            )

    def forked(self) -> ForkedReader | None:
        """The helper that reads for this process if it is a fork() child, else None."""
        if os.getpid() == self.pid:
            return None
        if self.helper is None or self.helper[0] != os.getpid():
            from episodata_zarr._forked import ForkedReader

            options = worker_share(self.options).model_dump(mode="json")
            reader = ForkedReader(str(self.folder), options)
            self.helper = (os.getpid(), reader)
        return self.helper[1]

    def episode_table(self) -> EpisodeTable:
        """Views of the index (committed entries plus this writer's unflushed ones)."""
        return self.index.table()

    # -- writes ---------------------------------------------------------------------------

    def start_episode(self, rows: Rows) -> int:
        """Begin an ongoing episode in memory; nothing is written until a commit."""
        self.check(write=True)
        state = Ongoing(rows)
        episode = self.index.add_ongoing(rows.keys(), len(state))
        self.ongoing[episode] = state
        return episode

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Append rows to an ongoing episode; memory only."""
        self.index.length.data[episode] += self.ongoing_state(episode).append(episode, rows)

    def ongoing_state(self, episode: int) -> Ongoing:
        """The writer's state of an ongoing episode."""
        self.check(write=True)
        state = self.ongoing.get(episode)
        if state is None:
            raise DatasetStateError(f"episode {episode} is not ongoing")
        return state

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Move an ongoing episode into the data arrays; durable on return."""
        state = self.ongoing_state(episode)
        rows = {key: grow.view() for key, grow in state.buffers.items()}
        commit(self, [(episode, rows, terminated, truncated)])

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Append a finalized episode to the data arrays; durable on return."""
        self.check(write=True)
        episode = len(self.index)
        commit(self, [(episode, rows, terminated, truncated)])
        return episode

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Append finalized episodes with one commit; all durable (or none) on return."""
        self.check(write=True)
        first = len(self.index)
        ids = list(range(first, first + len(episodes)))
        commit(
            self,
            [(i, e.rows, e.terminated, e.truncated) for i, e in zip(ids, episodes, strict=True)],
        )
        written = sum(block.nbytes for e in episodes for block in e.rows.values())
        if written * 16 >= self.options.cache_pool_bytes > 0:
            # the written chunks now fill TensorStore's cache, where bulk writes are seldom
            # read back soon: a fresh cache gives that memory back at once (an import's
            # RSS stays bounded by its read budget). Reopening costs a few milliseconds,
            # so smaller calls keep the cache
            self.context = self.new_context()
            self.open_arrays()
        return ids

    def flush(self) -> None:
        """Spill every ongoing episode's unflushed rows and commit them."""
        if self.writable:
            self.check()
            commit(self, [], flush=True)

    # -- reads ----------------------------------------------------------------------------

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows ``[start, stop)`` of one episode."""
        self.check()
        return self._following_finalizes(lambda: read_rows(self, episode, start, stop, fields))

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows, coalesced per chunk."""
        self.check()
        return self._following_finalizes(lambda: gather_rows(self, request))

    def _following_finalizes(self, read: Callable[[], Rows]) -> Rows:
        """``read()``, refreshed and retried while spills go because the writer finalized.

        The writer removes an episode's spill at the commit that finalizes it; its rows
        are then in the data arrays, with the same prefix. A reader may lose that race
        again after a refresh (another finalize in between), so it retries as long as
        each refresh finds a newer commit; a spill gone without one is damage and raises.
        """
        while True:
            try:
                return read()
            except SpillGoneError:
                seen = self.record.generation
                self.refresh()
                if self.record.generation == seen:
                    raise

    def refresh(self) -> None:
        """Adopt the newest commit: reopen arrays, read new and changed index entries."""
        self.check()
        if os.getpid() != self.pid:
            raise DatasetStateError(
                "refresh() is not available in a fork()ed child: it reads the snapshot it "
                "inherited; refresh in the parent before starting workers"
            )
        if self.writable:
            return  # the one writer's memory is always the newest state
        record = read_commit(self.folder)
        old = self.record
        if record.generation == old.generation:
            return
        self.open_arrays()
        # entries from the first one that may have changed: new ids, or once-ongoing ones
        self.load_index(record, min([old.episodes, *old.ongoing]))

    def verify(self) -> list[str]:
        """Every damaged file, chunk or episode; see :mod:`episodata_zarr._verify`."""
        self.check()
        if os.getpid() != self.pid:
            raise DatasetStateError("verify() is not available in a fork()ed child")
        from episodata_zarr._verify import verify

        return verify(self)

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Flush a writer, trim its arrays, release every handle."""
        if self.closed:
            return
        if self.helper is not None and self.helper[0] == os.getpid():
            self.helper[1].close()
        self.helper = None
        if self.writable and os.getpid() == self.pid:
            self.flush()
            trim(self)
        self.closed = True
        self.data.clear()
        self.spills.clear()
        self.ongoing.clear()
        self.index_store = None

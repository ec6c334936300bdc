"""The zarr backend's engine: log -> fold -> arrays, behind one :class:`ZarrStore`.

- :class:`~episodata_zarr._log.EpisodeLog` (``log.sqlite``): every finalized episode,
  and every flushed prefix of an ongoing one, is one SQLite commit;
- :class:`~episodata_zarr._tail.Tail`: those episodes' rows in memory, where reads find
  them (the writer keeps them as it logs; a reader loads them at ``refresh()``);
- :func:`~episodata_zarr._fold.fold`: moves the tail into the arrays in one batch, at
  ``fold_bytes``, ``flush()`` and ``close()``, and publishes ``commit.json``;
- :class:`~episodata_zarr._arrays.Arrays`: the TensorStore handles of the Zarr arrays;
- :class:`~episodata_zarr._table.EpisodeIndex`: lengths, flags and rows of every episode.

Only ever imported from inside :class:`episodata_zarr.ZarrBackend`'s methods, so that
``import episodata_zarr`` stays light.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_core.location import Url, key_value, resolve
from episodata_core.schema import DatasetSchema
from episodata_zarr._adopt import adopt
from episodata_zarr._arrays import Arrays
from episodata_zarr._commit import CommitRecord, read_commit, write_commit
from episodata_zarr._confine import check_files
from episodata_zarr._disk import ChunkGuard, remove_leftovers
from episodata_zarr._fold import fold
from episodata_zarr._layout import (
    COMMIT_NAME,
    FORMAT,
    FORMAT_VERSION,
    GROUP_DOCUMENT,
    INDEX_PATH,
    IndexLayout,
    field_layouts,
    group_paths,
    metadata_digest,
)
from episodata_zarr._log import LOG_NAME, Block, EpisodeLog, LogEntry
from episodata_zarr._manifest import check_manifest
from episodata_zarr._objects import (
    prune_commits,
    read_remote_commit,
    remove_staging,
    staging_folder,
)
from episodata_zarr._options import worker_share
from episodata_zarr._reads import gather_rows, read_rows, result
from episodata_zarr._table import EpisodeIndex, check_entries
from episodata_zarr._tail import Ongoing, Tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy.typing as npt

    from episodata_core.location import Location
    from episodata_core.protocols import EpisodeRows, EpisodeTable, GatherRequest, Rows
    from episodata_zarr._forked import ForkedReader
    from episodata_zarr._layout import FieldLayout
    from episodata_zarr._options import ZarrOptions

__all__ = ["LOADED_IN", "ZarrStore"]

LOADED_IN = os.getpid()
"""The process that imported TensorStore; a fork() child of it must not touch TensorStore."""

_THIS_PROCESS = [LOADED_IN]  # kept current by a fork hook: os.getpid() per step costs 2 us
os.register_at_fork(after_in_child=lambda: _THIS_PROCESS.__setitem__(0, os.getpid()))

_LOG = logging.getLogger("episodata")

_DIRECT_FOLD_BYTES = 4 << 20
"""Bulk batches from this size on skip the log: a fold costs ~4 ms however small, and
logging first writes every byte twice (log, then arrays); past a few MB the second
write costs more than the fold's fixed part, and bulk imports keep their throughput."""


class ZarrStore:
    """One dataset folder: its commit record, index, episode log, tail and arrays."""

    def __init__(
        self,
        folder: Path,
        schema: DatasetSchema,
        layouts: dict[str, FieldLayout],
        options: ZarrOptions,
        record: CommitRecord,
        *,
        writable: bool,
        remote: Location | None = None,
    ) -> None:
        self.folder = folder
        """The dataset folder; on object storage, the local staging folder of the log."""
        self.remote = remote
        """Where the dataset is on object storage (see ``_objects``); ``None``: local."""
        self.schema = schema
        self.layouts = layouts
        self.options = options
        self.record = record
        self.writable = writable
        optional = tuple(spec.qualified_key for spec in schema if spec.optional)
        self.index_layout = IndexLayout(optional, schema.qualified_keys)
        self.index = EpisodeIndex(self.index_layout)
        self.arrays = Arrays(folder, layouts, self.index_layout, options, remote)
        self.tail = Tail(layouts, record.rows)
        local = remote is None
        self.log = EpisodeLog(
            folder,
            writable=writable,
            sync_each=local and options.durability == "sync",
            sync_interval=options.sync_interval,
            fsync=local and options.fsync,  # staged: durable at flush(), by the fold
        )
        self.guard = ChunkGuard()  # what folds may rewrite, as this writer left it
        self.torn_entries: list[int] = []  # index rows a torn fold wrote (see load_index)
        self.pid = os.getpid()
        self.helper: tuple[int, ForkedReader] | None = None  # (pid, reader) in a fork child
        self.closed = False

    # -- creation and opening -------------------------------------------------------------

    @classmethod
    def create(cls, schema: DatasetSchema, location: str, options: ZarrOptions) -> ZarrStore:
        """Write an empty dataset into ``location`` (an empty or missing folder, or prefix)."""
        where = resolve(location)
        kv = key_value(location)
        remote = where if where.remote else None
        if remote is not None:
            remote.check_writable("create a dataset at")
            folder = staging_folder()
            # the core's lease and creation marker are dotfiles, its manifest comes later
            leftovers = sorted(key for key in kv.list() if not key.split("/")[-1].startswith("."))
        else:
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
                    "commit_record": COMMIT_NAME,
                    "episode_log": LOG_NAME,
                }
            },
        }
        root_bytes = json.dumps(root, indent=2).encode()
        kv.put("zarr.json", root_bytes)
        for group in ["index", *group_paths(lay.path for lay in layouts.values())]:
            kv.put(f"{group}/zarr.json", json.dumps(GROUP_DOCUMENT, indent=2).encode())
        record = CommitRecord(
            format=FORMAT,
            format_version=FORMAT_VERSION,
            generation=0,
            episodes=0,
            rows=0,
            metadata={},
            root=zlib.crc32(root_bytes),
        )
        store = cls(folder, schema, layouts, options, record, writable=True, remote=remote)
        store.arrays.create()
        digests = {
            path: metadata_digest(store.arrays.read_document(path))
            for path in [INDEX_PATH, *(lay.path for lay in layouts.values())]
        }
        store.record = record.model_copy(update={"metadata": digests})
        if remote is None:
            write_commit(folder, store.record)
        else:
            store.arrays.publish(store.record)
        store.arrays.open()
        return store

    @classmethod
    def open(cls, location: str, options: ZarrOptions, *, writable: bool) -> ZarrStore:
        """Open a dataset folder; a writable open also recovers after a crashed writer."""
        where = resolve(location)
        if where.remote:
            return cls._open_remote(where, options, writable=writable)
        folder = Path(location)
        # no link out of the folder is read
        # (nor written: SQLite writes the log's -wal and -shm files next to it)
        check_files(
            folder, [COMMIT_NAME, "zarr.json", *(f"{LOG_NAME}{s}" for s in ("", "-wal", "-shm"))]
        )
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
        if record.ongoing:
            raise EpisodataError(
                f"{folder}: written by an earlier episodata-zarr (layout 1) that kept the "
                f"ongoing episodes {sorted(record.ongoing)} in ongoing/; this version keeps "
                "them in log.sqlite and cannot read those files. Open the dataset with "
                "episodata-zarr 0.1 and finalize or flush and close it, then open it here"
            )
        check_manifest(folder, schema)  # before anything is sized or read by either schema
        store = cls(
            folder, schema, field_layouts(schema, options), options, record, writable=writable
        )
        store.arrays.open()
        store.load_index(record)
        stale = store.adopt_snapshot()
        if writable:
            store.recover(stale)
        return store

    @classmethod
    def _open_remote(cls, where: Location, options: ZarrOptions, *, writable: bool) -> ZarrStore:
        """:meth:`open` on object storage: the newest commit record, pinned."""
        if writable:
            where.check_writable("write to")
        kv = key_value(where)
        record = read_remote_commit(kv, where)
        root_bytes = kv.get("zarr.json")
        if root_bytes is None:
            raise EpisodataError(f"{where.url}/zarr.json is missing; the dataset is damaged")
        if zlib.crc32(root_bytes) != record.root:
            raise EpisodataError(
                f"{where.url}/zarr.json: damaged (it differs from the checksum in the commit "
                "record); it holds the schema, so the dataset cannot be read"
            )
        try:
            schema = DatasetSchema.model_validate(
                json.loads(root_bytes)["attributes"]["episodata"]["schema"]
            )
        except (ValueError, KeyError, TypeError) as err:
            raise EpisodataError(
                f"{where.url}/zarr.json: no valid episodata schema ({err})"
            ) from err
        store = cls(
            staging_folder(),
            schema,
            field_layouts(schema, options),
            options,
            record,
            writable=writable,
            remote=where,
        )
        store.arrays.open()
        store.load_index(record)
        if writable:
            # rows past the record (a killed writer's) are ignored and written over
            store.arrays.trim(record.rows, record.episodes)
        return store

    @property
    def location(self) -> str:
        """The dataset's URL on object storage (a ``Url``, with its options), or its folder."""
        return str(self.folder) if self.remote is None else Url(self.remote)

    def read_record(self) -> CommitRecord:
        """The newest commit record (``commit.json``, or the newest of ``commits/``)."""
        if self.remote is None:
            return read_commit(self.folder)
        return read_remote_commit(key_value(self.remote), self.remote)

    def load_index(self, record: CommitRecord, first: int = 0) -> None:
        """Read ``record``'s index entries from episode ``first`` on; adopt ``record``."""
        arrays = self.arrays
        for key, handle in arrays.data.items():
            if handle.shape[0] < record.rows:
                raise EpisodataError(
                    f"{self.layouts[key].path}: holds {handle.shape[0]} rows but commit.json "
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
        self.torn_entries = (np.flatnonzero(ahead) + first).tolist()
        if ahead.any():
            entries = entries.copy()
            entries[ahead, 0], entries[ahead, 2:5] = -1, (0, 0, 1)
        self.index.truncate(first)
        self.index.store(first, entries)
        self.record = record

    def adopt_log(self) -> list[int]:
        """Take what the log holds beyond the arrays into the index and the tail.

        Returns the ids of stale entries (see :func:`episodata_zarr._adopt.adopt`).
        """
        return adopt(self.log, self.record, self.index, self.tail, self.layouts, self.folder)

    def recover(self, stale: list[int]) -> None:
        """After a crashed writer: drop what no commit covers; report what was found."""
        record = self.record
        removed = remove_leftovers(self.arrays, record, self.tail.ongoing)
        for temporary in self.folder.glob(f".{COMMIT_NAME}.*.tmp"):
            temporary.unlink(missing_ok=True)  # a commit record a killed writer never renamed
        self.log.forget(stale)
        self.arrays.trim(record.rows, record.episodes)
        if self.torn_entries:
            # index rows a torn fold wrote send their episodes back to the log on disk
            # too (readers apply that rule anyway; a reader without episodata may not)
            ids = self.torn_entries
            rewritten = self.index.make_entries(
                [-1] * len(ids),
                self.index.length.view()[ids].tolist(),
                [False] * len(ids),
                [False] * len(ids),
                [True] * len(ids),
                [self.present_keys(e) for e in ids],
            )
            self.arrays.write([], ids, rewritten)
        if self.log.interrupted or stale or removed:
            _LOG.info(
                "%s: recovered after an interrupted writer: %d finalized and %d ongoing "
                "episodes in the episode log, %d stale log entries and %d temporary files "
                "removed",
                self.folder,
                len(self.tail.episodes),
                len(self.tail.ongoing),
                len(stale),
                removed,
            )

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
            raise DatasetStateError(f"the Zarr dataset {self.arrays.name!r} is closed")
        if write and not self.writable:
            raise DatasetStateError(
                f"the Zarr dataset {self.arrays.name!r} was opened read-only; writes go "
                "through Dataset, which reopens it writable under the writer lock"
            )
        if write and _THIS_PROCESS[0] != self.pid:
            raise DatasetStateError(
                f"the Zarr dataset {self.arrays.name!r} was opened in process {self.pid} and "
                "inherited through fork(); write from the process that opened it"
            )

    def forked(self) -> ForkedReader | None:
        """The helper that reads for this process if it is a fork() child, else None."""
        if os.getpid() == self.pid:
            return None
        if self.helper is None or self.helper[0] != os.getpid():
            from episodata_zarr._forked import ForkedReader

            options = worker_share(self.options).model_dump(mode="json")
            reader = ForkedReader(self.location, options)
            self.helper = (os.getpid(), reader)
        return self.helper[1]

    def episode_table(self) -> EpisodeTable:
        """Views of the index: folded, logged and ongoing episodes."""
        return self.index.table()

    # -- writes ---------------------------------------------------------------------------

    def start_episode(self, rows: Rows) -> int:
        """Begin an ongoing episode in memory; nothing is written until it is logged."""
        self.check(write=True)
        state = Ongoing(rows)
        episode = self.index.add_ongoing(rows.keys(), len(state))
        self.tail.ongoing[episode] = state
        return episode

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Append rows to an ongoing episode; memory only."""
        self.index.length.data[episode] += self.ongoing_state(episode).append(episode, rows)

    def append_step(self, episode: int, values: Mapping[str, Any]) -> None:
        """Append one step of exact values to an ongoing episode; memory only."""
        state = self.tail.ongoing.get(episode)
        if state is None or _THIS_PROCESS[0] != self.pid:
            state = self.ongoing_state(episode)  # raises: closed, read-only, forked, unknown
        state.append_step(episode, values)
        self.index.length.data[episode] += 1

    def ongoing_state(self, episode: int) -> Ongoing:
        """The writer's state of an ongoing episode."""
        self.check(write=True)
        state = self.tail.ongoing.get(episode)
        if state is None:
            raise DatasetStateError(f"episode {episode} is not ongoing")
        return state

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Log an ongoing episode as finalized; crash-durable on return."""
        state = self.ongoing_state(episode)
        self._log_finals([(episode, state.rows(), terminated, truncated)], {episode: state.logged})

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Log a finalized episode; crash-durable on return."""
        self.check(write=True)
        episode = len(self.index)
        self._log_finals([(episode, rows, terminated, truncated)], {})
        return episode

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Finalized episodes in one commit: all of them (or none) after a crash.

        Batches of at least ``_DIRECT_FOLD_BYTES`` (or ``fold_bytes``) go straight into
        the arrays with the tail (one fold), smaller ones into the log.
        """
        self.check(write=True)
        first = len(self.index)
        finals = [(first + i, e.rows, e.terminated, e.truncated) for i, e in enumerate(episodes)]
        written = sum(block.nbytes for e in episodes for block in e.rows.values())
        if written >= min(self.options.fold_bytes, _DIRECT_FOLD_BYTES):
            self._log_placeholders(first + len(finals))
            self.record = self._fold(finals)
        else:
            self._log_finals(finals, {})
        if written * 16 >= self.options.cache_pool_bytes > 0:
            # the written chunks now fill TensorStore's cache, where bulk writes are seldom
            # read back soon: a fresh cache gives that memory back at once (an import's
            # RSS stays bounded by its read budget). Reopening costs a few milliseconds,
            # so smaller calls keep the cache
            self.arrays.fresh_cache()
        return [episode for episode, *_ in finals]

    def _log_finals(
        self,
        finals: Sequence[tuple[int, Mapping[str, npt.NDArray[Any]], bool, bool]],
        logged: Mapping[int, int],
    ) -> None:
        """Log finalized episodes (their rows from ``logged[id]`` on) in one commit."""
        if not finals:
            return
        start = self.tail.end
        entries = self._placeholders(max(e for e, *_ in finals))
        for episode, rows, terminated, truncated in finals:
            count = len(next(iter(rows.values())))
            entries.append(
                self._entry(episode, rows, logged.get(episode, 0), start, terminated, truncated)
            )
            start += count
        self.log.append(entries)  # the commit: memory follows only once it is done
        for entry in entries:
            state = self.tail.ongoing.get(entry.id)
            if entry.ongoing and state is not None:
                state.logged = entry.rows
        for episode, rows, terminated, truncated in finals:
            if self.tail.ongoing.pop(episode, None) is None:
                self.index.add_ongoing(rows.keys(), 1)  # a new id, finalized below
            row_start = self.tail.add(episode, rows, terminated=terminated, truncated=truncated)
            count = len(next(iter(rows.values())))
            self.index.set_finalized(
                episode, row_start, count - 1, terminated=terminated, truncated=truncated
            )
        if self.tail.nbytes >= self.options.fold_bytes:
            self.record = self._fold()

    def _entry(
        self,
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
                self.layouts[key].encode(values[first:]).data.cast("B")
                for key, values in rows.items()
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

    def _placeholders(self, below: int) -> list[LogEntry]:
        """Entries of ongoing episodes below ``below`` that the log does not hold yet.

        Logged with the finalized episodes above them (at least their reset row), so that
        episode ids stay contiguous after a crash.
        """
        return [
            self._entry(e, state.rows(), 0, -1, False, False, ongoing=True)
            for e, state in sorted(self.tail.ongoing.items())
            if e < below and not state.logged
        ]

    def _log_placeholders(self, below: int) -> None:
        entries = self._placeholders(below)
        if entries:
            self.log.append(entries)
            for entry in entries:
                self.tail.ongoing[entry.id].logged = entry.rows

    def _fold(self, extra: Sequence[Any] = ()) -> CommitRecord:
        return fold(self.arrays, self.index, self.tail, self.log, self.guard, self.record, extra)

    def flush(self) -> None:
        """A sync point: log ongoing episodes' new rows, fold the tail, sync the log."""
        if not self.writable:
            return
        self.check()
        entries = [
            self._entry(e, state.rows(), state.logged, -1, False, False, ongoing=True)
            for e, state in sorted(self.tail.ongoing.items())
            if len(state) > state.logged
        ]
        if entries:
            self.log.append(entries)
            for entry in entries:
                self.tail.ongoing[entry.id].logged = entry.rows
        self.record = self._fold()
        self.log.sync()

    # -- reads ----------------------------------------------------------------------------

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows ``[start, stop)`` of one episode."""
        self.check()
        return read_rows(self, episode, start, stop, fields)

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows, coalesced per chunk."""
        self.check()
        return gather_rows(self, request)

    def refresh(self) -> None:
        """Adopt the newest commit and log: new and changed episodes become visible.

        The commit record is read before and after the log's snapshot: equal, the
        snapshot was taken after that fold and before any next one, so together they
        name every episode exactly once; a fold in between means another round.
        """
        self.check()
        if os.getpid() != self.pid:
            raise DatasetStateError(
                "refresh() is not available in a fork()ed child: it reads the snapshot it "
                "inherited; refresh in the parent before starting workers"
            )
        if self.writable:
            return  # the one writer's memory is always the newest state
        record = self.read_record()
        if record.generation != self.record.generation:
            self.adopt_record(record)
        elif self.remote is not None or not self.log.changed():
            return
        if self.remote is None:  # on object storage the log is the writer's, local to it
            self.adopt_snapshot()

    def adopt_record(self, record: CommitRecord) -> None:
        """A reader moves to a newer commit record: arrays, index, what left the tail."""
        old = self.record
        self.arrays.open()
        # entries from the first that may have changed: new ids, or unfolded ones
        unfolded = np.flatnonzero(self.index.ongoing.view()[: old.episodes]).tolist()
        self.load_index(record, min([old.episodes, *unfolded]))
        self.tail.rebase(record.rows)
        for episode in [e for e in self.tail.ongoing if e < record.episodes]:
            if not self.index.ongoing.data[episode]:
                del self.tail.ongoing[episode]  # finalized and folded since

    def adopt_snapshot(self) -> list[int]:
        """:meth:`adopt_log`; a reader retries until no fold happened around it.

        The commit record is read before and after the log's snapshot: equal, the
        snapshot was taken after that fold and before any next one, so together they
        name every episode exactly once; a fold in between (which may have taken
        episodes out of the log) means another round with the newer record.
        """
        while True:
            try:
                stale = self.adopt_log()
            except EpisodataError:
                if self.writable or self.read_record().generation == self.record.generation:
                    raise
            else:
                if self.writable or self.read_record().generation == self.record.generation:
                    return stale
            self.adopt_record(self.read_record())

    def verify(self) -> list[str]:
        """Every damaged file, chunk or episode; see :mod:`episodata_zarr._verify`."""
        self.check()
        if os.getpid() != self.pid:
            raise DatasetStateError("verify() is not available in a fork()ed child")
        from episodata_zarr._verify import verify

        return verify(self)

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and fold a writer, trim its arrays, release every handle."""
        if self.closed:
            return
        if self.helper is not None and self.helper[0] == os.getpid():
            self.helper[1].close()
        self.helper = None
        if self.writable and os.getpid() == self.pid:
            self.flush()
            self.arrays.trim(self.record.rows, self.record.episodes)
        if os.getpid() == self.pid:
            self.log.close()
            if self.remote is not None:
                if self.writable:
                    prune_commits(key_value(self.remote))
                remove_staging(self.folder)
        self.closed = True
        self.arrays.close()
        self.tail = Tail(self.layouts, self.record.rows)

"""The zarr backend's engine: log -> fold -> arrays, behind one :class:`ZarrStore`.

- :class:`~episodata_zarr._log.EpisodeLog` (``log.sqlite``): every finalized episode,
  and every flushed prefix of an ongoing one, is one SQLite commit;
- :class:`~episodata_zarr._tail.Tail`: those episodes' rows in memory, where reads find
  them (the writer keeps them as it logs; a reader loads them at ``refresh()``);
- :func:`~episodata_zarr._fold.fold`: moves the tail into the arrays in one batch, at
  ``fold_bytes``, ``flush()`` and ``close()``, and publishes ``commit.json``;
- :class:`~episodata_zarr._arrays.Arrays`: the TensorStore handles of the Zarr arrays;
- :class:`~episodata_zarr._table.EpisodeIndex`: lengths, flags and rows of every episode.

The store's parts, one module each: opening and creating (``_open``), the write path
(``_writes``), reads (``_reads``), adopting commit records and the log (``_refresh``),
recovery after a crashed writer (``_recover``), checks (``_verify``). This class holds
the state they share and the per-step methods, where a call less counts.

Only ever imported from inside :class:`episodata_zarr.ZarrBackend`'s methods, so that
``import episodata_zarr`` stays light.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from episodata_core.errors import DatasetStateError
from episodata_core.location import Url, key_value, resolve
from episodata_zarr import _open, _reads, _recover, _refresh, _writes
from episodata_zarr._arrays import Arrays
from episodata_zarr._commit import read_commit
from episodata_zarr._disk import ChunkGuard
from episodata_zarr._layout import IndexLayout
from episodata_zarr._log import EpisodeLog
from episodata_zarr._objects import prune_commits, read_remote_commit, remove_staging
from episodata_zarr._options import worker_share
from episodata_zarr._table import EpisodeIndex
from episodata_zarr._tail import Ongoing, Tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from episodata_core.location import Location
    from episodata_core.protocols import EpisodeRows, EpisodeTable, GatherRequest, Rows
    from episodata_core.schema import DatasetSchema
    from episodata_zarr._commit import CommitRecord
    from episodata_zarr._forked import ForkedReader
    from episodata_zarr._layout import FieldLayout
    from episodata_zarr._options import ZarrOptions

__all__ = ["LOADED_IN", "ZarrStore"]

LOADED_IN = os.getpid()
"""The process that imported TensorStore; a fork() child of it must not touch TensorStore."""

_THIS_PROCESS = [LOADED_IN]  # kept current by a fork hook: os.getpid() per step costs 2 us
os.register_at_fork(after_in_child=lambda: _THIS_PROCESS.__setitem__(0, os.getpid()))


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

    # -- creation and opening (``_open``) -----------------------------------------------

    @classmethod
    def create(cls, schema: DatasetSchema, location: str, options: ZarrOptions) -> ZarrStore:
        """Write an empty dataset into ``location`` (an empty or missing folder, or prefix)."""
        return _open.create(cls, schema, location, options)

    @classmethod
    def open(cls, location: str, options: ZarrOptions, *, writable: bool) -> ZarrStore:
        """Open a dataset folder or URL; a writable open also recovers after a crash."""
        where = resolve(location)
        if where.remote:
            return _open.open_remote(cls, where, options, writable=writable)
        return _open.open_local(cls, location, options, writable=writable)

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
        _refresh.load_index(self, record, first)

    def adopt_snapshot(self) -> list[int]:
        """Take the log beyond the arrays into index and tail; the stale entries' ids."""
        return _refresh.adopt_snapshot(self)

    def recover(self, stale: list[int]) -> None:
        """After a crashed writer: drop what no commit covers; report what was found."""
        _recover.recover(self, stale)

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

    # -- writes (memory here; the log and the arrays in ``_writes``) -----------------------

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
        _writes.log_finals(
            self, [(episode, state.rows(), terminated, truncated)], {episode: state.logged}
        )

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Log a finalized episode; crash-durable on return."""
        self.check(write=True)
        episode = len(self.index)
        _writes.log_finals(self, [(episode, rows, terminated, truncated)], {})
        return episode

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Finalized episodes in one commit: all of them (or none) after a crash."""
        return _writes.add_episodes(self, episodes)

    def flush(self) -> None:
        """A sync point: log ongoing episodes' new rows, fold the tail, sync the log."""
        _writes.flush(self)

    # -- reads ----------------------------------------------------------------------------

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows ``[start, stop)`` of one episode."""
        self.check()
        return _reads.read_rows(self, episode, start, stop, fields)

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows, coalesced per chunk."""
        self.check()
        return _reads.gather_rows(self, request)

    def refresh(self) -> None:
        """Adopt the newest commit and log: new and changed episodes become visible."""
        _refresh.refresh(self)

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

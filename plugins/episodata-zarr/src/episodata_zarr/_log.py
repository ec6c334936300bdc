"""The episode log: episodes not yet folded into the arrays, one SQLite commit each.

``log.sqlite`` in the dataset folder is an SQLite database in WAL mode (standard
library ``sqlite3``). SQLite gives what a log needs and what we would otherwise write
ourselves: atomic commits, recovery after a crash at any instant, checksummed WAL
frames, one writer with any number of readers in other processes, each reading one
consistent snapshot. Two tables::

    episodes(id, row_start, rows, terminated, truncated, ongoing, fields)
        one row per logged episode: ``rows`` rows logged (L+1 once finalized), the row of
        the data arrays it takes when folded (-1 while ongoing), its flags, and the JSON
        list of the fields it stores
    blocks(key, episode, first, count, crc32, data)
        rows ``[first, first + count)`` of every field the episode stores: each field's
        rows as C-ordered bytes in its storage dtype (as in the arrays), one field after
        another in ``fields`` order, with their zlib CRC-32; ``key`` is
        ``episode * 2**32 + first``, so an episode's blocks are in order (a flushed
        prefix, then the rest). A rowid key keeps a block's bytes in its table page:
        one commit writes two or three pages

Durability (storage-engine.md): commits run with ``synchronous=NORMAL``, so a commit is
in the operating system's hands when it returns (it survives a killed process) and on
the disk once the WAL is synced: at :meth:`EpisodeLog.sync` (``flush()``, ``close()``,
before a fold relies on it) and, from a background thread, at most ``sync_interval``
seconds after a commit. SQLite's own WAL mode with ``synchronous=NORMAL`` makes the same
trade. ``durability="sync"`` commits with ``synchronous=FULL``: the WAL is synced before
each commit returns.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from episodata_core.errors import EpisodataError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from pathlib import Path

__all__ = ["LOG_NAME", "Block", "EpisodeLog", "LogEntry"]

LOG_NAME = "log.sqlite"
_CHECKPOINT_PAGES = 16384  # of 4 KiB: the WAL is copied into the database at 64 MiB
_SYNCED_CHECKPOINT_PAGES = 1000  # durability="sync": at 4 MiB, SQLite's default
_FORMAT = "episodata-zarr-log"
_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
    id INTEGER PRIMARY KEY,
    row_start INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    terminated INTEGER NOT NULL,
    truncated INTEGER NOT NULL,
    ongoing INTEGER NOT NULL,
    fields TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS blocks (
    key INTEGER PRIMARY KEY,
    episode INTEGER NOT NULL,
    first INTEGER NOT NULL,
    count INTEGER NOT NULL,
    crc32 INTEGER NOT NULL,
    data BLOB NOT NULL
);
"""


class Block(NamedTuple):
    """Rows ``[first, first + rows)`` of every field of one episode, as stored bytes."""

    first: int
    rows: int
    data: bytes
    crc32: int  # zlib CRC-32 of data


@dataclass
class LogEntry:
    """One logged episode: what its ``episodes`` row says (and, to write, new blocks)."""

    id: int
    row_start: int
    rows: int
    terminated: bool
    truncated: bool
    ongoing: bool
    fields: tuple[str, ...]
    blocks: list[Block] = field(default_factory=list)


class EpisodeLog:
    """``log.sqlite`` of one dataset folder: the writer's appends or a reader's snapshots."""

    def __init__(
        self,
        folder: Path,
        *,
        writable: bool,
        sync_each: bool = False,
        sync_interval: float = 1.0,
        fsync: bool = True,
    ) -> None:
        self.path = folder / LOG_NAME
        self.writable = writable
        self.fsync = fsync
        self._connection: sqlite3.Connection | None = None
        self._syncer: _Syncer | None = None
        # the log's files as of the last snapshot: a reader skips reads that find nothing new
        self._seen: tuple[tuple[int, int, int] | None, ...] | None = None
        self.interrupted = False  # the last writer did not close (it crashed or was killed)
        if writable:
            created = not self.path.exists()
            connection = self._connect()
            if created and fsync:
                # a new file's name is durable once its folder is synced; SQLite syncs
                # the folder for a new WAL, not for a new database file
                descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)
            previous = connection.execute("SELECT value FROM meta WHERE key = 'writer'").fetchone()
            self.interrupted = previous is not None and previous[0] == "open"
            connection.execute("INSERT OR REPLACE INTO meta VALUES ('writer', 'open')")
            synchronous = "FULL" if sync_each and fsync else ("NORMAL" if fsync else "OFF")
            connection.execute(f"PRAGMA synchronous={synchronous}")
            # measured: without a sync per commit, checkpoints (each syncs the WAL and the
            # database) every 4 MB of WAL, SQLite's default, cost 14-22 us per commit, and
            # every 64 MB little (a fold empties the log anyway); with a sync per commit,
            # a WAL that stays small is rewritten in place, and an fdatasync that need not
            # record a new file size is cheaper: 170 instead of 225 us per commit
            pages = _SYNCED_CHECKPOINT_PAGES if sync_each else _CHECKPOINT_PAGES
            connection.execute(f"PRAGMA wal_autocheckpoint={pages}")
            if fsync and not sync_each:
                self._syncer = _Syncer(self.path, sync_interval)

    # -- the connection -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """The writer's connection (kept open), or a reader's for one snapshot."""
        if self._connection is not None:
            return self._connection
        try:
            if self.writable:
                connection = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False
                )
                connection.execute("PRAGMA journal_mode=WAL")
                # tables and format in one transaction: a reader sees all or nothing
                with _Transaction(connection):
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            connection.execute(statement)
                    self._check_format(connection, create=True)
                self._connection = connection
            else:
                # mode=ro: a reader never creates or changes the file; the format is
                # checked in each snapshot (a new log may have no tables yet)
                connection = sqlite3.connect(
                    f"file:{self.path}?mode=ro", uri=True, isolation_level=None
                )
        except sqlite3.DatabaseError as err:
            raise EpisodataError(
                f"{self.path}: the episode log cannot be opened ({err}); it holds the episodes "
                "not yet folded into the arrays: restore the dataset from a copy"
            ) from err
        return connection

    def _check_format(self, connection: sqlite3.Connection, *, create: bool) -> None:
        stored = dict(connection.execute("SELECT key, value FROM meta").fetchall())
        if not stored and create:
            connection.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [("format", _FORMAT), ("version", str(_VERSION))],
            )
            return
        if stored.get("format") != _FORMAT:
            raise EpisodataError(
                f"{self.path}: not an episodata episode log (format {stored.get('format')!r})"
            )
        if int(stored.get("version", "0")) > _VERSION:
            raise EpisodataError(
                f"{self.path}: episode log version {stored['version']} is newer than the "
                f"{_VERSION} this episodata-zarr reads; upgrade episodata-zarr"
            )

    def exists(self) -> bool:
        """Whether the folder has a log (a closed dataset whose log was empty has none)."""
        return self._connection is not None or self.path.exists()

    # -- the writer -----------------------------------------------------------------------

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Log episodes (new, grown or finalized) in one atomic commit."""
        connection = self._connect()
        rows = [
            (
                e.id,
                e.row_start,
                e.rows,
                int(e.terminated),
                int(e.truncated),
                int(e.ongoing),
                _fields_json(e.fields),
            )
            for e in entries
        ]
        blocks = [
            ((e.id << 32) + b.first, e.id, b.first, b.rows, b.crc32, b.data)
            for e in entries
            for b in e.blocks
        ]
        with _Transaction(connection):
            connection.executemany("INSERT OR REPLACE INTO episodes VALUES (?,?,?,?,?,?,?)", rows)
            connection.executemany("INSERT OR REPLACE INTO blocks VALUES (?,?,?,?,?,?)", blocks)
        if self._syncer is not None:
            self._syncer.committed()

    def forget(self, episodes: Iterable[int]) -> None:
        """Remove folded episodes (their rows now live in the arrays)."""
        ids = [(int(e),) for e in episodes]
        if not ids:
            return
        connection = self._connect()
        with _Transaction(connection):
            # one statement per table: a fold forgets thousands of episodes at once
            connection.execute("CREATE TEMP TABLE IF NOT EXISTS folded (id INTEGER PRIMARY KEY)")
            connection.executemany("INSERT OR IGNORE INTO folded VALUES (?)", ids)
            connection.execute("DELETE FROM blocks WHERE episode IN (SELECT id FROM folded)")
            connection.execute("DELETE FROM episodes WHERE id IN (SELECT id FROM folded)")
            connection.execute("DELETE FROM folded")
        if self._syncer is not None:
            self._syncer.committed()

    def sync(self) -> None:
        """Put every commit so far on the disk (a sync point)."""
        if self._syncer is not None:
            self._syncer.sync_now()

    def close(self) -> None:
        """Sync, empty the WAL into the database file, release the connection."""
        if self._syncer is not None:
            self._syncer.stop()
            self._syncer = None
        connection, self._connection = self._connection, None
        if connection is None:
            return
        connection.execute("INSERT OR REPLACE INTO meta VALUES ('writer', 'closed')")
        empty = connection.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == 0
        try:
            # the WAL back into the database file, and the WAL emptied
            busy = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.OperationalError:
            busy = 1
        connection.close()
        if empty and not busy:
            # nothing left to fold: a closed dataset is plain Zarr v3. A reader that still
            # reads the removed file sees an empty log, which is the truth
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.path}{suffix}")

    # -- snapshots ------------------------------------------------------------------------

    def _signature(self) -> tuple[tuple[int, int, int] | None, ...]:
        signature: list[tuple[int, int, int] | None] = []
        for suffix in ("", "-wal"):
            try:
                status = os.stat(f"{self.path}{suffix}")
            except FileNotFoundError:
                signature.append(None)
                continue
            signature.append((status.st_ino, status.st_size, status.st_mtime_ns))
        return tuple(signature)

    def changed(self) -> bool:
        """Whether the log's files changed since the last :meth:`read` (two ``stat``s)."""
        return self.writable or self._signature() != self._seen

    def read(self, need: Callable[[LogEntry], int | None] | None = None) -> list[LogEntry]:
        """Every logged episode, in one snapshot, with the blocks the caller lacks.

        ``need(entry)`` says from which row on the caller lacks an episode's rows (its
        blocks from there on come with the entry), or None for none; without ``need``,
        every block comes. Blocks are checked against their CRC-32: damaged bytes raise,
        never return.
        """
        if not self.writable:
            self._seen = self._signature()  # before the snapshot: a later commit is news
        if not self.exists():
            return []
        try:
            connection = self._connect()
        except EpisodataError:
            if not self.exists():
                return []  # a closing writer removed its empty log meanwhile
            raise
        try:
            return self._read(connection, need)
        except sqlite3.DatabaseError as err:
            raise EpisodataError(
                f"{self.path}: the episode log cannot be read ({err}); it holds the episodes "
                "not yet folded into the arrays: restore the dataset from a copy"
            ) from err
        finally:
            if connection is not self._connection:
                connection.close()

    def _read(
        self, connection: sqlite3.Connection, need: Callable[[LogEntry], int | None] | None
    ) -> list[LogEntry]:
        with _Transaction(connection, read=True):
            tables = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if "episodes" not in {name for (name,) in tables}:
                return []  # a writer is creating the log (its tables come in one commit)
            self._check_format(connection, create=False)
            entries = [
                LogEntry(i, s, n, bool(t), bool(u), bool(o), tuple(json.loads(f)))
                for i, s, n, t, u, o, f in connection.execute(
                    "SELECT id, row_start, rows, terminated, truncated, ongoing, fields "
                    "FROM episodes ORDER BY id"
                )
            ]
            for entry in entries:
                first = 0 if need is None else need(entry)
                if first is not None:
                    entry.blocks = list(self._blocks(connection, entry.id, first))
        return entries

    def _blocks(self, connection: sqlite3.Connection, episode: int, first: int) -> Iterator[Block]:
        query = (
            "SELECT first, count, crc32, data FROM blocks "
            "WHERE key >= ? AND key < ? AND first + count > ? ORDER BY key"
        )
        bounds = (episode << 32, (episode + 1) << 32, first)
        for start, count, crc, data in connection.execute(query, bounds):
            if zlib.crc32(data) != crc:
                raise EpisodataError(
                    f"{self.path}: the logged rows {start}-{start + count} of episode {episode} "
                    "differ from their checksum; the log is damaged (run "
                    "`episodata verify` for a full report)"
                )
            yield Block(start, count, data, crc)


@functools.lru_cache(maxsize=64)
def _fields_json(fields: tuple[str, ...]) -> str:
    # an episode's field list is one of a few: its JSON once
    return json.dumps(fields)


class _Transaction:
    """``BEGIN`` (IMMEDIATE for writes) ... ``COMMIT``, rolled back on any error."""

    def __init__(self, connection: sqlite3.Connection, *, read: bool = False) -> None:
        self.connection = connection
        self.read = read

    def __enter__(self) -> None:
        self.connection.execute("BEGIN" if self.read else "BEGIN IMMEDIATE")

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if kind is None:
            self.connection.execute("COMMIT")
        else:
            self.connection.execute("ROLLBACK")


class _Syncer:
    """Syncs the WAL at most ``interval`` seconds after a commit, from a daemon thread.

    ``fsync`` of the ``-wal`` file through a descriptor of its own: it flushes the
    file's pages whoever wrote them, and never touches the writer's connection. WAL
    frames carry checksums and commits are a prefix, so a sync in the middle of a
    commit leaves SQLite's recovery a clean prefix of commits.
    """

    def __init__(self, database: Path, interval: float) -> None:
        self.wal = f"{database}-wal"
        self.interval = interval
        self.lock = threading.Condition()
        self.dirty_since: float | None = None
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="episodata-log-sync", daemon=True)
        self.thread.start()

    def committed(self) -> None:
        with self.lock:
            if self.dirty_since is None:
                self.dirty_since = time.monotonic()
                self.lock.notify()

    def sync_now(self) -> None:
        with self.lock:
            dirty = self.dirty_since is not None
            self.dirty_since = None
        if dirty:
            self._fsync()

    def stop(self) -> None:
        self.sync_now()
        with self.lock:
            self.stopped = True
            self.lock.notify()
        self.thread.join()

    def _fsync(self) -> None:
        try:
            descriptor = os.open(self.wal, os.O_RDONLY)
        except FileNotFoundError:
            return  # checkpointed and removed: everything is in the database file
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def _run(self) -> None:
        while True:
            with self.lock:
                while self.dirty_since is None and not self.stopped:
                    self.lock.wait()
                if self.stopped or self.dirty_since is None:
                    return
                due = self.dirty_since + self.interval
                wait = due - time.monotonic()
                if wait > 0:
                    self.lock.wait(wait)
                    continue
                self.dirty_since = None
            self._fsync()

"""The engine behind :class:`~episodata_plugin_example.HDF5Backend`: one open dataset.

A dataset folder holds, besides the core's ``manifest.json`` and writer lock, ``data.h5``
(every finalized episode; layout in :mod:`._format`) and ``ongoing.bin`` (ongoing
episodes as of the last flush; :mod:`._spill`).

Commit protocol (``finalize_episode``/``add_episode``; one writer, in SWMR mode):

1. append the episode's rows after the last committed row of every field and its
   record after the last committed record; flush the file (and fsync);
2. write the new counts into ``/commit``; flush (and fsync).

Readers use only the first ``count`` records and rows, so an episode is invisible until
step 2 ends and complete once it is visible. Committed bytes are never rewritten with
other values: chunks have no filters, so appending into a partly filled chunk rewrites
its committed rows with the bytes they already hold. A writable open after a crash
rebuilds the file first (:mod:`._integrity`).

Readers open the file in SWMR mode while a writer holds it (the superblock flag says
so) and in plain mode otherwise. The choice matters for damaged files: an SWMR reader
retries every metadata checksum failure for a very long time (it cannot tell damage
from a racing writer), a plain reader fails at once.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
from episodata_core.authoring import Growable, check_rows
from episodata_core.errors import (
    DatasetStateError,
    EpisodataError,
    FieldNotFoundError,
    IntegrityError,
    SchemaError,
)
from episodata_core.location import fsync_directory

from episodata_plugin_example._format import (
    DATA_NAME,
    HDF5_ERRORS,
    READ_ATTEMPTS,
    READ_PAUSE_S,
    Layout,
    check_layout,
    chunk_rows_for,
    commit_array,
    create_file,
    damaged,
    digest,
    field_dataset,
    field_row_bytes,
    from_stored,
    put_records,
    read_commit,
    read_records,
    reading_hdf5,
    record_check,
    to_stored,
    writer_flags,
)
from episodata_plugin_example._index import ONGOING, EpisodeIndex
from episodata_plugin_example._integrity import rebuild, verify_file
from episodata_plugin_example._reads import join_rows, read_sorted
from episodata_plugin_example._spill import SPILL_NAME, SpillFile

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    import numpy.typing as npt
    from episodata_core.protocols import EpisodeTable, GatherRequest, Rows
    from episodata_core.schema import DatasetSchema, FieldSpec

    from episodata_plugin_example import HDF5Options

__all__ = ["Store"]


class Store:
    """One open dataset folder: the ``data.h5`` handle, the episode index, ongoing rows."""

    def __init__(
        self, root: Path, schema: DatasetSchema, options: HDF5Options, *, writable: bool
    ) -> None:
        self.root = root
        self.schema = schema
        self._options = options
        self._writable = writable
        self._specs = {spec.qualified_key: spec for spec in schema}
        self._layout = Layout.of(schema)
        self._index = EpisodeIndex(self._layout.optional)
        self._file: h5py.File | None = None
        self._swmr = False
        self._file_stat: tuple[int, int, int] = (0, 0, 0)
        self._rows: dict[str, h5py.Dataset] = {}
        self._join: dict[str, int] = {}
        self._count = 0
        self._total = 0
        self._records = np.zeros(0, dtype=self._layout.record)
        # writer: ongoing rows in memory, and how many rows of each the spill holds
        self._ongoing: dict[int, dict[str, Growable]] = {}
        self._spilled: dict[int, int] = {}
        # reader: ongoing rows as of the spill it last read
        self._spill_rows: dict[int, dict[str, npt.NDArray[Any]]] = {}
        self._spill = SpillFile(root, self._specs, durable=options.durable)
        self._closed = False

    @property
    def path(self) -> Path:
        """Where ``data.h5`` is."""
        return self.root / DATA_NAME

    @classmethod
    def create(cls, root: Path, schema: DatasetSchema, options: HDF5Options) -> Store:
        """Lay out an empty dataset in ``root`` and open it for writing."""
        store = cls(root, schema, options, writable=True)
        if store.path.exists():
            raise DatasetStateError(f"{str(root)!r} already holds {DATA_NAME}; open it instead")
        root.mkdir(parents=True, exist_ok=True)
        chunk_rows = {
            key: chunk_rows_for(field_row_bytes(spec), options.chunk_bytes)
            for key, spec in store._specs.items()
        }
        chunk_rows["<episodes>"] = chunk_rows_for(store._layout.record.itemsize, 64 * 1024)
        # built under a temporary name, so data.h5 is never half-initialized
        temporary = root / f".{DATA_NAME}.create.tmp"
        create_file(temporary, schema, store._layout, chunk_rows)
        os.replace(temporary, store.path)
        fsync_directory(root)
        store._open_writer()
        return store

    @classmethod
    def open(
        cls, root: Path, schema: DatasetSchema, options: HDF5Options, *, writable: bool
    ) -> Store:
        """Open a dataset folder; a writable open first repairs what a killed writer left."""
        store = cls(root, schema, options, writable=writable)
        if writable:
            for leftover in (*root.glob(f".{DATA_NAME}.*.tmp"), *root.glob(f".{SPILL_NAME}.*")):
                leftover.unlink(missing_ok=True)
            if writer_flags(store.path):
                rebuild(root, schema, store._layout)
            store._open_writer()
        else:
            store._open_reader()
        return store

    def _open_writer(self) -> None:
        access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        access.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
        access.set_meta_block_size(0)
        # the core's writer lock guards against a second writer; readers never lock
        access.set_file_locking(False, True)
        cache = list(access.get_cache())
        cache[2] = self._options.cache_bytes
        access.set_cache(*cache)
        # straight into SWMR mode (h5py's File cannot): the superblock then never says
        # "open for writing" without "SWMR", which would shut SWMR readers out after a crash
        flags = h5py.h5f.ACC_RDWR | h5py.h5f.ACC_SWMR_WRITE
        try:
            file = h5py.File(h5py.h5f.open(os.fsencode(self.path), flags, fapl=access))
        except OSError as err:
            if "already open" in str(err):
                raise DatasetStateError(
                    f"{DATA_NAME} in {str(self.root)!r} is open read-only elsewhere in this "
                    "process; close other handles of the dataset before writing to it"
                ) from err
            raise damaged(err) from err
        self._attach(file, swmr=True)
        # trim what a failed commit left behind
        for dataset in self._rows.values():
            if dataset.shape[0] != self._total:
                dataset.resize(self._total, axis=0)
        if file["episodes"].shape[0] != self._count:
            file["episodes"].resize((self._count,))
        self._load_spill_into_writer()

    def _open_reader(self) -> None:
        self._open_file_for_reading()
        self._refresh_reader_index(force=True)

    def _attach(self, file: h5py.File, *, swmr: bool) -> None:
        """Take ``file`` as the open handle: check its layout, read the committed state."""
        try:
            with reading_hdf5():
                check_layout(file, self.schema)
                count, total = read_commit(file["commit"])
                records = read_records(file["episodes"], self._layout, count, total)
                rows = {key: field_dataset(file, self._specs[key]) for key in self._layout.keys}
        except BaseException:
            file.close()
            raise
        self._file = file
        self._swmr = swmr
        stat = self.path.stat()
        self._file_stat = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        self._rows = rows
        self._join = {key: join_rows(dataset) for key, dataset in rows.items()}
        self._count, self._total, self._records = count, total, records
        if self._writable:
            self._index = EpisodeIndex(self._layout.optional)
            put_records(self._index, records, self._layout)

    def _load_spill_into_writer(self) -> None:
        spill = self._spill.read_if_changed() or {}
        for episode, rows in sorted(spill.items()):
            if episode < len(self._index) and self._index.known.data[episode]:
                continue  # finalized after that flush; the record supersedes the spill
            num_rows = len(next(iter(rows.values())))
            buffers = {
                key: Growable.copy_of(block, max(16, num_rows)) for key, block in rows.items()
            }
            self._index.put(
                episode,
                row_start=ONGOING,
                length=num_rows - 1,
                terminated=False,
                truncated=False,
                fields=rows.keys(),
            )
            self._ongoing[episode] = buffers
            self._spilled[episode] = num_rows
        gap = self._index.first_gap()
        if gap is not None:
            raise IntegrityError(
                f"episode {gap} is neither committed in {DATA_NAME} nor spilled to "
                f"{SPILL_NAME}; one of the files is damaged or was removed"
            )

    def _write_spill(self) -> None:
        self._spill.write(
            {
                episode: {key: grow.view() for key, grow in buffers.items()}
                for episode, buffers in self._ongoing.items()
            }
        )
        self._spilled = {episode: self._num_rows(episode) for episode in self._ongoing}

    def flush(self) -> None:
        """Rewrite the spill if any ongoing episode changed since the last one."""
        self._check_open()
        if not self._writable:
            return
        now = {episode: self._num_rows(episode) for episode in self._ongoing}
        if now != self._spilled or (not now and self._spill.exists()):
            self._write_spill()

    def refresh(self) -> None:
        """Read commits and the spill again (readers); the writer has nothing to pick up."""
        self._check_open()
        if not self._writable:
            self._refresh_reader_index()

    def _refresh_reader_index(self, *, force: bool = False) -> None:
        for _ in range(READ_ATTEMPTS):
            # the spill first: a commit that a newer spill made safe is then never missed
            spill = self._spill.read_if_changed()
            changed = self._refresh_commits()
            if not (force or changed or spill is not None):
                return
            force = True
            if spill is not None:
                self._spill_rows = spill
            index = EpisodeIndex(self._layout.optional)
            put_records(index, self._records, self._layout)
            for episode, rows in self._spill_rows.items():
                if episode < len(index) and index.known.data[episode]:
                    continue
                index.put(
                    episode,
                    row_start=ONGOING,
                    length=len(next(iter(rows.values()))) - 1,
                    terminated=False,
                    truncated=False,
                    fields=rows.keys(),
                )
            self._index = index
            if index.first_gap() is None:
                return
            self._spill.forget()
            time.sleep(READ_PAUSE_S)
        raise IntegrityError(
            f"episode {self._index.first_gap()} is neither committed in {DATA_NAME} nor "
            f"spilled to {SPILL_NAME}; one of the files is damaged or was removed"
        )

    def _refresh_commits(self) -> bool:
        """Pick up new commit records; ``True`` when there were some."""
        assert self._file is not None
        stat = self.path.stat()
        replaced = stat.st_ino != self._file_stat[0]
        if replaced or (not self._swmr and (stat.st_size, stat.st_mtime_ns) != self._file_stat[1:]):
            # a recovery replaced the file, or a plain handle went stale: open again
            before = self._count
            self._reopen_reader()
            return self._count != before
        with reading_hdf5():
            commit = self._file["commit"]
            if self._swmr:
                commit.refresh()
            count, total = read_commit(commit)
            if count == self._count:
                return False
            if count < self._count:
                raise IntegrityError(
                    f"{DATA_NAME}: the commit counter went back from {self._count} to {count}"
                )
            records_ds = self._file["episodes"]
            if self._swmr:
                records_ds.refresh()
                for dataset in self._rows.values():
                    dataset.refresh()
            records = read_records(records_ds, self._layout, count, total, self._records)
        self._records = np.concatenate([self._records, records])
        self._count, self._total = count, total
        return True

    def _reopen_reader(self) -> None:
        known = self._records
        assert self._file is not None
        self._file.close()
        self._file = None
        self._open_file_for_reading()
        if self._count < len(known) or not np.array_equal(self._records[: len(known)], known):
            raise IntegrityError(f"{DATA_NAME} was replaced by a file that lost committed episodes")

    def _open_file_for_reading(self) -> None:
        for _ in range(2):
            swmr = writer_flags(self.path) != 0
            try:
                file = h5py.File(
                    self.path,
                    "r",
                    swmr=swmr,
                    locking=False,
                    rdcc_nbytes=self._options.cache_bytes,
                )
            except OSError as err:
                if swmr or not writer_flags(self.path):
                    raise damaged(err) from err
                continue
            self._attach(file, swmr=swmr)
            return
        raise DatasetStateError(f"{DATA_NAME}: could not open it while a writer started")

    def episode_table(self) -> EpisodeTable:
        """Views of the per-episode index, valid until the next write or refresh."""
        self._check_open()
        return self._index.table()

    def _num_rows(self, episode: int) -> int:
        return int(self._index.length.data[episode]) + 1

    def start_episode(self, rows: Rows) -> int:
        """Begin an ongoing episode in memory; nothing is written until a flush or commit."""
        self._check_writable()
        num_rows = check_rows(rows, self._specs, "a new episode")
        buffers = {key: Growable.copy_of(block, max(16, num_rows)) for key, block in rows.items()}
        episode = len(self._index)
        self._index.put(
            episode,
            row_start=ONGOING,
            length=num_rows - 1,
            terminated=False,
            truncated=False,
            fields=rows.keys(),
        )
        self._ongoing[episode] = buffers
        return episode

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Append rows to an ongoing episode in memory."""
        buffers = self._ongoing_buffers(episode)
        if rows.keys() != buffers.keys():
            raise SchemaError(
                f"episode {episode}: rows for {sorted(rows)} do not match the episode's "
                f"fields {sorted(buffers)}"
            )
        count = check_rows(rows, self._specs, f"episode {episode}")
        for key, block in rows.items():
            buffers[key].extend(block)
        self._index.length.data[episode] += count

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Commit an ongoing episode to ``data.h5``; durable when this returns."""
        buffers = self._ongoing_buffers(episode)
        rows = {key: grow.view() for key, grow in buffers.items()}
        start = self._commit(episode, rows, terminated=terminated, truncated=truncated)
        self._index.put(
            episode,
            row_start=start,
            length=self._num_rows(episode) - 1,
            terminated=terminated,
            truncated=truncated,
            fields=rows.keys(),
        )
        del self._ongoing[episode]

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Commit a complete episode to ``data.h5``; durable when this returns."""
        self._check_writable()
        num_rows = check_rows(rows, self._specs, "a new episode")
        episode = len(self._index)
        start = self._commit(episode, rows, terminated=terminated, truncated=truncated)
        self._index.put(
            episode,
            row_start=start,
            length=num_rows - 1,
            terminated=terminated,
            truncated=truncated,
            fields=rows.keys(),
        )
        return episode

    def _commit(self, episode: int, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Rows and record, flush, then the counter: the order readers and recovery use."""
        assert self._file is not None
        # ids stay contiguous across a crash: an earlier ongoing episode reaches the spill
        # before a later one becomes durable
        if any(earlier < episode and earlier not in self._spilled for earlier in self._ongoing):
            self._write_spill()
        num_rows = next(iter(rows.values())).shape[0]
        start, count = self._total, self._count
        record = np.zeros((), dtype=self._layout.record)
        record["episode"] = episode
        record["row_start"] = start
        record["num_rows"] = num_rows
        record["flags"] = int(terminated) | int(truncated) << 1
        if self._layout.optional:
            record["present"] = [key in rows for key in self._layout.optional]
        try:
            for column, key in enumerate(self._layout.keys):
                spec = self._specs[key]
                block = rows.get(key)
                if block is None:  # an absent optional field stores zero rows
                    block = np.zeros((num_rows, *spec.shape), dtype=spec.np_dtype)
                dataset = self._rows[key]
                dataset.resize(start + num_rows, axis=0)
                dataset[start : start + num_rows] = to_stored(spec, block)
                record["digest"][column] = digest(block)
            record["check"] = record_check(record)
            records = self._file["episodes"]
            records.resize((count + 1,))
            records[count] = record
            self._sync()
            self._file["commit"][:] = commit_array(count + 1, start + num_rows)
            self._sync()
        except BaseException:
            self._roll_back()
            raise
        self._count, self._total = count + 1, start + num_rows
        return start

    def _roll_back(self) -> None:
        """Best effort after a failed commit: shrink back to the committed extents."""
        assert self._file is not None
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            for dataset in self._rows.values():
                dataset.resize(self._total, axis=0)
            self._file["episodes"].resize((self._count,))
            self._file["commit"][:] = commit_array(self._count, self._total)
            self._sync()

    def _sync(self) -> None:
        assert self._file is not None
        self._file.flush()
        if self._options.durable:
            os.fsync(self._file.id.get_vfd_handle())

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows ``[start, stop)`` of one episode: one HDF5 read per field."""
        self._check_episode(episode)
        num_rows = self._num_rows(episode)
        if not 0 <= start <= stop <= num_rows:
            raise DatasetStateError(
                f"rows [{start}, {stop}) are outside episode {episode}, which has {num_rows}"
            )
        for key in fields:
            self._check_stored(episode, key)
        base = int(self._index.row_start.data[episode])
        if base == ONGOING:
            source = self._ongoing_rows(episode)
            return {key: _read_only(source[key][start:stop]) for key in fields}
        with reading_hdf5():
            return {
                key: _read_only(
                    from_stored(self._specs[key], self._rows[key][base + start : base + stop])
                )
                for key in fields
            }

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows: one sorted, coalesced HDF5 read per field for the batch."""
        self._check_open()
        for key in request.fields:
            self._spec(key)
        size = len(request)
        out = {
            key: np.zeros(
                (size, request.num_rows, *self._specs[key].shape),
                dtype=self._specs[key].np_dtype,
            )
            for key in request.fields
        }
        if size == 0:
            return out
        episodes = request.episodes
        if episodes.min() < 0 or episodes.max() >= len(self._index):
            raise DatasetStateError(
                f"the batch names episodes outside [0, {len(self._index)}) of this dataset"
            )
        steps = np.arange(request.num_rows, dtype=np.int64)
        within = steps[None, :] - request.offsets[:, None]
        valid = (within >= 0) & (within < request.counts[:, None])
        bases = self._index.row_start.view()[episodes]
        stored = np.flatnonzero(bases != ONGOING)
        if len(stored):
            # absolute row of every real position of every stored window, read once each
            where_b, where_t = np.nonzero(valid[stored])
            absolute = (bases + request.starts)[stored][where_b] + within[stored][where_b, where_t]
            unique, inverse = np.unique(absolute, return_inverse=True)
            with reading_hdf5():
                for key in request.fields:
                    raw = read_sorted(self._rows[key], unique, self._join[key])
                    values = from_stored(self._specs[key], raw)
                    out[key][stored[where_b], where_t] = values[inverse]
        for b in np.flatnonzero(bases == ONGOING):
            source = self._ongoing_rows(int(episodes[b]))
            start, count = int(request.starts[b]), int(request.counts[b])
            offset = int(request.offsets[b])
            for key in request.fields:
                if key in source:
                    out[key][b, offset : offset + count] = source[key][start : start + count]
        return out

    def _ongoing_rows(self, episode: int) -> Mapping[str, npt.NDArray[Any]]:
        if self._writable:
            return {key: grow.view() for key, grow in self._ongoing[episode].items()}
        return self._spill_rows[episode]

    def verify(self) -> list[str]:
        """Every mismatch between stored bytes and what was recorded when they were written."""
        self._check_open()
        problems: list[str] = []
        try:
            assert self._file is not None
            problems += verify_file(self._file, self._layout, swmr=self._swmr)
        except EpisodataError as err:
            problems.append(str(err))
        except HDF5_ERRORS as err:
            problems.append(f"{DATA_NAME}: HDF5 cannot read a structure: {err}")
        spill_problem = self._spill.problem()
        if spill_problem is not None:
            problems.append(spill_problem)
        return problems

    def close(self) -> None:
        """Spill ongoing episodes (writer) and close ``data.h5``."""
        if self._closed:
            return
        try:
            if self._writable and self._file is not None:
                self.flush()
        finally:
            if self._file is not None:
                self._file.close()
                self._file = None
            self._ongoing.clear()
            self._spill_rows.clear()
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise DatasetStateError("the dataset is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if not self._writable:
            raise DatasetStateError(
                f"{str(self.root)!r} was opened for reading; Dataset.open takes the writer "
                "lock and reopens it for writing at the first write"
            )

    def _check_episode(self, episode: int) -> None:
        self._check_open()
        if not 0 <= episode < len(self._index):
            raise DatasetStateError(
                f"episode {episode} does not exist (the dataset has {len(self._index)} episodes)"
            )

    def _ongoing_buffers(self, episode: int) -> dict[str, Growable]:
        self._check_writable()
        try:
            return self._ongoing[episode]
        except KeyError:
            raise DatasetStateError(f"episode {episode} is not ongoing") from None

    def _spec(self, key: str) -> FieldSpec:
        try:
            return self._specs[key]
        except KeyError:
            raise FieldNotFoundError(
                f"no field {key!r} in the schema (fields: {', '.join(self._specs)})"
            ) from None

    def _check_stored(self, episode: int, key: str) -> None:
        self._spec(key)
        if not self._index.stores(episode, key):
            raise FieldNotFoundError(f"episode {episode} does not store the optional field {key!r}")


def _read_only(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.flags.writeable = False
    return array

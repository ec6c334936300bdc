"""``NpzDirectoryBackend``: one compressed ``.npz`` archive per episode in a folder.

Finalizing an episode writes its archive once (temporary name, fsync, rename, folder
fsync) and appends one line to ``episodes.jsonl``: nothing whose size grows with the
number of episodes is rewritten. Ongoing episodes live in memory and are spilled to
``ongoing/`` by :meth:`flush`, each spill recorded with its checksum in the same log.
The folder layout is described in :mod:`episodata_npz._layout`; opening and recovery in
:mod:`episodata_npz._scan`; spills, and what ``open`` does when one is missing or
damaged, in :mod:`episodata_npz._spills`: the episode is reported lost and keeps its id.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from episodata_core import selection
from episodata_core.authoring import Growable, check_rows, coerce_options
from episodata_core.errors import DatasetStateError, FieldNotFoundError, SchemaError
from episodata_core.location import fsync_directory, write_atomic
from episodata_core.protocols import EpisodeRows
from episodata_npz._agreement import check_logged_length
from episodata_npz._archive import EpisodeArchive, EpisodeMeta, encode_episode
from episodata_npz._buffers import DecodedCache
from episodata_npz._index import Index, Ongoing
from episodata_npz._layout import EPISODES, LOG_NAME, ONGOING, CommitLog, LogEntry, file_name
from episodata_npz._scan import Scanner
from episodata_npz._spills import write_spill
from episodata_npz._verify import verify_folder

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Self

    import numpy.typing as npt

    from episodata_core.generations import OlderDataset
    from episodata_core.protocols import EpisodeTable, GatherRequest, Rows
    from episodata_core.schema import DatasetSchema

__all__ = ["NpzDirectoryBackend", "NpzDirectoryOptions"]


class NpzDirectoryOptions(BaseModel):
    """Options of the ``npz_directory`` backend."""

    model_config = ConfigDict(extra="forbid")

    compress: bool = Field(
        default=True,
        description="Deflate every member, as numpy.savez_compressed does; False stores "
        "members uncompressed (larger, faster to write and read).",
    )
    compress_level: int = Field(
        default=6, ge=1, le=9, description="zlib level when compressing: 1 fastest, 9 smallest."
    )
    cache_bytes: int = Field(
        default=64 * 2**20,
        ge=0,
        description="Bytes of decoded fields of finalized episodes kept across reads, least "
        "recently used out; 0 decodes on every read.",
    )


class NpzDirectoryBackend(selection.ReadsSelections):
    """Episodes as ``episodes/episode_<id>.npz`` archives that ``numpy.load`` opens.

    Each archive holds one member per field, named by its qualified key
    (``observation/camera``), and the scalars ``episode/id``, ``episode/length``,
    ``episode/terminated``, ``episode/truncated`` and ``episode/ongoing``. A read call
    decompresses each member it needs once; an LRU of ``cache_bytes`` keeps decoded
    fields for later calls.
    """

    name: ClassVar[str] = "npz_directory"
    description: ClassVar[str] = "one compressed .npz archive per episode; numpy.load reads them"
    Options: ClassVar[type[BaseModel]] = NpzDirectoryOptions
    # reads wait on archive files and decompression, which release the GIL
    default_prefetch: ClassVar[int] = 2

    older_generations: ClassVar[tuple[str, ...]] = ("0.2",)

    @classmethod
    def open_generation(
        cls, location: str, generation: str, document: Mapping[str, Any]
    ) -> OlderDataset:
        """Open a dataset written by episodata 0.2.0 read-only (:mod:`episodata_npz._gen02`)."""
        from episodata_npz._gen02 import open_02

        if generation != "0.2":
            raise SchemaError(
                f"{location!r}: the npz_directory backend reads generation 0.2, not {generation}"
            )
        return open_02(location, document)

    def __init__(
        self, root: Path, schema: DatasetSchema, options: NpzDirectoryOptions, *, writable: bool
    ) -> None:
        self._root = root
        self._schema = schema
        self._specs = {spec.qualified_key: spec for spec in schema}
        self._optional = frozenset(key for key, spec in self._specs.items() if spec.optional)
        self._required = frozenset(self._specs) - self._optional
        self._options = options
        self._writable = writable
        self._index = Index(key for key in self._specs if key in self._optional)
        self._ongoing: dict[int, Ongoing] = {}
        self._lost: dict[
            int, str
        ] = {}  # flushed ongoing episodes whose spill is missing or damaged
        required = [self._specs[key] for key in self._required]
        self._row_bytes = sum(spec.np_dtype.itemsize * math.prod(spec.shape) for spec in required)
        self._log = CommitLog(root, self._optional, self._row_bytes)
        self._scanner = Scanner(root, self._specs, self._log)
        self._cache = DecodedCache(options.cache_bytes)
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    def create(cls, schema: DatasetSchema, location: str | None, options: BaseModel) -> Self:
        """Lay out an empty dataset in the (empty, existing) folder ``location``."""
        if location is None:
            raise SchemaError(
                "the npz_directory backend stores files and needs a folder: pass path=..."
            )
        root = Path(location)
        if (root / LOG_NAME).exists() or (root / EPISODES).exists():
            raise DatasetStateError(
                f"{location!r} already holds an npz_directory dataset; open it instead"
            )
        # the core passes an empty folder; direct callers may pass one that is not there yet
        for folder in (EPISODES, ONGOING):
            (root / folder).mkdir(parents=True)
        write_atomic(root / LOG_NAME, b"")
        fsync_directory(root)
        return cls(root, schema, coerce_options(options, NpzDirectoryOptions), writable=True)

    @classmethod
    def open(
        cls,
        location: str,
        options: BaseModel,
        *,
        writable: bool,
        schema: DatasetSchema | None = None,
    ) -> Self:
        """Open a dataset folder; ``writable=True`` first repairs what a killed writer left.

        A read-only open changes no file: it ignores temporary files, half-written log
        lines and spills that a finished commit made obsolete. ``schema`` is the
        manifest's (the core passes it); without it the manifest is read here.
        """
        if schema is None:
            from episodata_core.manifest import read_manifest

            schema = read_manifest(location).schema
        root = Path(location)
        if not (root / EPISODES).is_dir():
            raise DatasetStateError(
                f"{location!r} has no {EPISODES}/ folder: it is not an npz_directory dataset "
                "or the folder was damaged"
            )
        backend = cls(root, schema, coerce_options(options, NpzDirectoryOptions), writable=writable)
        # before any repair or read: an edited manifest or log must not size anything
        backend._scanner.check_schema()
        if writable:
            backend._scanner.recover()
        backend._scan()
        return backend

    @property
    def location(self) -> str:
        """The dataset folder."""
        return str(self._root)

    @property
    def schema(self) -> DatasetSchema:
        """The dataset schema."""
        return self._schema

    def close(self) -> None:
        """Flush ongoing episodes (when writable) and release files and caches."""
        if self._closed:
            return
        if self._writable:
            self.flush()
        self._log.close()
        self._cache.clear()
        self._ongoing.clear()
        self._closed = True

    def refresh(self) -> None:
        """Pick up archives and spills that the writing process added since the last scan.

        Only new archives are looked at (their log lines, or the archive when a line is
        not there yet). The writer itself has nothing to pick up.
        """
        self._check_open()
        if not self._writable:
            self._scan()

    def flush(self) -> None:
        """Spill every ongoing episode with rows that are not on disk yet.

        A spill is one archive per episode, rewritten whole (atomically) at each flush
        that finds new rows, so flushing after every step of a long episode costs
        O(rows so far) each time; flush at checkpoints instead.
        """
        self._check_open()
        if not self._writable:
            return
        for episode, state in sorted(self._ongoing.items()):
            if state.durable_rows != state.num_rows:
                self._spill(episode, state, state.num_rows)

    def verify(self) -> list[str]:
        """Re-hash every archive and spill against ``episodes.jsonl``; one line per problem."""
        self._check_open()
        return verify_folder(self._root, self._specs, self._optional, self._row_bytes)

    # -- index ----------------------------------------------------------------------------

    def episode_table(self) -> EpisodeTable:
        """Views of the per-episode index, valid until the next write or refresh."""
        return self._index.table()

    # -- writes ---------------------------------------------------------------------------

    def start_episode(self, rows: Rows) -> int:
        """Begin an ongoing episode in memory; nothing is written until a flush or commit."""
        self._check_writable()
        num_rows = check_rows(rows, self._specs, "a new episode")
        buffers = {key: Growable.copy_of(block, max(16, num_rows)) for key, block in rows.items()}
        episode = len(self._index)
        self._index_ongoing(episode, num_rows - 1, rows)
        self._ongoing[episode] = Ongoing(buffers, num_rows)
        return episode

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Append rows to an ongoing episode in memory."""
        state = self._ongoing_state(episode)
        if rows.keys() != state.buffers.keys():
            raise SchemaError(
                f"episode {episode}: rows for {sorted(rows)} do not match the episode's "
                f"fields {sorted(state.buffers)}"
            )
        count = check_rows(rows, self._specs, f"episode {episode}")
        for key, block in rows.items():
            state.buffers[key].extend(block)
        state.num_rows += count
        self._index.length.data[episode] += count

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Write the episode's archive; it is durable when this returns."""
        state = self._ongoing_state(episode)
        rows = {key: grow.view() for key, grow in state.buffers.items()}
        self._commit([(episode, rows, terminated, truncated)])
        self._index.put(
            episode,
            state.num_rows - 1,
            terminated=terminated,
            truncated=truncated,
            ongoing=False,
            fields=rows,
        )
        del self._ongoing[episode]
        if state.durable_rows:
            # a leftover spill is harmless (the archive supersedes it), so no folder fsync
            (self._root / ONGOING / file_name(episode)).unlink(missing_ok=True)

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Write a complete episode's archive; durable when this returns."""
        return self.add_episodes([EpisodeRows(rows, terminated, truncated)])[0]

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Write complete episodes' archives, then log them with one append.

        Durable when this returns. A crash in between leaves the first k episodes: the
        archives are renamed into place in id order, and recovery logs any archive
        that is there without its line.
        """
        self._check_writable()
        first = len(self._index)
        counts = [
            check_rows(e.rows, self._specs, f"episode {first + k}") for k, e in enumerate(episodes)
        ]
        ids = list(range(first, first + len(episodes)))
        self._commit(
            [(i, e.rows, e.terminated, e.truncated) for i, e in zip(ids, episodes, strict=True)]
        )
        for episode, new, num_rows in zip(ids, episodes, counts, strict=True):
            self._index.put(
                episode,
                num_rows - 1,
                terminated=new.terminated,
                truncated=new.truncated,
                ongoing=False,
                fields=new.rows,
            )
        return ids

    def _commit(self, finals: Sequence[tuple[int, Rows, bool, bool]]) -> None:
        """Archive, rename into place, then log: the order that recovery relies on.

        ``finals`` are ``(episode, rows, terminated, truncated)`` in ascending id order.
        """
        if not finals:
            return
        top = finals[-1][0]
        # ids stay contiguous across a crash: an earlier episode that is still ongoing
        # gets at least its reset row on disk before a later one becomes durable
        for earlier, state in sorted(self._ongoing.items()):
            if earlier < top and state.durable_rows == 0:
                self._spill(earlier, state, 1)
        entries = []
        for episode, rows, terminated, truncated in finals:
            length = _num_rows(rows) - 1
            meta = EpisodeMeta(episode, length, terminated, truncated, ongoing=False)
            data = self._encode(rows, meta)
            # each archive and its rename are durable before the next one is written:
            # whatever stops the writer (a kill, a power loss) leaves a prefix of ids
            write_atomic(self._root / EPISODES / file_name(episode), data)
            entry = LogEntry(
                file=f"{EPISODES}/{file_name(episode)}",
                sha256=hashlib.sha256(data).hexdigest(),
                size=len(data),
                length=length,
                terminated=terminated,
                truncated=truncated,
                absent=sorted(self._optional - rows.keys()),
            )
            entries.append((episode, entry))
        self._log.append_many(entries)

    def _spill(self, episode: int, state: Ongoing, num_rows: int) -> None:
        rows = {key: grow.view()[:num_rows] for key, grow in state.buffers.items()}
        meta = EpisodeMeta(episode, num_rows - 1, terminated=False, truncated=False, ongoing=True)
        absent = sorted(self._optional - rows.keys())
        write_spill(self._root, self._log, episode, self._encode(rows, meta), meta, absent)
        state.durable_rows = num_rows

    def _encode(self, rows: Rows, meta: EpisodeMeta) -> bytes:
        ordered = {key: rows[key] for key in self._specs if key in rows}
        return encode_episode(
            ordered, meta, compress=self._options.compress, level=self._options.compress_level
        )

    # -- reads ----------------------------------------------------------------------------

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Read-only rows ``[start, stop)`` of one episode; each field decoded at most once."""
        arrays = self._episode_arrays(episode, fields)
        return {key: _read_only(arrays[key][start:stop]) for key in fields}

    def gather_rows(self, request: GatherRequest) -> Rows:
        """Read a batch of windows, grouped by episode so each member is decoded once."""
        self._check_open()
        for key in request.fields:
            self._spec(key)
        out = {
            key: np.zeros(
                (len(request), request.num_rows, *self._specs[key].shape),
                dtype=self._specs[key].np_dtype,
            )
            for key in request.fields
        }
        if len(request) == 0:
            return out
        steps = np.arange(request.num_rows, dtype=np.int64)
        within = steps[None, :] - request.offsets[:, None]
        valid = (within >= 0) & (within < request.counts[:, None])
        # padding positions read some real row of their own window, then get zeroed
        last = np.maximum(request.counts - 1, 0)[:, None]
        rows = request.starts[:, None] + np.clip(within, 0, last)
        dense = request.is_dense
        order = np.argsort(request.episodes, kind="stable")
        boundaries = np.flatnonzero(np.diff(request.episodes[order])) + 1
        for group in np.split(order, boundaries):
            episode = int(request.episodes[group[0]])
            stored = [key for key in request.fields if self._stores(episode, key)]
            arrays = self._episode_arrays(episode, stored)
            limit = int(self._index.length.data[episode])
            index = np.minimum(rows[group], limit)
            padding = None if dense else ~valid[group]
            for key, array in arrays.items():
                block = array[index]
                if padding is not None:
                    block[padding] = 0
                out[key][group] = block
        return out

    def _episode_arrays(self, episode: int, fields: Iterable[str]) -> dict[str, npt.NDArray[Any]]:
        """Whole decoded fields of one episode (ongoing ones from memory)."""
        self._check_open()
        if not 0 <= episode < len(self._index):
            raise DatasetStateError(
                f"episode {episode} does not exist (the dataset has {len(self._index)} episodes)"
            )
        keys = list(fields)
        for key in keys:
            if not self._stores(episode, key):
                raise FieldNotFoundError(
                    f"episode {episode} does not store the optional field {key!r}"
                )
        state = self._ongoing.get(episode)
        if state is not None:
            return {key: state.buffers[key].view() for key in keys}
        lost = self._lost.get(episode)
        if lost is not None:
            raise DatasetStateError(lost)
        out: dict[str, npt.NDArray[Any]] = {}
        missing = []
        for key in keys:
            cached = self._cache.get(episode, key)
            if cached is None:
                missing.append(key)
            else:
                out[key] = cached
        if missing:
            out.update(self._decode(episode, missing))
        return out

    def _decode(self, episode: int, keys: list[str]) -> dict[str, npt.NDArray[Any]]:
        where = f"{EPISODES}/{file_name(episode)}"
        num_rows = int(self._index.length.data[episode]) + 1
        out = {}
        try:
            with EpisodeArchive(self._root / where, where, self._specs) as archive:
                try:
                    for key in keys:
                        out[key] = archive.read(key, num_rows)
                        self._cache.put(episode, key, out[key])
                except DatasetStateError:
                    # a sound archive that does not fit its log line: the line was edited
                    check_logged_length(archive, where, self._specs, num_rows - 1)
                    raise
        except FileNotFoundError as err:
            raise DatasetStateError(
                f"{where} is missing: episode {episode} was finalized but its archive is "
                "gone. Run `episodata verify` on the dataset"
            ) from err
        return out

    def _stores(self, episode: int, key: str) -> bool:
        self._spec(key)
        column = self._index.present.get(key)
        return column is None or bool(column.data[episode])

    def _spec(self, key: str) -> Any:
        try:
            return self._specs[key]
        except KeyError:
            raise FieldNotFoundError(
                f"no field {key!r} in the schema (fields: {', '.join(self._specs)})"
            ) from None

    # -- opening --------------------------------------------------------------------------

    def _scan(self) -> None:
        """Fold what the folder holds beyond this backend's index into it, in id order."""
        listing = self._scanner.scan(
            len(self._index), self._index.ongoing.view(), self._ongoing, self._lost.keys()
        )
        for episode in range(listing.top):
            final = listing.finalized.get(episode)
            state = listing.ongoing.get(episode)
            if final is not None:
                self._index.put(
                    episode,
                    final.length,
                    terminated=final.terminated,
                    truncated=final.truncated,
                    ongoing=False,
                    fields=final.fields,
                )
                self._ongoing.pop(episode, None)
            elif state is not None:
                self._index_ongoing(episode, state.num_rows - 1, state.buffers)
                self._ongoing[episode] = state
                self._lost.pop(episode, None)
            elif (lost := listing.lost.get(episode)) is not None:
                # a lost episode stays indexed as ongoing at its recorded length: its id
                # is taken, and reading it raises the message that says what is wrong
                self._index_ongoing(episode, lost.length, lost.fields)
                self._ongoing.pop(episode, None)
                self._lost[episode] = lost.message

    def _index_ongoing(self, episode: int, length: int, fields: Iterable[str]) -> None:
        self._index.put(
            episode, length, terminated=False, truncated=False, ongoing=True, fields=fields
        )

    # -- state checks ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DatasetStateError(f"the npz_directory backend of {str(self._root)!r} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if not self._writable:
            raise DatasetStateError(
                f"{str(self._root)!r} was opened without write access (writable=False); "
                "writes go through a writable open, which takes the writer lock"
            )

    def _ongoing_state(self, episode: int) -> Ongoing:
        self._check_writable()
        try:
            return self._ongoing[episode]
        except KeyError:
            lost = self._lost.get(episode)
            if lost is not None:
                raise DatasetStateError(f"{lost}. It cannot be resumed or finalized") from None
            raise DatasetStateError(f"episode {episode} is not ongoing") from None


def _num_rows(rows: Rows) -> int:
    return len(next(iter(rows.values())))


def _read_only(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    view = array.view()
    view.flags.writeable = False
    return view

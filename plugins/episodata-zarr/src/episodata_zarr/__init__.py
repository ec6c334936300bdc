"""Zarr v3 storage backend (``backend="zarr"``); TensorStore does every array read and write.

A dataset folder holds standard Zarr v3 arrays that zarr-python and TensorStore open
directly, and an episode log in front of them::

    manifest.json                   the core's manifest (schema, backend, provenance)
    zarr.json                       root group; attributes["episodata"] holds the schema
    commit.json                     the commit record: which rows of the arrays count
    log.sqlite                      the episode log: episodes not folded yet (SQLite, WAL)
    data/<role>/<key>               one array per field, [rows, *shape] in the field dtype,
                                    every folded episode's rows back to back
    index/episodes                  int64 [episodes, columns], one row per episode id:
                                    row_start, length, terminated, truncated, ongoing,
                                    present:<key>..., crc32:<key>..., entry_hash

The engine, one module each: the log (``_log``: one SQLite commit per finalized episode
or flushed prefix), the tail (``_tail``: those episodes' rows in memory, where reads
find them), the fold (``_fold``: the tail into the arrays in one batch, then a new
``commit.json``), the arrays (``_arrays``: TensorStore handles). A finalize costs an
SQLite commit (tens of microseconds); the arrays are rewritten once per ``fold_bytes``
of episodes, at ``flush()`` and at ``close()``. A closed dataset with nothing ongoing is
plain Zarr v3 (its empty log is removed).

Key parts outside ``A-Z a-z 0-9 _ . -`` are percent-encoded in paths. Chunks run along
the row axis only (``chunk_bytes`` of rows per chunk, whole rows); codecs are
``bytes`` (little endian), a compressor, and ``crc32c`` so that a damaged chunk fails to
read. Dtypes that Zarr v3 cannot store natively (fixed-width strings) are stored as
uint8 with a trailing ``byte`` axis.

TensorStore cannot run in a ``fork()`` child of a process that used it; there (a
DataLoader worker) the arrays of a local folder are read from their chunk files
without TensorStore (:mod:`episodata_zarr._chunkfiles`), and those on object storage
through a helper process (:mod:`episodata_zarr._forked`); the tail is read from the
memory the fork inherited.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from episodata_core import selection
from episodata_core.authoring import coerce_options
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_zarr._options import CodecName, ZarrOptions, worker_share

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Self

    from pydantic import BaseModel

    from episodata_core.generations import OlderDataset
    from episodata_core.protocols import EpisodeRows, EpisodeTable, GatherRequest, Rows
    from episodata_core.schema import DatasetSchema
    from episodata_zarr._forked import RemoteStore
    from episodata_zarr._impl import ZarrStore

__all__ = ["CodecName", "ZarrBackend", "ZarrOptions"]

__version__ = "0.3.0"

_FORKED = (
    "cannot {what} a Zarr dataset in a fork() child of a process that used TensorStore "
    "(TensorStore cannot run there); do it in the parent, or start this process with "
    "'spawn' or 'forkserver'"
)


class ZarrBackend(selection.ReadsSelections):
    """Episodes in standard Zarr v3 arrays in a folder, read and written by TensorStore.

    A finalized episode survives a crash of the writing process when
    ``finalize_episode``/``add_episode`` returns, and a power loss once the next sync
    point has passed (``flush()``, ``close()``, at most ``sync_interval`` seconds later;
    at once with ``durability="sync"``); ongoing ones after ``flush()``. Any number of
    processes may read while one writes; readers see new episodes after ``refresh()``.

    Examples
    --------
    >>> dataset = Dataset.create(schema, path="runs/cartpole", backend="zarr")
    """

    name: ClassVar[str] = "zarr"
    description: ClassVar[str] = (
        "Zarr v3 arrays on disk through TensorStore; chunked, compressed, checksummed"
    )
    Options: ClassVar[type[BaseModel]] = ZarrOptions
    older_generations: ClassVar[tuple[str, ...]] = ("0.2",)
    # reads wait on chunk files and decoding, which release the GIL
    default_prefetch: ClassVar[int] = 2

    def __init__(self, store: ZarrStore | RemoteStore) -> None:
        self._store = store

    @classmethod
    def open_generation(
        cls, location: str, generation: str, document: Mapping[str, Any]
    ) -> OlderDataset:
        """Open a dataset written by episodata 0.2.0 read-only (:mod:`episodata_zarr._gen02`)."""
        from episodata_zarr._gen02 import open_02

        if generation != "0.2":
            raise SchemaError(
                f"{location!r}: the zarr backend reads generation 0.2, not {generation}"
            )
        return open_02(location, document)

    @classmethod
    def create(cls, schema: DatasetSchema, location: str | None, options: BaseModel) -> Self:
        """Create an empty dataset in the folder ``location``."""
        if location is None:
            raise SchemaError(
                "the zarr backend stores datasets in a folder: pass path=..., or use "
                "backend='memory' for an in-memory dataset"
            )
        from episodata_zarr import _impl

        if os.getpid() != _impl.LOADED_IN:
            raise DatasetStateError(_FORKED.format(what="create"))
        return cls(
            _impl.ZarrStore.create(
                schema, os.fspath(location), coerce_options(options, ZarrOptions)
            )
        )

    @classmethod
    def open(
        cls,
        location: str,
        options: BaseModel,
        *,
        writable: bool = False,
        schema: DatasetSchema | None = None,
    ) -> Self:
        """Open the dataset in ``location``; a writable open recovers after a crash.

        The schema comes from the arrays' attributes and is checked against the
        manifest's; ``schema`` (the manifest's, passed by the core) is not needed.

        In a ``fork()`` child of a process that used TensorStore (a DataLoader worker),
        where TensorStore cannot run, a read-only open reads the chunk files itself (a
        dataset on object storage: through a helper process).
        """
        from episodata_zarr import _impl

        opened = worker_share(coerce_options(options, ZarrOptions))
        if os.getpid() != _impl.LOADED_IN:
            if writable:
                raise DatasetStateError(_FORKED.format(what="open for writing"))
            from episodata_core.location import is_remote
            from episodata_zarr._chunkfiles import UnsupportedLayout
            from episodata_zarr._forked import RemoteStore

            if not is_remote(location):
                try:
                    # the arrays read their chunk files themselves (see _chunkfiles)
                    return cls(_impl.ZarrStore.open(os.fspath(location), opened, writable=False))
                except UnsupportedLayout:
                    pass  # not this backend's layout: TensorStore in a helper reads it
            where = location if is_remote(location) else Path(location)
            return cls(RemoteStore(where, opened))
        return cls(_impl.ZarrStore.open(os.fspath(location), opened, writable=writable))

    @property
    def schema(self) -> DatasetSchema:
        """The dataset schema (stored in the root group's attributes)."""
        return self._store.schema

    @property
    def location(self) -> str:
        """The dataset folder, or its URL on object storage."""
        where = getattr(self._store, "location", None)
        return where if isinstance(where, str) else str(self._store.folder)

    def episode_table(self) -> EpisodeTable:
        """Lengths and flags of every episode; views valid until the next change."""
        return self._store.episode_table()

    def start_episode(self, rows: Rows) -> int:
        """Begin an ongoing episode; its rows stay in memory until a flush or finalize."""
        return self._store.start_episode(rows)

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Append rows to an ongoing episode; memory only, no I/O."""
        self._store.append_rows(episode, rows)

    def append_step(self, episode: int, values: Mapping[str, Any]) -> None:
        """Append one step of exact values (``SupportsAppendStep``); memory only, no I/O."""
        self._store.append_step(episode, values)

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Log an ongoing episode as finalized; crash-durable on return (see the class)."""
        self._store.finalize_episode(episode, terminated=terminated, truncated=truncated)

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Log a finalized episode; crash-durable on return (see the class)."""
        return self._store.add_episode(rows, terminated=terminated, truncated=truncated)

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Finalized episodes in one commit: after a crash, all of them or none.

        Batches of a few MB or more go straight into the arrays (one fold, synced, with
        whatever the log held); smaller ones into the log. A call that writes at
        least 1/16 of ``cache_pool_bytes`` starts an empty TensorStore cache afterwards,
        so that the chunks it wrote do not stay in memory; reads then fetch chunks from
        disk again.
        """
        return self._store.add_episodes(episodes)

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows ``[start, stop)`` of one episode, ``[stop - start, *shape]`` per field."""
        return self._store.read_rows(episode, start, stop, fields)

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows, ``[B, num_rows, *shape]`` per field; each chunk read once."""
        return self._store.gather_rows(request)

    def flush(self) -> None:
        """A sync point: log ongoing rows, fold the log, sync (a no-op for read-only opens)."""
        self._store.flush()

    def refresh(self) -> None:
        """See what other processes committed since the open or the last refresh."""
        self._store.refresh()

    def verify(self) -> list[str]:
        """Describe every damaged file, chunk or episode; empty when all is intact.

        It reads the files on disk, bypassing TensorStore's cache, so a writer's verify
        sees what happened to them since it wrote them.
        """
        return self._store.verify()

    def close(self) -> None:
        """Flush and fold a writer, then release every handle."""
        self._store.close()

    def __getstate__(self) -> dict[str, Any]:
        # TensorStore handles cannot cross processes: a pickled backend (a 'spawn' worker)
        # reopens the folder read-only
        return {"location": self.location, "options": self._store.options.model_dump()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        options = ZarrOptions.model_validate(state["options"])
        self._store = type(self).open(state["location"], options)._store

"""The :class:`Dataset` and :class:`Episode`: the entry points of the public API."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np

from episodata_core import _bulk, _shared_writer, hooks, location, registry
from episodata_core._batching import BATCH_BYTES, add_rows
from episodata_core._options import validate_options
from episodata_core._step_plan import WriterPlans
from episodata_core._version import __version__
from episodata_core.episode import Episode
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.manifest import Incomplete, Manifest, PluginVersion, Provenance, read_manifest
from episodata_core.normalize import Alignment, split_episode, to_rows
from episodata_core.protocols import (
    EpisodeRows,
    SupportsFlush,
    supports_persistence,
)
from episodata_core.sampling.index import SegmentIndex, WindowSpec, check_pad, positive_int
from episodata_core.sampling.read import read_transitions
from episodata_core.sampling.segments import SegmentDataset
from episodata_core.sampling.stream import SegmentStream
from episodata_core.schema import DatasetSchema
from episodata_core.writers import ActionOutEpisodeWriter, EpisodeWriter, VectorEpisodeWriter

if TYPE_CHECKING:
    import os
    import weakref
    from collections.abc import Iterable, Iterator

    from pydantic import BaseModel

    from episodata_core._shared_writer import SharedWriter
    from episodata_core.protocols import StorageBackend
    from episodata_core.registry import PluginKind
    from episodata_core.sampling.index import EpisodeFilter, Pad
    from episodata_core.stats import FieldStats
    from episodata_core.views import Transition
    from episodata_core.writers import AutoresetMode

# read_manifest lives in manifest.py; backends import it from here too
__all__ = ["Dataset", "read_manifest"]


class Dataset:
    """Episodes that share one schema, stored by one backend.

    Create one with :meth:`create` or :meth:`from_episodes`. Reads go through
    :meth:`episode`; writes through :meth:`new_episode` (step by step),
    :meth:`add_episode` (a whole episode at once) or :meth:`add_episodes` (several).

    Handles on one folder in one process share its writer: once one of them writes, or
    while one does, they use one backend and see one episode table. The writer lock is
    released when the last of them is closed or garbage-collected.
    """

    def __init__(
        self,
        backend: StorageBackend,
        manifest: Manifest,
        *,
        read_only: bool = False,
        writer: SharedWriter | None = None,
    ) -> None:
        self._backend = backend
        self._manifest = manifest
        self._read_only = read_only
        # serializes backend access between the caller's writes and read-ahead threads;
        # replaced by the shared writer's io lock when this handle joins one
        self._io_lock = threading.RLock()
        self._lease: weakref.finalize[[SharedWriter], object] | None = None
        self._transition_indexes: dict[int, SegmentIndex] = {}
        self._resolved_fields: dict[str | None, tuple[str, ...]] = {}
        self._rng = np.random.default_rng()
        self._writer_plans = WriterPlans()
        if writer is not None:
            self._join(writer)

    # -- creation -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        schema: DatasetSchema,
        path: str | os.PathLike[str] | None = None,
        *,
        backend: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Dataset:
        """Create an empty dataset.

        Parameters
        ----------
        schema
            The fields every episode has.
        path
            A new folder or object-storage URL (``s3://bucket/prefix``, ``gs://...``) to
            store the dataset in; ``None`` keeps it in memory.
        backend
            A registered backend name; ``"memory"`` without a path, ``"zarr"`` with one.
        metadata
            JSON-serializable dataset metadata, stored in the manifest.
        storage_options
            How to reach an object-storage URL (endpoint, region, anonymous, profile...;
            see :class:`~episodata_core.location.StorageOptions`).
        **options
            The backend's options (validated by its ``Options`` model).

        Raises
        ------
        DatasetStateError
            ``path`` already holds files: datasets are never created over anything but
            a creation that was interrupted before it wrote its manifest.

        Examples
        --------
        >>> schema = DatasetSchema([FieldSpec("state", shape=(3,), dtype="float32")])
        >>> dataset = Dataset.create(schema)
        """
        if path is not None:
            path = location.normalize(path, storage_options)
        return cls._create(schema, path, backend=backend, metadata=metadata, options=options)[0]

    @classmethod
    def _create(
        cls,
        schema: DatasetSchema,
        path: str | os.PathLike[str] | None,
        *,
        backend: str | None,
        metadata: Mapping[str, Any] | None,
        options: Mapping[str, Any],
        incomplete: Incomplete | None = None,
    ) -> tuple[Dataset, _bulk.Created | None]:
        """:meth:`create`, and the creation of bulk writes, which pass ``incomplete``.

        A bulk write's creation may also replace a dataset that an earlier, interrupted
        bulk write left marked incomplete. Returns the dataset and, for a stored one,
        what this call created on disk.
        """
        if not isinstance(schema, DatasetSchema):
            raise SchemaError(
                f"schema: expected a DatasetSchema, got {type(schema).__name__}; build one "
                "with DatasetSchema([...]) or DatasetSchema.infer(episode)"
            )
        name = backend or ("memory" if path is None else "zarr")
        backend_cls = registry.get_backend(name)
        backend_options = validate_options(backend_cls, dict(options), f"backend {name!r} option")
        manifest = Manifest(
            backend=name,
            backend_options=backend_options.model_dump(mode="json"),
            schema=schema,
            metadata=dict(metadata or {}),
            provenance=Provenance(
                episodata_version=__version__, plugins=[_plugin_version("backend", name)]
            ),
        )
        created: _bulk.Created | None = None
        if path is None:
            dataset = cls(backend_cls.create(schema, None, backend_options), manifest)
            hooks.get_plugin_manager().hook.before_manifest_written(
                dataset=dataset, manifest=manifest
            )
        else:
            if not supports_persistence(backend_cls):
                raise SchemaError(
                    f"backend {name!r} cannot store a dataset at a path; leave out path= or "
                    "choose a persistent backend such as 'zarr' or 'npz_directory'"
                )
            manifest.incomplete = incomplete
            dataset, created = _bulk.create_at(
                cls, location.normalize(path), backend_cls, backend_options, manifest
            )
        hooks.get_plugin_manager().hook.after_dataset_created(dataset=dataset)
        return dataset, created

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        allow_incomplete: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Dataset:
        """Open a stored dataset; the backend comes from its ``manifest.json``.

        ``path`` is a folder or an object-storage URL (``s3://``, ``gs://``, read-only
        ``http(s)://``), reached with ``storage_options`` (see
        :class:`~episodata_core.location.StorageOptions`).

        Readers never block: any number of processes can open and read a dataset. The
        writer lock is taken at the first write, and refused while another process
        writes; handles in this process share it (and, while one of them writes, its
        backend). ``read_only=True`` forbids writes and always gives a handle of its own.
        ``options`` override the backend options stored at creation (e.g. cache sizes);
        a handle that joins this process's writer uses the writer's.

        A dataset whose bulk write (``from_episodes``, a copy, an import) was interrupted
        is marked incomplete and refused with a :class:`DatasetStateError` that says how
        to finish or replace it; ``allow_incomplete=True`` opens it anyway, to look at
        what is there.
        """
        folder = location.normalize(path, storage_options)
        manifest = read_manifest(folder)
        backend_cls = registry.get_backend(manifest.backend)
        if not supports_persistence(backend_cls):
            raise SchemaError(
                f"{folder!r}: backend {manifest.backend!r} cannot open stored datasets"
            )
        opts = validate_options(
            backend_cls,
            {**manifest.backend_options, **options},
            f"{folder!r}: backend {manifest.backend!r} option",
        )
        if manifest.incomplete is not None and not allow_incomplete:
            raise _bulk.incomplete_error(folder, manifest, backend_cls, opts)
        writer = None if read_only else _shared_writer.find_writer(folder)
        if writer is not None:
            return cls(writer.backend, writer.manifest, writer=writer)
        store = backend_cls.open(folder, opts, writable=False)  # type: ignore[attr-defined]
        return cls(store, manifest, read_only=read_only)

    @classmethod
    def from_episodes(
        cls,
        episodes: Iterable[Mapping[str, Any]],
        schema: DatasetSchema | None = None,
        path: str | None = None,
        *,
        backend: str | None = None,
        alignment: Alignment | None = None,
        metadata: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Dataset:
        """Create a dataset holding ``episodes`` (bulk dicts, see :meth:`add_episode`).

        The schema is inferred from the first episode unless given. A stored dataset is
        marked incomplete until the last episode is written, so an interrupted call
        (killed, Ctrl-C) leaves a folder that :meth:`open` refuses and that running
        this again with the same ``path`` replaces. A bad episode raises and removes
        what this call created. ``path`` may be an object-storage URL, reached with
        ``storage_options``.
        """
        return _bulk.from_episodes(
            cls,
            episodes,
            schema,
            None if path is None else location.normalize(path, storage_options),
            backend=backend,
            alignment=alignment,
            metadata=metadata,
            options=options,
        )

    # -- properties -----------------------------------------------------------------------

    @property
    def schema(self) -> DatasetSchema:
        """The dataset schema."""
        return self._backend.schema

    @property
    def manifest(self) -> Manifest:
        """The manifest: backend, schema, metadata and provenance."""
        return self._manifest

    @property
    def backend(self) -> StorageBackend:
        """The backend instance that stores the rows."""
        return self._backend

    @property
    def location(self) -> str | None:
        """The dataset folder, or ``None`` for an in-memory dataset."""
        return cast("str | None", getattr(self._backend, "location", None))

    @property
    def read_only(self) -> bool:
        """Whether writes are refused."""
        return self._read_only

    @property
    def num_episodes(self) -> int:
        """Number of episodes, finalized and ongoing."""
        return len(self._backend.episode_table())

    def __len__(self) -> int:
        return self.num_episodes

    @property
    def num_steps(self) -> int:
        """Total number of transitions over all episodes."""
        return int(self._backend.episode_table().length.sum())

    def __iter__(self) -> Iterator[Episode]:
        for index in range(self.num_episodes):
            yield Episode(self, index)

    def __repr__(self) -> str:
        return (
            f"Dataset(backend={self._manifest.backend!r}, episodes={self.num_episodes}, "
            f"fields={list(self.schema.qualified_keys)})"
        )

    # -- reads ----------------------------------------------------------------------------

    def episode(self, index: int) -> Episode:
        """The episode with this id; negative ids count from the end."""
        count = self.num_episodes
        position = int(index)
        if position < 0:
            position += count
        if not 0 <= position < count:
            raise IndexError(f"episode {index} does not exist (the dataset has {count} episodes)")
        return Episode(self, position)

    def stats(
        self, fields: str | Iterable[str] | None = None, *, refresh: bool = False
    ) -> dict[str, FieldStats]:
        """Per-element statistics of numeric fields, keyed by qualified key.

        ``count``, ``nan_count``, ``mean``, ``std``, ``min`` and ``max`` have the
        field's per-step shape; observations and infos count all T + 1 rows of an
        episode, actions and rewards the T steps. Computed episode by episode, stored
        in the metadata under ``"stats"`` (unless read-only) and reused while current;
        later calls read only what was written since. ``refresh=True`` recomputes.

        Examples
        --------
        >>> stats = dataset.stats("state")
        >>> normalized = (obs - stats["observation/state"].mean) / stats["observation/state"].std
        """
        from episodata_core.stats import dataset_stats

        return dataset_stats(self, fields, refresh=refresh)

    # -- sampling -------------------------------------------------------------------------

    def segments(
        self,
        sequence_length: int | None = None,
        *,
        context_length: int | None = None,
        target_length: int | None = None,
        fields: str | Iterable[str] | None = None,
        filter: EpisodeFilter | None = None,
        pad: Pad = "suffix",
        rank: int = 0,
        world_size: int = 1,
    ) -> SegmentDataset:
        """Every window of L transitions as a map-style dataset for a DataLoader.

        ``len`` counts windows; ``[i]`` is a :class:`Segment`; ``__getitems__`` reads a
        whole loader batch at once and ``collate`` passes it through as a
        :class:`Batch` (``obs`` ``[B, L, ...]``, ``mask`` ``[B, L]``). ``rank`` and
        ``world_size`` give each distributed process a disjoint shard.
        """
        spec = WindowSpec.from_lengths(sequence_length, context_length, target_length)
        # DataLoader workers reopen stored datasets: make what this writer holds visible
        self.flush()
        return SegmentDataset(
            self,
            spec,
            fields=self._field_keys(fields),
            filter=filter,
            pad=check_pad(pad),
            rank=rank,
            world_size=world_size,
        )

    def segment_stream(
        self,
        sequence_length: int | None = None,
        *,
        context_length: int | None = None,
        target_length: int | None = None,
        batch_size: int = 64,
        seed: int | None = None,
        shuffle: bool = True,
        filter: EpisodeFilter | None = None,
        pad: Pad = "suffix",
        sampler: Any = None,
        fields: str | Iterable[str] | None = None,
        prefetch: int | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> SegmentStream:
        """Batches of segments: infinite and sampled, or one ordered pass.

        ``shuffle=True``: each batch draws ``batch_size`` windows with the sampler
        (``"uniform"`` over windows with replacement by default; a registered name or
        any object with ``sample(index, batch_size)``). ``shuffle=False``: every window
        exactly once, in order. Short episodes give one zero-padded window
        (``pad="suffix"`` or ``"prefix"``; ``None`` skips them) and ``batch.mask``
        marks real transitions. With ``context_length`` and ``target_length``,
        ``batch.context`` and ``batch.target`` split each window and share its boundary
        row. ``prefetch`` batches are read ahead in a background thread; ``None`` lets
        the backend choose (none in memory, where a thread cannot overlap a copy; 2 for
        backends that wait on files).
        """
        spec = WindowSpec.from_lengths(sequence_length, context_length, target_length)
        return SegmentStream(
            self,
            spec,
            batch_size=batch_size,
            seed=seed,
            shuffle=shuffle,
            filter=filter,
            pad=check_pad(pad),
            sampler=sampler,
            fields=self._field_keys(fields),
            prefetch=prefetch,
            rank=rank,
            world_size=world_size,
        )

    def sample_transitions(
        self,
        batch_size: int,
        *,
        seed: int | None = None,
        fields: str | Iterable[str] | None = None,
        filter: EpisodeFilter | None = None,
    ) -> Transition:
        """``batch_size`` transitions drawn uniformly, with the time axis removed.

        ``obs`` is ``[B, ...]`` and ``next_obs`` ``[B, ...]``, both views of one
        ``[B, 2, ...]`` buffer. Never a padded transition. The transition index is kept
        between calls and only catches up with new episodes.
        """
        batch_size = positive_int("batch_size", batch_size)
        keys = self._field_keys(fields)
        with self._io_lock:
            # one episode-table snapshot for the index, the draw and the rows
            table = self._backend.episode_table()
            index = self._transition_indexes.get(id(filter))
            if index is None or index._filter is not filter:
                index = SegmentIndex(self, 1, pad=None, filter=filter)
                self._transition_indexes[id(filter)] = index
            else:
                index.refresh_from(table)
            if not len(index):
                raise SchemaError(
                    f"sample_transitions: nothing to sample: {index.describe_empty()}"
                )
            rng = self._rng if seed is None else np.random.default_rng(seed)
            positions = rng.integers(len(index), size=batch_size, dtype=np.int64)
            episodes, starts = index.locate(positions)
            return read_transitions(self, episodes, starts, keys, table=table)

    def _field_keys(self, fields: str | Iterable[str] | None) -> tuple[str, ...]:
        if fields is None or isinstance(fields, str):
            # sampling loops pass the same selection every call; the schema never changes
            keys = self._resolved_fields.get(fields)
            if keys is None:
                keys = self._resolved_fields[fields] = self._resolve_fields(fields)
            return keys
        return self._resolve_fields(fields)

    def _resolve_fields(self, fields: str | Iterable[str] | None) -> tuple[str, ...]:
        return tuple(spec.qualified_key for spec in self.schema.resolve(fields))

    # -- writes ---------------------------------------------------------------------------

    def add_episode(self, episode: Mapping[str, Any], *, alignment: Alignment | None = None) -> int:
        """Write a complete episode from a bulk dict; returns its id.

        Action-in dicts give ``initial_observation`` plus one entry per step in
        ``observations``, ``actions``, ``rewards`` (and ``infos`` with ``initial_info``);
        action-out dicts give ``observations`` where each action was taken and an
        optional ``final_observation``. ``terminated``/``truncated`` are scalars or
        per-step flags. Everything is validated before anything is written.
        """
        self._prepare_write()
        new = self._validated(episode, f"episode {self.num_episodes}", alignment)
        with self._io_lock:
            index = self._backend.add_episode(
                new.rows, terminated=new.terminated, truncated=new.truncated
            )
        self._after_episode_written(index)
        return index

    def add_episodes(
        self, episodes: Iterable[Mapping[str, Any]], *, alignment: Alignment | None = None
    ) -> list[int]:
        """Write several complete episodes (bulk dicts, see :meth:`add_episode`); returns their ids.

        Every episode is validated before any is written: a bad one anywhere leaves the
        dataset as it was. The ids, rows and flags are those of one :meth:`add_episode`
        call per episode, and all of them are durable when this returns. Backends that
        support it write them together: zarr with one commit, far cheaper than one by one,
        so a crash leaves all of them or none; npz_directory logs them with one append,
        so a crash leaves the first few.
        Every episode is held in memory until the write, so keep the number of episodes
        per call bounded. An empty ``episodes`` writes nothing and returns ``[]``.

        Examples
        --------
        >>> ids = dataset.add_episodes([episode_a, episode_b])
        """
        if isinstance(episodes, Mapping):
            raise SchemaError(
                "add_episodes: expected an iterable of episode dicts, got one dict (keys "
                f"{sorted(map(str, episodes))[:4]}); pass [episode], or call add_episode"
            )
        return self._add_validated(episodes, alignment, name_items="add_episodes")

    def _add_validated(
        self,
        episodes: Iterable[Mapping[str, Any]],
        alignment: Alignment | None,
        *,
        name_items: str | None,
    ) -> list[int]:
        """Validate every episode, then write them all; ``name_items`` labels errors."""
        self._prepare_write()
        first = self.num_episodes
        checked = [
            self._validated(
                episode,
                f"episode {first + k}" + (f" (item {k} of {name_items})" if name_items else ""),
                alignment,
            )
            for k, episode in enumerate(episodes)
        ]
        if not checked:
            return []
        with self._io_lock:
            ids = add_rows(self._backend, checked)
        for index in ids:
            self._after_episode_written(index)
        return ids

    def _batch_bytes(self) -> int:
        """How many bytes of episodes bulk writes (copies, ``from_episodes``) group.

        Batches pay off where each write is a durable commit; in memory they would only
        keep a batch of episodes alive at once, so there every episode goes alone.
        """
        return BATCH_BYTES if supports_persistence(self._backend) else 0

    def _validated(
        self, episode: Mapping[str, Any], where: str, alignment: Alignment | None
    ) -> EpisodeRows:
        """A bulk episode as checked storage rows; raises before anything is written."""
        split = split_episode(episode, self.schema, alignment=alignment, where=where)
        rows = to_rows(split, self.schema, where=where)
        return EpisodeRows(rows, terminated=split.terminated, truncated=split.truncated)

    def new_episode(
        self, observation: Any, infos: Mapping[str, Any] | None = None
    ) -> EpisodeWriter:
        """Start an episode at its reset observation; returns its step writer."""
        self._prepare_write()
        return EpisodeWriter.start(self, observation, infos)

    def new_action_out_episode(self) -> ActionOutEpisodeWriter:
        """A writer for recorders that log the action taken *at* each observation."""
        self._prepare_write()
        return ActionOutEpisodeWriter(self)

    def new_vector_episodes(
        self,
        observations: Any,
        infos: Mapping[str, Any] | None = None,
        *,
        autoreset_mode: AutoresetMode = "next_step",
    ) -> VectorEpisodeWriter:
        """Start one episode per sub-environment of a Gymnasium 1.x vector env.

        ``observations`` is what ``envs.reset()`` returned (``[N, ...]`` per field).
        """
        self._prepare_write()
        return VectorEpisodeWriter(self, observations, infos, autoreset_mode=autoreset_mode)

    def resume_episode(self, index: int) -> EpisodeWriter:
        """The writer of an ongoing episode, to continue adding steps."""
        self._prepare_write()
        episode = self.episode(index)
        if not episode.ongoing:
            raise DatasetStateError(
                f"episode {episode.index} is finalized and cannot be resumed; "
                "start a new one with new_episode()"
            )
        return EpisodeWriter.resume(self, episode.index)

    def _after_episode_written(self, index: int) -> None:
        caller = hooks.get_plugin_manager().hook.after_episode_written
        # most processes register no such hook, and pluggy's call of none costs about
        # as much as recording a step in memory
        if caller.get_hookimpls():
            caller(dataset=self, episode=index)

    def update_metadata(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the dataset metadata and rewrite the manifest atomically."""
        self._prepare_write()
        self._manifest.metadata.update(values)
        hooks.get_plugin_manager().hook.before_manifest_written(
            dataset=self, manifest=self._manifest
        )
        self._write_manifest()

    def _write_manifest(self, *, durable: bool = True) -> None:
        """Persist the manifest (stored datasets); handles that share it take turns.

        ``durable=False`` skips the fsyncs: the file survives a crash of this process,
        not a power loss (for records that only need the former).
        """
        folder = self.location
        if folder is not None:
            with self._io_lock:
                location.write_bytes(
                    folder,
                    location.MANIFEST_NAME,
                    self._manifest.to_json().encode(),
                    durable=durable,
                )

    def _prepare_write(self) -> None:
        """Refuse writes to read-only datasets; join this process's writer on the first write.

        The first handle to write takes the writer lock and opens the backend writable
        (which recovers from a crashed writer); later handles share both.
        """
        if self._read_only:
            raise DatasetStateError(
                f"{self.location!r} was opened with read_only=True; open it again without "
                "it to write"
            )
        if self._lease is not None:
            return
        folder = self.location
        if folder is None:
            return
        backend_cls = type(self._backend)
        options = self._backend_options()
        own = self._backend
        reopened = False

        def reopen_writable() -> StorageBackend:
            # the read-only instance goes first: some libraries (h5py) refuse to open a
            # file for writing while this process has it open for reading
            nonlocal reopened
            reopened = True
            with self._io_lock:
                own.close()
                try:
                    return backend_cls.open(folder, options, writable=True)  # type: ignore[attr-defined, no-any-return]
                except BaseException:
                    self._backend = backend_cls.open(folder, options, writable=False)  # type: ignore[attr-defined]
                    raise

        writer = _shared_writer.open_writer(folder, reopen_writable, self._manifest)
        # a writer this process had already: the read-only instance is still open
        self._join(writer, close_own=not reopened)

    def _join(self, writer: SharedWriter, *, close_own: bool = False) -> None:
        """Use ``writer``'s backend, manifest and io lock from now on, holding a lease.

        ``close_own``: close the backend this handle used until now.
        """
        with self._io_lock:
            previous = self._backend
            self._backend, self._manifest = writer.backend, writer.manifest
            self._io_lock = writer.io_lock
            self._lease = _shared_writer.lease(self, writer)
        if close_own:
            previous.close()

    def _backend_options(self) -> BaseModel:
        backend_cls = type(self._backend)
        return backend_cls.Options(**self._manifest.backend_options)

    # -- persistence ----------------------------------------------------------------------

    def flush(self) -> None:
        """Make every row written so far durable, ongoing episodes included.

        Finalized episodes are durable as soon as they are written; this covers the rest.
        A no-op for backends that keep nothing on disk.
        """
        if isinstance(self._backend, SupportsFlush):
            with self._io_lock:
                self._backend.flush()

    def refresh(self) -> None:
        """See episodes that another process wrote since this dataset was opened."""
        refresh = getattr(self._backend, "refresh", None)
        if refresh is not None:
            refresh()

    def copy_to(
        self,
        path: str | os.PathLike[str] | None,
        *,
        backend: str | None = None,
        progress: bool = False,
        resume: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Dataset:
        """Copy every episode to a new dataset, possibly on another backend.

        Episode ids, flags and ongoing state are kept; reads of the copy equal reads of
        the original. Finalized episodes go to a stored target in batches of about
        64 MiB (one commit each where the backend supports it), so memory stays bounded
        by that or by the largest episode.

        A stored copy is marked incomplete until it is done: an interrupted copy is
        refused by :meth:`open`, replaced by running the copy again, or finished by
        ``resume=True``, which keeps the episodes already copied (their lengths and
        flags must match this dataset's) and copies the rest. ``path`` may be an
        object-storage URL, reached with ``storage_options``.
        """
        if path is not None:
            path = location.normalize(path, storage_options)
        return _bulk.copy(
            self, path, backend=backend, progress=progress, resume=resume, options=options
        )

    def reopen_for_reading(self) -> Dataset:
        """A fresh read-only handle on the same stored dataset (itself when in memory)."""
        folder = self.location
        if folder is None:
            return self
        if location.is_remote(folder):
            # the manifest in memory: a fork()ed DataLoader worker must not reach object
            # storage through TensorStore itself (the backend reads through a helper)
            store = type(self._backend).open(folder, self._backend_options(), writable=False)  # type: ignore[attr-defined]
            return Dataset(store, self._manifest, read_only=True)
        # this handle has it open already, incomplete or not
        return Dataset.open(folder, read_only=True, allow_incomplete=True)

    def __getstate__(self) -> dict[str, Any]:
        # stored datasets travel as their location and reopen read-only on arrival;
        # memory datasets travel whole (DataLoader workers under fork never pickle)
        folder = self.location
        if folder is not None:
            return {"location": folder}
        return {"backend": self._backend, "manifest": self._manifest}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "location" in state:
            opened = Dataset.open(state["location"], read_only=True, allow_incomplete=True)
            self.__dict__.update(opened.__dict__)
        else:
            self.__init__(state["backend"], state["manifest"])  # type: ignore[misc]

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Release the backend and the writer lock; ongoing episodes stay ongoing.

        Of several handles on one folder in this process, the last one to close (or be
        garbage-collected) closes the shared backend and releases the lock.
        """
        self.flush()
        lease, self._lease = self._lease, None
        if lease is not None:
            lease()
        else:
            self._backend.close()
        hooks.get_plugin_manager().hook.after_dataset_closed(dataset=self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _plugin_version(kind: PluginKind, name: str) -> PluginVersion:
    for info in registry.list_plugins(kind):
        if info.name == name and info.distribution is not None:
            return PluginVersion(
                distribution=info.distribution, version=info.version or "", role=kind
            )
    return PluginVersion(distribution="(registered at runtime)", version="", role=kind)

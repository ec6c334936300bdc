"""The :class:`Dataset` and :class:`Episode`: the entry points of the public API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self

from episodata_core import _bulk, _copy, _creation, _shared_writer, hooks, location
from episodata_core._access import DatasetAccess
from episodata_core.episode import Episode
from episodata_core.errors import ArgumentError, DatasetStateError
from episodata_core.manifest import Manifest, read_manifest, write_manifest
from episodata_core.protocols import SupportsFlush, supports_persistence
from episodata_core.sampling.index import WindowSpec, check_pad
from episodata_core.sampling.segments import SegmentDataset
from episodata_core.sampling.stream import SegmentStream
from episodata_core.sampling.transitions import TransitionSampler
from episodata_core.writers import ActionOutEpisodeWriter, EpisodeWriter, VectorEpisodeWriter

if TYPE_CHECKING:
    import os
    import weakref
    from collections.abc import Iterable, Iterator

    from episodata_core._shared_writer import SharedWriter
    from episodata_core.normalize import Alignment
    from episodata_core.protocols import StorageBackend
    from episodata_core.sampling.index import EpisodeFilter, Pad
    from episodata_core.schema import DatasetSchema
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
        # the backend and the lock that serializes calls into it (between the caller's
        # writes and read-ahead threads); rebound to the shared writer's when this handle
        # joins one
        self._access = DatasetAccess(backend)
        self._manifest = manifest
        self._read_only = read_only
        self._lease: weakref.finalize[[SharedWriter], object] | None = None
        self._transitions = TransitionSampler(self._access)
        self._resolved_fields: dict[str | None, tuple[str, ...]] = {}
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
        return _creation.create(
            cls, schema, path, backend=backend, metadata=metadata, options=options
        )[0]

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
        return _creation.open_at(
            cls,
            location.normalize(path, storage_options),
            read_only=read_only,
            allow_incomplete=allow_incomplete,
            options=options,
        )

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
        return self._access.backend.schema

    @property
    def manifest(self) -> Manifest:
        """The manifest: backend, schema, metadata and provenance."""
        return self._manifest

    @property
    def backend(self) -> StorageBackend:
        """The backend instance that stores the rows."""
        return self._access.backend

    @property
    def access(self) -> DatasetAccess:
        """The backend, the lock that serializes calls into it, and episode-table snapshots.

        What this handle's writers and samplers read and write through; a plugin that
        reads around the Dataset API (a loader, say) takes ``access.lock`` around every
        backend call, as they do.
        """
        return self._access

    @property
    def location(self) -> str | None:
        """The dataset folder, or ``None`` for an in-memory dataset."""
        backend = self._access.backend
        return backend.location if supports_persistence(backend) else None

    @property
    def read_only(self) -> bool:
        """Whether writes are refused."""
        return self._read_only

    @property
    def num_episodes(self) -> int:
        """Number of episodes, finalized and ongoing."""
        return len(self._access.backend.episode_table())

    def __len__(self) -> int:
        return self.num_episodes

    @property
    def num_steps(self) -> int:
        """Total number of transitions over all episodes."""
        return int(self._access.backend.episode_table().length.sum())

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
            self._access,
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
        return self._transitions.sample(
            batch_size, seed=seed, fields=self._field_keys(fields), filter=filter
        )

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
        new = _bulk.checked(episode, self.schema, f"episode {self.num_episodes}", alignment)
        with self._access.lock:
            index = self._access.backend.add_episode(
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
            raise ArgumentError(
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
        return _bulk.add_checked(
            self._access, episodes, alignment, name_items, self._after_episode_written
        )

    def new_episode(
        self, observation: Any, infos: Mapping[str, Any] | None = None
    ) -> EpisodeWriter:
        """Start an episode at its reset observation; returns its step writer."""
        self._prepare_write()
        return EpisodeWriter.start(
            self._access, observation, infos, on_finalized=self._after_episode_written
        )

    def new_action_out_episode(self) -> ActionOutEpisodeWriter:
        """A writer for recorders that log the action taken *at* each observation."""
        self._prepare_write()
        return ActionOutEpisodeWriter(self._access, on_finalized=self._after_episode_written)

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
        return VectorEpisodeWriter(
            self._access,
            observations,
            infos,
            on_finalized=self._after_episode_written,
            autoreset_mode=autoreset_mode,
        )

    def resume_episode(self, index: int) -> EpisodeWriter:
        """The writer of an ongoing episode, to continue adding steps."""
        self._prepare_write()
        episode = self.episode(index)
        if not episode.ongoing:
            raise DatasetStateError(
                f"episode {episode.index} is finalized and cannot be resumed; "
                "start a new one with new_episode()"
            )
        return EpisodeWriter.resume(
            self._access, episode.index, on_finalized=self._after_episode_written
        )

    def _after_episode_written(self, index: int) -> None:
        hooks.call_hook("after_episode_written", dataset=self, episode=index)

    def update_metadata(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the dataset metadata and rewrite the manifest atomically."""
        self._prepare_write()
        self._manifest.metadata.update(values)
        hooks.call_hook("before_manifest_written", dataset=self, manifest=self._manifest)
        self._write_manifest()

    def _write_manifest(self, *, durable: bool = True) -> None:
        """Persist the manifest (stored datasets); handles that share it take turns.

        ``durable=False`` skips the fsyncs: the file survives a crash of this process,
        not a power loss (for records that only need the former).
        """
        folder = self.location
        if folder is not None:
            with self._access.lock:
                write_manifest(folder, self._manifest, durable=durable)

    def _prepare_write(self) -> None:
        """Refuse writes to read-only datasets; join this process's writer on the first write.

        The first handle to write takes the writer lock and opens the backend writable
        (which recovers from a crashed writer); later handles share both.
        """
        if self._read_only:
            # a backend that can never write (an older format generation) says why
            reason = getattr(self._access.backend, "read_only_reason", None)
            raise DatasetStateError(
                reason
                or f"{self.location!r} was opened with read_only=True; open it again without "
                "it to write"
            )
        if self._lease is not None:
            return
        folder = self.location
        if folder is None:
            return
        writer, reopened = _creation.take_writer(self._access, folder, self._manifest)
        # a writer this process had already: the read-only instance is still open
        self._join(writer, close_own=not reopened)

    def _join(self, writer: SharedWriter, *, close_own: bool = False) -> None:
        """Use ``writer``'s backend, manifest and io lock from now on, holding a lease.

        ``close_own``: close the backend this handle used until now.
        """
        with self._access.lock:
            previous = self._access.rebind(writer.backend, writer.io_lock)
            self._manifest = writer.manifest
            self._lease = _shared_writer.lease(self, writer)
        if close_own:
            previous.close()

    # -- persistence ----------------------------------------------------------------------

    def flush(self) -> None:
        """Make every row written so far durable, ongoing episodes included.

        Finalized episodes are durable as soon as they are written; this covers the rest.
        A no-op for backends that keep nothing on disk.
        """
        backend = self._access.backend
        if isinstance(backend, SupportsFlush):
            with self._access.lock:
                backend.flush()

    def refresh(self) -> None:
        """See episodes that another process wrote since this dataset was opened."""
        access = self._access
        # under the lock: a stream's read-ahead thread may be reading from the backend,
        # and a refresh swaps what the backend reads from (a read across it saw zeros)
        with access.lock:
            backend = access.backend
            if supports_persistence(backend):
                backend.refresh()

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
        return _copy.copy_dataset(
            self, path, backend=backend, progress=progress, resume=resume, options=options
        )

    def reopen_for_reading(self) -> Dataset:
        """A fresh read-only handle on the same stored dataset (itself when in memory)."""
        folder = self.location
        if folder is None:
            return self
        if location.is_remote(folder):
            return _creation.reopen_remote(type(self), folder, self.backend, self._manifest)
        # this handle has it open already, incomplete or not
        return Dataset.open(folder, read_only=True, allow_incomplete=True)

    def __getstate__(self) -> dict[str, Any]:
        # stored datasets travel as their location and reopen read-only on arrival;
        # memory datasets travel whole (DataLoader workers under fork never pickle)
        folder = self.location
        if folder is not None:
            return {"location": folder}
        return {"backend": self._access.backend, "manifest": self._manifest}

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
            self._access.backend.close()
        hooks.call_hook("after_dataset_closed", dataset=self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

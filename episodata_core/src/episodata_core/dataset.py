"""The :class:`Dataset` and :class:`Episode`: the entry points of the public API."""

from __future__ import annotations

from importlib import metadata as importlib_metadata
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from episodata_core import hooks, registry
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.manifest import Manifest, PluginVersion, Provenance
from episodata_core.normalize import Alignment, split_episode, to_rows
from episodata_core.schema import DatasetSchema
from episodata_core.views import Flags, Segment, Transition
from episodata_core.writers import ActionOutEpisodeWriter, EpisodeWriter, VectorEpisodeWriter

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from episodata_core.protocols import StorageBackend
    from episodata_core.writers import AutoresetMode

__all__ = ["Dataset", "Episode"]


class Dataset:
    """Episodes that share one schema, stored by one backend.

    Create one with :meth:`create` or :meth:`from_episodes`. Reads go through
    :meth:`episode`; writes through :meth:`new_episode` (step by step) or
    :meth:`add_episode` (a whole episode at once).
    """

    def __init__(self, backend: StorageBackend, manifest: Manifest) -> None:
        self._backend = backend
        self._manifest = manifest

    # -- creation -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        schema: DatasetSchema,
        path: str | None = None,
        *,
        backend: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Dataset:
        """Create an empty dataset.

        Parameters
        ----------
        schema
            The fields every episode has.
        path
            Where to store the dataset; ``None`` keeps it in memory.
        backend
            A registered backend name; ``"memory"`` without a path, ``"zarr"`` with one.
        metadata
            JSON-serializable dataset metadata, stored in the manifest.
        **options
            The backend's options (validated by its ``Options`` model).

        Examples
        --------
        >>> schema = DatasetSchema([FieldSpec("state", shape=(3,), dtype="float32")])
        >>> dataset = Dataset.create(schema)
        """
        if not isinstance(schema, DatasetSchema):
            raise SchemaError(
                f"schema: expected a DatasetSchema, got {type(schema).__name__}; build one "
                "with DatasetSchema([...]) or DatasetSchema.infer(episode)"
            )
        name = backend or ("memory" if path is None else "zarr")
        backend_cls = registry.get_backend(name)
        store = backend_cls.create(
            schema, None if path is None else str(path), backend_cls.Options(**options)
        )
        manifest = Manifest(
            backend=name,
            schema=schema,
            metadata=dict(metadata or {}),
            provenance=Provenance(
                episodata_version=_version("episodata-core"),
                plugins=[_plugin_version(backend_cls, "backend")],
            ),
        )
        dataset = cls(store, manifest)
        hooks.get_plugin_manager().hook.before_manifest_written(dataset=dataset, manifest=manifest)
        hooks.get_plugin_manager().hook.after_dataset_created(dataset=dataset)
        return dataset

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
        **options: Any,
    ) -> Dataset:
        """Create a dataset holding ``episodes`` (bulk dicts, see :meth:`add_episode`).

        The schema is inferred from the first episode unless given.
        """
        iterator = iter(episodes)
        first = next(iterator, None)
        if schema is None:
            if first is None:
                raise SchemaError("from_episodes: no episodes to infer a schema from; pass schema=")
            schema = DatasetSchema.infer(first)
        dataset = cls.create(schema, path, backend=backend, metadata=metadata, **options)
        if first is not None:
            dataset.add_episode(first, alignment=alignment)
            for episode in iterator:
                dataset.add_episode(episode, alignment=alignment)
        return dataset

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

    # -- writes ---------------------------------------------------------------------------

    def add_episode(self, episode: Mapping[str, Any], *, alignment: Alignment | None = None) -> int:
        """Write a complete episode from a bulk dict; returns its id.

        Action-in dicts give ``initial_observation`` plus one entry per step in
        ``observations``, ``actions``, ``rewards`` (and ``infos`` with ``initial_info``);
        action-out dicts give ``observations`` where each action was taken and an
        optional ``final_observation``. ``terminated``/``truncated`` are scalars or
        per-step flags. Everything is validated before anything is written.
        """
        where = f"episode {self.num_episodes}"
        split = split_episode(episode, self.schema, alignment=alignment, where=where)
        rows = to_rows(split, self.schema, where=where)
        index = self._backend.add_episode(
            rows, terminated=split.terminated, truncated=split.truncated
        )
        self._after_episode_written(index)
        return index

    def new_episode(
        self, observation: Any, infos: Mapping[str, Any] | None = None
    ) -> EpisodeWriter:
        """Start an episode at its reset observation; returns its step writer."""
        return EpisodeWriter.start(self, observation, infos)

    def new_action_out_episode(self) -> ActionOutEpisodeWriter:
        """A writer for recorders that log the action taken *at* each observation."""
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
        return VectorEpisodeWriter(self, observations, infos, autoreset_mode=autoreset_mode)

    def resume_episode(self, index: int) -> EpisodeWriter:
        """The writer of an ongoing episode, to continue adding steps."""
        episode = self.episode(index)
        if not episode.ongoing:
            raise DatasetStateError(
                f"episode {episode.index} is finalized and cannot be resumed; "
                "start a new one with new_episode()"
            )
        return EpisodeWriter.resume(self, episode.index)

    def _after_episode_written(self, index: int) -> None:
        hooks.get_plugin_manager().hook.after_episode_written(dataset=self, episode=index)

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Release the backend; ongoing episodes stay ongoing."""
        self._backend.close()
        hooks.get_plugin_manager().hook.after_dataset_closed(dataset=self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Episode:
    """One episode of a dataset: its flags, length and transition reads."""

    __slots__ = ("_dataset", "index")

    def __init__(self, dataset: Dataset, index: int) -> None:
        self._dataset = dataset
        self.index = index

    def _status(self) -> tuple[int, bool, bool, bool]:
        table = self._dataset.backend.episode_table()
        i = self.index
        return (
            int(table.length[i]),
            bool(table.terminated[i]),
            bool(table.truncated[i]),
            bool(table.ongoing[i]),
        )

    def __len__(self) -> int:
        """T, the number of transitions written so far."""
        return self._status()[0]

    @property
    def terminated(self) -> bool:
        """Whether the episode ended in a terminal state."""
        return self._status()[1]

    @property
    def truncated(self) -> bool:
        """Whether the episode was cut short (a time limit, a crash, a dropped step)."""
        return self._status()[2]

    @property
    def ongoing(self) -> bool:
        """Whether steps may still be added."""
        return self._status()[3]

    def __repr__(self) -> str:
        length, terminated, truncated, ongoing = self._status()
        state = "ongoing" if ongoing else f"terminated={terminated}, truncated={truncated}"
        return f"Episode({self.index}, len={length}, {state})"

    def _present_fields(self, fields: str | Iterable[str] | None) -> tuple[str, ...]:
        table = self._dataset.backend.episode_table()
        chosen = self._dataset.schema.resolve(fields)
        return tuple(
            spec.qualified_key
            for spec in chosen
            if spec.qualified_key not in table.present
            or table.present[spec.qualified_key][self.index]
        )

    def read(self, fields: str | Iterable[str] | None = None) -> Segment:
        """Every transition of the episode: ``obs`` ``[T, ...]``, ``all_obs`` ``[T + 1, ...]``."""
        return self.segment(0, None, fields=fields)

    def segment(
        self,
        start: int | None = 0,
        stop: int | None = None,
        *,
        fields: str | Iterable[str] | None = None,
    ) -> Segment:
        """Transitions ``[start, stop)``, with Python's slice rules for negatives and ``None``."""
        length, terminated, truncated, ongoing = self._status()
        first, last, _ = slice(start, stop).indices(length)
        last = max(first, last)
        rows = self._dataset.backend.read_rows(
            self.index, first, last + 1, self._present_fields(fields)
        )
        flags = _episode_flags(last - first, last == length and not ongoing, terminated, truncated)
        return Segment(self._dataset.schema, rows, flags)

    def step(self, t: int, *, fields: str | Iterable[str] | None = None) -> Transition:
        """Transition ``t`` with the time axis removed (negative ``t`` counts from the end)."""
        length, terminated, truncated, ongoing = self._status()
        position = t + length if t < 0 else t
        if not 0 <= position < length:
            raise IndexError(
                f"step {t} is out of range for episode {self.index} of length {length}"
            )
        rows = self._dataset.backend.read_rows(
            self.index, position, position + 2, self._present_fields(fields)
        )
        is_last = position == length - 1 and not ongoing
        flags = Flags(
            np.bool_(is_last and terminated), np.bool_(is_last and truncated), np.bool_(True)
        )
        return Transition(self._dataset.schema, rows, flags)


def _episode_flags(count: int, reaches_end: bool, terminated: bool, truncated: bool) -> Flags:
    term = np.zeros(count, dtype=bool)
    trunc = np.zeros(count, dtype=bool)
    if reaches_end and count:
        term[-1], trunc[-1] = terminated, truncated
    return Flags(term, trunc, np.ones(count, dtype=bool))


def _version(distribution: str) -> str:
    try:
        return importlib_metadata.version(distribution)
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


def _plugin_version(plugin: type, role: str) -> PluginVersion:
    module = plugin.__module__.split(".")[0]
    distributions = importlib_metadata.packages_distributions().get(module, [])
    name = distributions[0] if distributions else module
    return PluginVersion(distribution=name, version=_version(name), role=role)

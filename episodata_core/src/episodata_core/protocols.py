"""The plugin contract: what backends, samplers, importers and exporters provide.

Every plugin class declares ``name`` (its registered name), a one-line ``description``
and an ``Options`` Pydantic model that validates its configuration section; the core
passes a plugin only instances of its own ``Options`` (see
:func:`~episodata_core._options.validate_options`). Optional abilities are
``Supports*`` Protocols that the core checks with ``isinstance`` (or, for
:class:`SupportsPersistence`, with :func:`supports_persistence`, which narrows the type),
and hints are class-level flags on :class:`StorageBackend`; the core never asks which
concrete plugin it is talking to.

Backends speak in *rows* (data-model.md §2): an episode of T transitions has T + 1 rows,
row 0 holds the reset observation and hidden zero action/reward, and every field of an
episode has the same number of rows. Fields are addressed by
:attr:`~episodata_core.schema.FieldSpec.qualified_key`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from typing import Self

    from pydantic import BaseModel
    from typing_extensions import TypeIs

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema
    from episodata_core.selection import Selection
    from episodata_core.transfer import ImportResult

__all__ = [
    "DEFAULT_PREFETCH",
    "OPTIONAL_FLAGS",
    "EpisodeRows",
    "EpisodeTable",
    "Exporter",
    "GatherRequest",
    "Importer",
    "PersistentBackend",
    "Rows",
    "Sampler",
    "StorageBackend",
    "SupportsAddEpisodes",
    "SupportsAppendStep",
    "SupportsFlush",
    "SupportsPersistence",
    "SupportsReadFields",
    "SupportsVerify",
    "supports_persistence",
]

Rows = Mapping[str, npt.NDArray[Any]]
"""Arrays keyed by qualified field key, each ``[n_rows, *field.shape]`` of the field dtype."""


@dataclass(frozen=True)
class EpisodeTable:
    """A snapshot of the per-episode index; every array is ``[num_episodes]``.

    ``length`` counts transitions (rows - 1). ``present`` maps each optional field's
    qualified key to whether the episode stores it; required fields are always present.
    """

    length: npt.NDArray[np.int64]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    ongoing: npt.NDArray[np.bool_]
    present: Mapping[str, npt.NDArray[np.bool_]] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.length.shape[0])


@dataclass(frozen=True)
class EpisodeRows:
    """A complete, finalized episode for :meth:`SupportsAddEpisodes.add_episodes`."""

    rows: Rows
    terminated: bool
    truncated: bool


@dataclass(frozen=True)
class GatherRequest:
    """A batch of equally long row windows to read in one backend call.

    Selection ``b`` copies rows ``starts[b] : starts[b] + counts[b]`` of episode
    ``episodes[b]`` to output rows ``offsets[b] : offsets[b] + counts[b]``; every other
    output row is zero. The result maps each requested field to ``[B, num_rows, ...]``.
    Windows never leave their episode: ``starts + counts <= rows of the episode``.
    """

    episodes: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    num_rows: int
    fields: tuple[str, ...]

    @property
    def is_dense(self) -> bool:
        """Whether every selection fills all ``num_rows`` rows (no padding needed)."""
        return bool(np.all(self.counts == self.num_rows))

    def __len__(self) -> int:
        return int(self.episodes.shape[0])


class StorageBackend(Protocol):
    """Stores episodes as rows and reads windows of them back.

    Writes are validated by the core before they arrive here; a backend may assume
    every array has the schema's dtype and per-step shape. Reads return arrays that the
    caller must treat as read-only (they may be views of the backend's buffers).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type[BaseModel]]
    default_prefetch: ClassVar[int]
    """Batches a segment stream reads ahead when the caller does not say (optional).

    0 where a gather is a copy in this process's memory that holds the GIL throughout (a
    read-ahead thread could not overlap it with anything and would only add its
    hand-over cost), a positive count (:data:`DEFAULT_PREFETCH`) where reads wait on I/O
    or decoding that releases the GIL.
    """

    @classmethod
    def create(cls, schema: DatasetSchema, location: str | None, options: BaseModel) -> Self:
        """Create an empty dataset with ``schema`` at ``location`` (``None``: no location).

        ``options`` is an instance of this class's ``Options``.
        """
        ...

    @property
    def schema(self) -> DatasetSchema:
        """The schema the backend was created with."""
        ...

    def episode_table(self) -> EpisodeTable:
        """Lengths and flags of every episode, finalized and ongoing, by episode id."""
        ...

    def start_episode(self, rows: Rows) -> int:
        """Begin an ongoing episode with its first rows (at least the reset row).

        Optional fields missing from ``rows`` are absent from the episode. Returns the new
        episode id, which is ``num_episodes`` before the call.
        """
        ...

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Append rows (the same fields as :meth:`start_episode`) to an ongoing episode."""
        ...

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Mark an ongoing episode finished; it is durable when this returns."""
        ...

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Write a complete, finalized episode in one step; returns its id."""
        ...

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows ``[start, stop)`` of one episode for the given present fields.

        Each array is either read-only (it may be a view of storage or a cache) or a
        fresh copy the caller may write into; a writable array never shares memory
        with stored data.
        """
        ...

    def gather_rows(self, request: GatherRequest) -> Rows:
        """Read a whole batch of windows; one call per sampled batch.

        The same rule as :meth:`read_rows`: read-only, or writable and the caller's.
        """
        ...

    def close(self) -> None:
        """Release resources; the backend is unusable afterwards."""
        ...


@runtime_checkable
class SupportsFlush(Protocol):
    """A backend that can make buffered ongoing rows durable on request."""

    def flush(self) -> None:
        """Make every row written so far durable, ongoing episodes included."""
        ...


@runtime_checkable
class SupportsAppendStep(Protocol):
    """A backend that appends one step's values without ``[1, ...]`` rows around them.

    The step writers call it instead of :meth:`StorageBackend.append_rows` for a step
    whose every value is already exact (see ``episodata_core._step_plan``); the stored
    row must equal what ``append_rows`` stores for the rows ``value[None]`` (arrays,
    0-d arrays) or ``np.array(value, dtype, ndmin=1)`` (scalars).
    """

    def append_step(self, episode: int, values: Mapping[str, Any]) -> None:
        """Append one row to an ongoing episode, the same fields as ``start_episode``.

        ``values[key]`` is an array of the field's dtype and shape, a NumPy scalar or
        0-d array of its dtype, or a Python bool, int or float that NumPy assigns into
        the dtype exactly. Copy them: the caller may reuse its arrays.
        """
        ...


class SupportsPersistence(Protocol):
    """A backend that stores datasets in a folder and opens them again.

    The core owns the folder's ``manifest.json`` and writer lock; ``create`` receives an
    empty folder that already exists, and writes only backend files inside it. A
    backend opened with ``writable=False`` never changes a file, so any number of
    readers can open a dataset while one writer appends. Checked with
    :func:`supports_persistence`, since ``isinstance`` cannot see classmethods.
    """

    @classmethod
    def open(
        cls,
        location: str,
        options: BaseModel,
        *,
        writable: bool,
        schema: DatasetSchema | None = None,
    ) -> Self:
        """Open the dataset at ``location``; a writable open recovers after a crash.

        ``options`` is an instance of this class's ``Options``. The core passes the
        ``schema`` of the folder's ``manifest.json``; ``None`` (a direct call) leaves
        the backend to read it.
        """
        ...

    @property
    def location(self) -> str:
        """The dataset folder."""
        ...

    def refresh(self) -> None:
        """Re-read the committed index to see episodes other processes added."""
        ...


@runtime_checkable
class SupportsAddEpisodes(Protocol):
    """A backend that writes several complete episodes at the cost of one.

    Without it the core calls :meth:`StorageBackend.add_episode` once per episode, which
    is correct but makes every episode durable on its own (one commit, one fsync each).
    """

    def add_episodes(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        """Write complete, finalized episodes in order; returns their ids.

        The ids are consecutive from ``num_episodes`` before the call, and the stored
        rows, flags and ids equal those of one :meth:`StorageBackend.add_episode` call
        per episode. Every episode is durable when this returns. A crash during the call
        leaves the first k of the episodes (never a later one without an earlier one);
        backends that commit them at once leave all or none. An empty sequence writes
        nothing.
        """
        ...


@runtime_checkable
class SupportsReadFields(Protocol):
    """A backend that answers the 0.2 API's direct reads by field key and row range.

    The built-in backends implement both methods with
    :func:`episodata_core.selection.read_fields` and
    :func:`~episodata_core.selection.episode_length`, which work over
    :meth:`StorageBackend.gather_rows` and :meth:`StorageBackend.episode_table`; a
    backend without them is read the same way through those functions.
    """

    def read_fields(
        self, keys: Iterable[str], selections: Sequence[Selection]
    ) -> list[dict[str, npt.NDArray[Any]]]:
        """One mapping per selection (in order) from each key to its ``[length, ...]`` rows.

        Keys are flat (``"camera"``) or ``role/key``; one batched read serves the whole
        list. A field absent from a selected episode raises ``KeyError``.
        """
        ...

    def episode_length(self, episode_id: int) -> int:
        """Stored rows of the episode: T + 1 (its reset row and one per step)."""
        ...


@runtime_checkable
class SupportsVerify(Protocol):
    """A backend that can check its stored data against checksums taken at write time."""

    def verify(self) -> list[str]:
        """Describe every damaged file, chunk or episode; empty when all is intact."""
        ...


DEFAULT_PREFETCH = 2
"""The read-ahead of a backend whose ``default_prefetch`` is missing or malformed."""

OPTIONAL_FLAGS: Mapping[str, object] = {"default_prefetch": DEFAULT_PREFETCH}
"""Class-level flags of :class:`StorageBackend` that a backend may leave out, with the
value the core then assumes; the registry does not refuse a backend without them."""


def default_prefetch(backend: object) -> int:
    """Batches a segment stream reads ahead on ``backend`` when the caller does not say.

    The backend's :attr:`StorageBackend.default_prefetch`; :data:`DEFAULT_PREFETCH`
    where a backend written before the flag was declared lacks it.
    """
    value = getattr(backend, "default_prefetch", DEFAULT_PREFETCH)
    # a malformed declaration is a hint gone wrong, not a reason to refuse to read
    return value if type(value) is int and value >= 0 else DEFAULT_PREFETCH


def supports_persistence(
    backend: type[StorageBackend] | StorageBackend,
) -> TypeIs[type[PersistentBackend] | PersistentBackend]:
    """Whether a backend class or instance implements :class:`SupportsPersistence`."""
    return all(callable(getattr(backend, name, None)) for name in ("open", "refresh"))


class PersistentBackend(StorageBackend, SupportsPersistence, Protocol):
    """A :class:`StorageBackend` that also implements :class:`SupportsPersistence`."""


class Sampler(Protocol):
    """Chooses which segments a batch contains.

    ``index`` is the segment index of the stream (``len(index)`` windows); the result is
    ``[batch_size]`` integer positions into it.
    """

    def sample(self, index: Sized, batch_size: int) -> npt.NDArray[np.integer[Any]]:
        """Return ``[batch_size]`` window positions in ``[0, len(index))``."""
        ...


class Importer(Protocol):
    """Reads episodes from a foreign source (a file or folder) into a dataset.

    Importers convert the source's alignment themselves and write action-in episodes
    (formats.md §0.1); :func:`episodata_core.transfer.import_dataset` runs them.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type[BaseModel]]

    def read_schema(self, source: str, options: BaseModel) -> DatasetSchema:
        """The schema the episodes of ``source`` will have; reads headers only."""
        ...

    def import_into(self, source: str, dataset: Dataset, options: BaseModel) -> ImportResult:
        """Validate ``source``, then append its episodes to ``dataset``."""
        ...


class Exporter(Protocol):
    """Writes one or more labelled datasets to a foreign format at ``destination``."""

    name: ClassVar[str]
    description: ClassVar[str]
    Options: ClassVar[type[BaseModel]]

    def export(self, datasets: Mapping[str, Dataset], destination: str, options: BaseModel) -> Any:
        """Export ``datasets`` (labelled, e.g. by environment name); returns a report."""
        ...

"""An HDF5 storage backend for episodata, written the way a third party writes a plugin.

Installing the distribution registers :class:`HDF5Backend` under the name ``"hdf5"``
through the ``episodata.backends`` entry point; nothing else is needed to use it::

    from episodata import Dataset

    dataset = Dataset.create(schema, "runs/cartpole", backend="hdf5")

This module imports only episodata-core, NumPy, Pydantic and the standard library, so
listing or selecting the backend never imports h5py: the engine lives in ``_impl`` and is
imported by the first :meth:`HDF5Backend.create` or :meth:`HDF5Backend.open`.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from episodata_core.authoring import coerce_options
from episodata_core.errors import MissingDependencyError, SchemaError
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType
    from typing import Self

    from episodata_core.protocols import EpisodeTable, GatherRequest, Rows
    from episodata_core.schema import DatasetSchema

    from episodata_plugin_example._impl import Store

__all__ = ["HDF5Backend", "HDF5Options", "__version__"]

__version__ = "0.1.0"


class HDF5Options(BaseModel):
    """Options of the ``hdf5`` backend (a pipeline's ``[store.options]`` table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_bytes: int = Field(
        default=256 * 1024,
        ge=2048,
        description="Target bytes per chunk of a field's HDF5 dataset; a chunk holds "
        "chunk_bytes // row bytes rows (at least 2048 bytes' worth). Used at creation.",
    )
    cache_bytes: int = Field(
        default=16 * 2**20,
        ge=0,
        description="HDF5 chunk cache per field dataset, in bytes.",
    )
    durable: bool = Field(
        default=True,
        description="fsync data.h5 at every commit and the ongoing spill at every flush. "
        "False still survives a killed process, but not a power loss.",
    )


def _engine() -> ModuleType:
    """The h5py-backed engine, imported on first use."""
    try:
        return import_module("episodata_plugin_example._impl")
    except ImportError as err:
        if err.name != "h5py":
            raise
        raise MissingDependencyError(
            "the hdf5 backend needs h5py, which is not installed: "
            "pip install episodata-plugin-example (it depends on h5py) or pip install h5py"
        ) from err


class HDF5Backend:
    """Episodes in one HDF5 file per dataset folder, readable while one process writes.

    Every field is one resizable, chunked HDF5 dataset holding the rows of all finalized
    episodes back to back; a table of commit records says which rows belong to which
    episode, with a checksum per episode and field. Ongoing episodes stay in memory and
    are spilled to a small side file by :meth:`flush`. The distribution's README
    describes the file layout, the commit protocol and crash recovery.

    Examples
    --------
    >>> schema = DatasetSchema([FieldSpec("state", shape=(4,), dtype="float32")])  # doctest: +SKIP
    >>> dataset = Dataset.create(schema, "runs/cartpole", backend="hdf5")  # doctest: +SKIP
    """

    name: ClassVar[str] = "hdf5"
    description: ClassVar[str] = "one HDF5 file per dataset (h5py, SWMR readers)"
    Options: ClassVar[type[BaseModel]] = HDF5Options

    def __init__(self, store: Store) -> None:
        self._store = store

    @classmethod
    def create(cls, schema: DatasetSchema, location: str | None, options: BaseModel) -> Self:
        """Create an empty dataset in the folder ``location`` (which the core made)."""
        if location is None:
            raise SchemaError(
                "the hdf5 backend stores a file and needs a folder: pass path=..., or use "
                "backend='memory' for a dataset without one"
            )
        store: Store = _engine().Store.create(
            Path(location), schema, coerce_options(options, HDF5Options)
        )
        return cls(store)

    @classmethod
    def open(cls, location: str, options: BaseModel, *, writable: bool) -> Self:
        """Open the dataset at ``location``; a writable open recovers after a crash."""
        # imported here: episodata_core.dataset pulls in the registry, hooks and writers
        from episodata_core.dataset import read_manifest

        schema = read_manifest(location).schema
        store: Store = _engine().Store.open(
            Path(location), schema, coerce_options(options, HDF5Options), writable=writable
        )
        return cls(store)

    @property
    def location(self) -> str:
        """The dataset folder."""
        return str(self._store.root)

    def refresh(self) -> None:
        """Read the commit records and the spill again to see other processes' episodes."""
        self._store.refresh()

    def flush(self) -> None:
        """Make ongoing episodes durable: rewrite the spill if any changed."""
        self._store.flush()

    def verify(self) -> list[str]:
        """Check every stored byte against what was recorded at write time."""
        return self._store.verify()

    def close(self) -> None:
        """Spill ongoing episodes (writer) and close the file."""
        self._store.close()

    @property
    def schema(self) -> DatasetSchema:
        """The dataset schema."""
        return self._store.schema

    def episode_table(self) -> EpisodeTable:
        """Lengths and flags of every episode, finalized and ongoing, by id."""
        return self._store.episode_table()

    def start_episode(self, rows: Rows) -> int:
        """Begin an ongoing episode (kept in memory until a flush or a commit)."""
        return self._store.start_episode(rows)

    def append_rows(self, episode: int, rows: Rows) -> None:
        """Append rows to an ongoing episode."""
        self._store.append_rows(episode, rows)

    def finalize_episode(self, episode: int, *, terminated: bool, truncated: bool) -> None:
        """Commit an ongoing episode; it is durable when this returns."""
        self._store.finalize_episode(episode, terminated=terminated, truncated=truncated)

    def add_episode(self, rows: Rows, *, terminated: bool, truncated: bool) -> int:
        """Commit a complete episode; it is durable when this returns."""
        return self._store.add_episode(rows, terminated=terminated, truncated=truncated)

    def read_rows(self, episode: int, start: int, stop: int, fields: Sequence[str]) -> Rows:
        """Rows ``[start, stop)`` of one episode, read-only."""
        return self._store.read_rows(episode, start, stop, fields)

    def gather_rows(self, request: GatherRequest) -> Rows:
        """A batch of windows, ``[B, num_rows, ...]`` per field, in one read per field."""
        return self._store.gather_rows(request)

    def __repr__(self) -> str:
        return f"HDF5Backend({self.location!r})"

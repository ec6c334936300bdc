"""What every part of a :class:`~episodata_core.dataset.Dataset` handle shares.

``Dataset`` is one public class whose method groups live in concept modules
(``_dataset_reads``, ``_dataset_writes``, ``_dataset_lifecycle``); each group is a base
class over :class:`_DatasetBase`, which declares the state they share and the few
members more than one group uses (the schema, the episode table, ``flush``). The groups
are only ever mixed into ``Dataset``: :attr:`_DatasetBase._dataset` is the one place
that says so to the type checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from episodata_core.episode import Episode
from episodata_core.protocols import SupportsFlush, supports_persistence

if TYPE_CHECKING:
    import weakref
    from collections.abc import Iterator

    from episodata_core._access import DatasetAccess
    from episodata_core._shared_writer import SharedWriter
    from episodata_core.dataset import Dataset
    from episodata_core.manifest import Manifest
    from episodata_core.protocols import StorageBackend
    from episodata_core.schema import DatasetSchema

__all__ = ["_DatasetBase"]


class _DatasetBase:
    """The state of a dataset handle and the members every method group reads."""

    # set by Dataset.__init__; _access and _manifest are rebound when the handle joins
    # this process's shared writer of its folder
    _access: DatasetAccess
    _manifest: Manifest
    _read_only: bool
    _lease: weakref.finalize[[SharedWriter], object] | None

    @property
    def _dataset(self) -> Dataset:
        # the functions the groups call (stats, copies, segment datasets) take the whole
        # facade, and a group is never used without it
        return cast("Dataset", self)

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
            yield Episode(self._dataset, index)

    def __repr__(self) -> str:
        return (
            f"Dataset(backend={self._manifest.backend!r}, episodes={self.num_episodes}, "
            f"fields={list(self.schema.qualified_keys)})"
        )

    def episode(self, index: int) -> Episode:
        """The episode with this id; negative ids count from the end."""
        count = self.num_episodes
        position = int(index)
        if position < 0:
            position += count
        if not 0 <= position < count:
            raise IndexError(f"episode {index} does not exist (the dataset has {count} episodes)")
        return Episode(self._dataset, position)

    def flush(self) -> None:
        """Make every row written so far durable, ongoing episodes included.

        Finalized episodes are durable as soon as they are written; this covers the rest.
        A no-op for backends that keep nothing on disk.
        """
        backend = self._access.backend
        if isinstance(backend, SupportsFlush):
            with self._access.lock:
                backend.flush()

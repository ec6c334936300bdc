"""The :class:`Dataset` and :class:`Episode`: the entry points of the public API.

``Dataset`` is one class; its method groups live in one module per concept and are its
bases: the state every group shares (``_dataset_base``), reading and sampling
(``_dataset_reads``), writing (``_dataset_writes``), and persistence and closing
(``_dataset_lifecycle``). This module holds what makes a handle: the constructor,
creating and opening, and reopening (for readers and for pickling).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from episodata_core import _bulk, _creation, location
from episodata_core._access import DatasetAccess
from episodata_core._dataset_lifecycle import _DatasetLifecycle
from episodata_core._dataset_reads import _DatasetReads
from episodata_core._dataset_writes import _DatasetWrites
from episodata_core.manifest import Manifest, read_manifest
from episodata_core.sampling.transitions import TransitionSampler

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Mapping

    from episodata_core._shared_writer import SharedWriter
    from episodata_core.normalize import Alignment
    from episodata_core.protocols import StorageBackend
    from episodata_core.schema import DatasetSchema

# read_manifest lives in manifest.py; backends import it from here too
__all__ = ["Dataset", "read_manifest"]


class Dataset(_DatasetLifecycle, _DatasetWrites, _DatasetReads):
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
        self._lease = None
        self._transitions = TransitionSampler(self._access)
        self._resolved_fields = {}
        if writer is not None:
            self._join(writer)

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

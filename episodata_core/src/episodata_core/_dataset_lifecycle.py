"""The persistence and lifecycle members of :class:`~episodata_core.dataset.Dataset`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from episodata_core import _copy, hooks, location
from episodata_core._dataset_base import _DatasetBase
from episodata_core.protocols import supports_persistence

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

    from episodata_core.dataset import Dataset

__all__ = ["_DatasetLifecycle"]


class _DatasetLifecycle(_DatasetBase):
    """Seeing other processes' writes, copying, and closing."""

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
            self._dataset, path, backend=backend, progress=progress, resume=resume, options=options
        )

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

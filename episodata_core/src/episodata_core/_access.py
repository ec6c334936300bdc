"""What writers and samplers use of a dataset handle: its backend, its lock, snapshots.

A :class:`~episodata_core.dataset.Dataset` owns one :class:`DatasetAccess` for its
whole life and hands it to the writers, indexes and streams it makes. When the handle
joins this process's shared writer of its folder (``_shared_writer``), the access object
is rebound in place to the writer's backend and io lock, so everything that holds it
follows without being told.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from episodata_core._step_plan import WriterPlans

if TYPE_CHECKING:
    from episodata_core.protocols import EpisodeTable, StorageBackend
    from episodata_core.schema import DatasetSchema

__all__ = ["DatasetAccess"]


class DatasetAccess:
    """A dataset handle's backend, the lock that serializes calls into it, and snapshots.

    Every backend call goes through ``with access.lock:`` so that the caller's writes,
    other handles' writes and read-ahead threads never interleave inside the backend.
    A read that needs the episode table and rows to agree takes both under one hold of
    the lock (see :func:`~episodata_core.sampling.read.read_windows`).
    """

    __slots__ = ("backend", "lock", "plans")

    def __init__(self, backend: StorageBackend, lock: threading.RLock | None = None) -> None:
        self.backend = backend
        self.lock = threading.RLock() if lock is None else lock
        # the step plans of this handle's writers: most episodes repeat the previous
        # one's fields, so its plan is kept for the next reset
        self.plans = WriterPlans()

    @property
    def schema(self) -> DatasetSchema:
        """The schema of the backend."""
        return self.backend.schema

    def snapshot(self) -> EpisodeTable:
        """The episode table as of now, taken under the lock."""
        with self.lock:
            return self.backend.episode_table()

    def rebind(self, backend: StorageBackend, lock: threading.RLock) -> StorageBackend:
        """Use ``backend`` and ``lock`` from now on; returns the backend used until now.

        Done under the old lock, so no call into the old backend is under way.
        """
        with self.lock:
            previous, self.backend = self.backend, backend
            self.lock = lock
        return previous

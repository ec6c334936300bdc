"""One writer per dataset folder per process, shared by every handle on that folder.

The writer lock (:class:`~episodata_core.location.WriterLock`) keeps other processes
out. Inside a process, every :class:`~episodata_core.dataset.Dataset` handle that writes
to a folder, or is opened while one does, uses the same writable backend, the same lock
and the same io lock, so two handles see one episode table and their writes never
interleave inside a backend call. Each handle holds a lease; the last lease to go (a
``close()``, or the handle being garbage-collected: a ``weakref.finalize``) closes the
backend, which flushes, and releases the lock. So rebinding ``ds = Dataset.open(p)`` in a
notebook, or an exception that drops a handle, never leaves the folder locked.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING

from episodata_core.location import is_remote, writer_lock

if TYPE_CHECKING:
    from collections.abc import Callable

    from episodata_core.location import Lock
    from episodata_core.manifest import Manifest
    from episodata_core.protocols import StorageBackend

__all__ = ["SharedWriter", "abandon", "find_writer", "lease", "open_writer", "register_writer"]

# guards _WRITERS and every lease count; reentrant because a garbage collection that
# runs a finalizer may start while this thread holds it
_REGISTRY_LOCK = threading.RLock()
_WRITERS: dict[str, SharedWriter] = {}


def _key(folder: str | os.PathLike[str]) -> str:
    if is_remote(folder):
        return str(folder)
    # one folder reached through a symlink or a relative path is still one folder
    return os.path.realpath(folder)


class SharedWriter:
    """The writable backend, writer lock and io lock of one folder in this process."""

    def __init__(
        self, folder: str, lock: Lock, backend: StorageBackend, manifest: Manifest
    ) -> None:
        self.key = _key(folder)
        self.lock = lock
        self.backend = backend
        # one manifest object, so that metadata written through one handle is not
        # overwritten by another handle's older copy
        self.manifest = manifest
        # serializes backend access between handles, their writers and read-ahead threads
        self.io_lock = threading.RLock()
        self.leases = 0
        # a fork() child inherits this object but not the right to close the parent's files
        self.pid = os.getpid()

    @property
    def live(self) -> bool:
        """Whether this process owns the writer and a handle still uses it."""
        return self.leases > 0 and self.pid == os.getpid()


def find_writer(folder: str) -> SharedWriter | None:
    """The writer of ``folder`` in this process, if a handle holds one, reserved for a new one.

    The reservation counts as a lease (so a collection in another thread cannot close
    the writer meanwhile): the caller must :func:`lease` it to its handle at once.
    """
    with _REGISTRY_LOCK:
        writer = _WRITERS.get(_key(folder))
        if writer is None or not writer.live:
            return None
        writer.leases += 1
        return writer


def open_writer(
    folder: str, open_backend: Callable[[], StorageBackend], manifest: Manifest
) -> SharedWriter:
    """The writer of ``folder``: this process's, or a new one (lock taken, backend opened).

    Reserved like :func:`find_writer`'s: the caller must :func:`lease` it at once. Raises
    :class:`~episodata_core.errors.DatasetStateError` when another process writes.
    """
    with _REGISTRY_LOCK:
        existing = find_writer(folder)
        if existing is not None:
            return existing
        lock = writer_lock(folder)
        lock.acquire()
        try:
            backend = open_backend()
        except BaseException:
            lock.release()
            raise
        return register_writer(folder, lock, backend, manifest)


def register_writer(
    folder: str, lock: Lock, backend: StorageBackend, manifest: Manifest
) -> SharedWriter:
    """Share a lock and backend that the caller opened (a creation); lease it at once."""
    writer = SharedWriter(folder, lock, backend, manifest)
    writer.leases = 1  # reserved for the creating handle
    with _REGISTRY_LOCK:
        # an entry left for a folder deleted under a live handle gives way to the new one
        _WRITERS[writer.key] = writer
    return writer


def lease(handle: object, writer: SharedWriter) -> weakref.finalize[[SharedWriter], object]:
    """Turn the reservation of ``writer`` into ``handle``'s lease, until closed or collected.

    Calling the returned finalizer gives the lease back (at most once, whoever calls).
    """
    return weakref.finalize(handle, _give_back, writer)


def _give_back(writer: SharedWriter) -> None:
    with _REGISTRY_LOCK:
        writer.leases -= 1
        if writer.leases > 0:
            return
        if _WRITERS.get(writer.key) is writer:
            del _WRITERS[writer.key]
        if writer.pid != os.getpid():
            return  # a fork() child: the files and the lock belong to the parent
        # closed under the registry lock, so a new writer of this folder in another
        # thread waits for the lock to be free instead of finding it held by us
        try:
            with writer.io_lock:
                writer.backend.close()
        finally:
            writer.lock.release()


def abandon(folder: str | os.PathLike[str]) -> None:
    """Drop this process's writer of ``folder`` as a dying process would: unclosed.

    The lock is released and the backend is left as it is, never flushed or closed, so
    the next writer finds what a killed one leaves. For tests that simulate a crash
    inside one process; the abandoned handles must not be used again.
    """
    with _REGISTRY_LOCK:
        writer = _WRITERS.pop(_key(folder), None)
        if writer is not None:
            writer.pid = -1  # its handles' leases now never close the backend
            writer.lock.release()

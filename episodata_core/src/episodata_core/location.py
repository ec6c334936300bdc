"""Dataset locations: the one place where the core touches the filesystem.

A location is a string so that object-store URLs can join later; today it is a local
folder. Backends keep their own files inside it; the core owns ``manifest.json`` and the
writer lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self

from episodata_core._urls import SCHEMES, Location, StorageOptions, Url, parse
from episodata_core.errors import DatasetStateError, EpisodataError, StorageError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import TracebackType

__all__ = [
    "CREATING_NAME",
    "LEASE_NAME",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "SCHEMES",
    "KeyValue",
    "LocalKeyValue",
    "Location",
    "Lock",
    "StorageOptions",
    "Url",
    "WriterLock",
    "check_lease",
    "clear_folder",
    "creation_state",
    "end_creation",
    "fsync_directory",
    "inside",
    "is_remote",
    "key_value",
    "normalize",
    "options_from_pairs",
    "parse",
    "read_bytes",
    "remote_options",
    "resolve",
    "start_creation",
    "write_atomic",
    "write_bytes",
    "write_json_atomic",
    "writer_lock",
]

MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".episodata-writer.lock"
CREATING_NAME = ".episodata-creating"
"""Written right after the lock when a creation starts, removed once the manifest exists."""


LEASE_NAME = ".episodata-lease.json"
"""The writer lease of a dataset on object storage (holder, host, pid, created, expiry)."""


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names object storage (a URL other than ``file://``)."""
    if isinstance(location, Url):
        return True
    text = os.fspath(location)
    return "://" in text and not text.startswith("file://")


def options_from_pairs(pairs: list[str] | None) -> dict[str, str] | None:
    """``--storage-option key=value`` arguments as a dict (validated later, by name)."""
    if not pairs:
        return None
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise StorageError(
                f"--storage-option {pair!r}: expected KEY=VALUE, e.g. endpoint=http://host:9000"
            )
        options[key.strip()] = value.strip()
    return options


def remote_options(
    location: str | os.PathLike[str], options: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """``options`` if ``location`` is on object storage, else ``None`` (for CLI verbs)."""
    return options if is_remote(location) else None


def resolve(location: str | os.PathLike[str] | Location) -> Location:
    """The :class:`Location` of a string from :func:`normalize` (or any path or URL)."""
    if isinstance(location, Location):
        return location
    if isinstance(location, Url):
        return location.location
    return parse(location)


def normalize(
    location: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | StorageOptions | None = None,
) -> str:
    """An absolute, user-expanded path string, or a :class:`Url` for object storage.

    Local folders take no storage options: passing some is an error that says so.
    """
    if isinstance(location, Url) and storage_options is None:
        return location
    parsed = parse(location, storage_options)
    if not parsed.remote:
        if storage_options:
            raise StorageError(
                f"location {parsed.url!r} is a local folder: storage options "
                f"{sorted(dict(StorageOptions.validated(storage_options).model_dump(exclude_defaults=True)))} "
                "apply to object storage only; leave them out"
            )
        return parsed.url
    return Url(parsed)


class KeyValue(Protocol):
    """The small key-value interface for our own metadata (manifest, commit records, lease).

    Keys are relative to the location (``"manifest.json"``, ``"commits/00000001.json"``).
    """

    def get(self, key: str) -> bytes | None:
        """The value, or ``None`` when missing."""

    def stamped(self, key: str) -> tuple[bytes | None, bytes]:
        """The value (``None`` when missing) and a token for :meth:`put_if`."""

    def put(self, key: str, value: bytes, *, durable: bool = True) -> None:
        """Replace ``key`` whole: readers see the old or the new value."""

    def put_if(self, key: str, value: bytes, token: bytes | None) -> bool:
        """Write only if ``key`` is as :meth:`stamped` saw it (``None``: absent); whether written."""

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, sorted."""

    def delete(self, key: str) -> None:
        """Remove ``key`` (missing is fine)."""


class LocalKeyValue:
    """:class:`KeyValue` on a local folder: atomic replace (fsync + rename), ``O_EXCL``."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    def get(self, key: str) -> bytes | None:
        """See :class:`KeyValue`."""
        try:
            return inside(self.folder, key).read_bytes()
        except FileNotFoundError:
            return None

    def stamped(self, key: str) -> tuple[bytes | None, bytes]:
        """See :class:`KeyValue`."""
        value = self.get(key)
        return value, b"" if value is None else value

    def put(self, key: str, value: bytes, *, durable: bool = True) -> None:
        """See :class:`KeyValue`."""
        target = inside(self.folder, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, value, durable=durable)

    def put_if(self, key: str, value: bytes, token: bytes | None) -> bool:
        """See :class:`KeyValue`."""
        # one writer holds the folder's flock, so compare-then-replace cannot race here
        current = self.get(key)
        if (token is None and current is not None) or (token is not None and current != token):
            return False
        self.put(key, value)
        return True

    def list(self, prefix: str = "") -> list[str]:
        """See :class:`KeyValue`."""
        base = inside(self.folder, prefix) if prefix else self.folder
        if not base.is_dir():
            return []
        return sorted(
            str(path.relative_to(self.folder)) for path in base.rglob("*") if path.is_file()
        )

    def delete(self, key: str) -> None:
        """See :class:`KeyValue`."""
        with contextlib.suppress(FileNotFoundError):
            inside(self.folder, key).unlink()


def key_value(location: str | os.PathLike[str] | Location) -> KeyValue:
    """The :class:`KeyValue` of a location from :func:`normalize`."""
    parsed = resolve(location)
    if not parsed.remote:
        return LocalKeyValue(parsed.url)
    from episodata_core._objectstore import ObjectKeyValue

    return ObjectKeyValue(parsed)


def read_bytes(location: str | os.PathLike[str], name: str) -> bytes | None:
    """The bytes of ``name`` in ``location``; ``None`` when missing."""
    return key_value(location).get(name)


def write_bytes(
    location: str | os.PathLike[str], name: str, data: bytes, *, durable: bool = True
) -> None:
    """Replace ``name`` in ``location`` whole (atomically, durably unless told otherwise)."""
    key_value(location).put(name, data, durable=durable)


class Lock(Protocol):
    """One writer at a time: :class:`WriterLock` locally, a lease on object storage."""

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""

    def acquire(self) -> None:
        """Take it, or raise :class:`DatasetStateError` naming the holder."""

    def release(self) -> None:
        """Give it up."""


def writer_lock(location: str | os.PathLike[str]) -> Lock:
    """The one-writer lock of a location: a ``flock`` locally, a lease on object storage."""
    parsed = resolve(location)
    if not parsed.remote:
        return WriterLock(parsed.url)
    parsed.check_writable()
    from episodata_core._objectstore import Lease

    return Lease(parsed)


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Flush a directory entry (a rename or a new file) to disk."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: str | os.PathLike[str], data: bytes, *, durable: bool = True, sync_folder: bool = True
) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, whole.

    The bytes go to a temporary file in the same folder, which is fsynced and renamed
    over the target; the folder is fsynced too so the rename survives a power loss.
    ``sync_folder=False`` leaves that last fsync to the caller, so that one
    :func:`fsync_directory` can cover the renames of several files.
    """
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temporary, target)
    if durable and sync_folder:
        fsync_directory(target.parent)


def write_json_atomic(path: str | os.PathLike[str], document: Any, *, durable: bool = True) -> None:
    """:func:`write_atomic` for a JSON document."""
    write_atomic(path, json.dumps(document, indent=2).encode(), durable=durable)


def inside(root: str | os.PathLike[str], relative: str) -> Path:
    """``root / relative``, refusing paths that escape ``root`` (``..``, absolute, symlinks).

    Use it for every path that comes from a file a stranger may have written.
    """
    base = Path(root).resolve()
    candidate = (base / relative).resolve()
    if Path(relative).is_absolute() or not candidate.is_relative_to(base):
        raise EpisodataError(
            f"path {relative!r} points outside the dataset folder {str(base)!r}; "
            "the dataset may be malicious or damaged"
        )
    return candidate


class WriterLock:
    """An exclusive, advisory lock that one writing process holds on a dataset folder.

    The operating system drops it when the process dies, even by SIGKILL, so a crashed
    writer never leaves a stale lock behind.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self._path = Path(folder) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`DatasetStateError` if another writer has it."""
        if self._fd is not None:
            return
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            folder = str(self._path.parent)
            if holder == str(os.getpid()):
                # handles of one folder share one lock (see _shared_writer); only a lock
                # taken outside them, or the folder under a second name, gets here
                raise DatasetStateError(
                    f"{folder!r} is already being written by this process (pid {holder}) "
                    "through another lock on the same folder (a WriterLock of its own, or the "
                    "folder reached under another name); close that writer first"
                ) from None
            raise DatasetStateError(
                f"{folder!r} is being written by another process (pid {holder}); one "
                "writer at a time. Open it with read_only=True to read"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (closing the file drops it)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def creation_state(folder: str | os.PathLike[str]) -> str:
    """What ``folder`` holds, as a place to create a dataset in.

    ``"absent"``, ``"empty"``, ``"dataset"`` (a manifest: complete or marked incomplete),
    ``"unfinished"`` (a creation that never wrote its manifest: the marker
    :data:`CREATING_NAME`, or nothing but the lock and the marker's temporary file) or
    ``"foreign"`` (anything else: never touched).
    """
    if is_remote(folder):
        from episodata_core._objectstore import creation_state as remote_state

        return remote_state(resolve(folder))
    target = Path(folder)
    if not target.exists() and not target.is_symlink():
        return "absent"
    if target.is_symlink() or not target.is_dir():
        return "foreign"
    names = {entry.name for entry in target.iterdir()}
    if MANIFEST_NAME in names:
        return "dataset"
    if not names:
        return "empty"
    if CREATING_NAME in names or all(
        name == LOCK_NAME or (name.startswith(f".{CREATING_NAME}.") and name.endswith(".tmp"))
        for name in names
    ):
        return "unfinished"
    return "foreign"


def start_creation(folder: str | os.PathLike[str], operation: str) -> None:
    """Write the creation marker; the caller holds the writer lock of ``folder``.

    Not synced: a power loss that drops it leaves a folder that no creation takes over,
    which is the safe side.
    """
    document = {"operation": operation, "pid": os.getpid()}
    if is_remote(folder):
        write_bytes(folder, CREATING_NAME, json.dumps(document).encode())
        return
    write_json_atomic(Path(folder) / CREATING_NAME, document, durable=False)


def end_creation(folder: str | os.PathLike[str]) -> None:
    """Remove the creation marker once the manifest exists (a no-op if it is gone)."""
    if is_remote(folder):
        key_value(folder).delete(CREATING_NAME)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(Path(folder) / CREATING_NAME)


def clear_folder(folder: str | os.PathLike[str]) -> None:
    """Remove everything in ``folder`` but the writer lock, which the caller holds.

    Only for folders this process has just taken over (an unfinished creation or an
    incomplete bulk write): symlinks are removed, never followed. On object storage,
    every object under the prefix but the lease.
    """
    if is_remote(folder):
        from episodata_core._objectstore import clear

        clear(resolve(folder))
        return
    for entry in Path(folder).iterdir():
        if entry.name == LOCK_NAME:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    fsync_directory(folder)


def check_lease(url: str) -> None:
    """Raise unless this process still holds its writer lease on the object-storage ``url``.

    Object stores have no fencing: a writer whose lease expired while it stalled would
    overwrite the chunks of the writer that took over, so a backend checks before it
    writes data. Nothing to check for a location this process holds no lease on.
    """
    from episodata_core._objectstore import check_lease as check

    check(url)

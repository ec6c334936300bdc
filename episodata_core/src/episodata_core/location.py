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
from typing import TYPE_CHECKING, Any, Self

from episodata_core.errors import DatasetStateError, EpisodataError

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "CREATING_NAME",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "WriterLock",
    "clear_folder",
    "creation_state",
    "end_creation",
    "fsync_directory",
    "inside",
    "normalize",
    "start_creation",
    "write_atomic",
    "write_json_atomic",
]

MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".episodata-writer.lock"
CREATING_NAME = ".episodata-creating"
"""Written right after the lock when a creation starts, removed once the manifest exists."""


def normalize(location: str | os.PathLike[str]) -> str:
    """An absolute, user-expanded path string for ``location``."""
    text = os.fspath(location)
    if "://" in text:
        raise EpisodataError(
            f"location {text!r}: URLs are not supported yet; use a local folder path"
        )
    return str(Path(text).expanduser().absolute())


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
    write_json_atomic(Path(folder) / CREATING_NAME, document, durable=False)


def end_creation(folder: str | os.PathLike[str]) -> None:
    """Remove the creation marker once the manifest exists (a no-op if it is gone)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(Path(folder) / CREATING_NAME)


def clear_folder(folder: str | os.PathLike[str]) -> None:
    """Remove everything in ``folder`` but the writer lock, which the caller holds.

    Only for folders this process has just taken over (an unfinished creation or an
    incomplete bulk write): symlinks are removed, never followed.
    """
    for entry in Path(folder).iterdir():
        if entry.name == LOCK_NAME:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    fsync_directory(folder)

"""The dataset folder: file names, listings, leftovers and the append-only commit log.

::

    manifest.json                      owned by the core
    episodes.jsonl                     one JSON line per finalized episode file (below)
    episodes/episode_000000042.npz     finalized episode 42, written once, never changed
    ongoing/episode_000000043.npz      last flushed state of ongoing episode 43

A line of ``episodes.jsonl`` records what was written and its index entry, so that
opening a dataset reads one small file instead of every archive::

    {"file":"episodes/episode_000000042.npz","sha256":"<64 hex>","size":18231,
     "length":99,"terminated":true,"truncated":false,"absent":["observation/depth"]}

The archive is renamed into place before its line is appended, so a line never names a
file that was not written; an archive without a line is a commit interrupted between
the two steps, and the next writable open hashes it and appends the line.

Each flush of an ongoing episode appends a ``"spill"`` line with the checksum of the
spill it is about to rename into place (the protocol is in :mod:`episodata_npz._spills`)::

    {"spill":"ongoing/episode_000000043.npz","sha256":"<64 hex>","size":4242,
     "length":17,"absent":[]}
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from episodata_core.errors import DatasetStateError, EpisodataError, SchemaError
from episodata_core.location import inside

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = [
    "EPISODES",
    "LOG_NAME",
    "ONGOING",
    "CommitLog",
    "LogEntry",
    "SpillEntry",
    "file_name",
    "list_episodes",
    "parse_name",
    "remove_temporaries",
    "sha256_file",
]

EPISODES = "episodes"
ONGOING = "ongoing"
LOG_NAME = "episodes.jsonl"

_NAME = re.compile(r"episode_([0-9]{9,})\.npz")
# the temporary names of episodata_core.location.write_atomic for the files written here
_TEMPORARY = re.compile(r"\.(episode_[0-9]{9,}\.npz|episodes\.jsonl)\.[0-9]+\.tmp")
_TAIL_CHUNK = 1 << 16
# deflate codes a 258-byte match in as little as 2 bits: no member expands more than this
_MAX_EXPANSION = 1032


def file_name(episode: int) -> str:
    """``episode_000000042.npz``: nine digits, more for ids past a billion."""
    return f"episode_{episode:09d}.npz"


def parse_name(name: str) -> int | None:
    """The episode id of a canonical archive name, else ``None``."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    episode = int(match[1])
    return episode if file_name(episode) == name else None


def list_episodes(root: Path, folder: str) -> dict[int, Path]:
    """Archives in ``root/folder`` by episode id; other names are left out.

    Canonical names cannot contain separators or ``..``, so only the folder and
    symbolic links can lead outside the dataset; both are checked with
    :func:`~episodata_core.location.inside`. A missing folder lists as empty.
    """
    base = inside(root, folder)
    found: dict[int, Path] = {}
    try:
        entries = list(os.scandir(base))
    except FileNotFoundError:
        return found
    for entry in entries:
        episode = parse_name(entry.name)
        if episode is None:
            continue
        if entry.is_symlink():
            inside(root, f"{folder}/{entry.name}")
        found[episode] = base / entry.name
    return found


def unexpected_names(root: Path, folder: str) -> list[str]:
    """Names in ``root/folder`` that are neither archives nor dotfiles (``verify`` reports them)."""
    try:
        names = sorted(os.listdir(root / folder))
    except FileNotFoundError:
        return []
    return [
        f"{folder}/{name}"
        for name in names
        if parse_name(name) is None and not name.startswith(".")
    ]


def remove_temporaries(root: Path) -> list[str]:
    """Delete temporary files that a killed writer left behind; returns their names."""
    removed = []
    for folder in (root, root / EPISODES, root / ONGOING):
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for entry in entries:
            if _TEMPORARY.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(entry.name)
    return removed


def sha256_file(path: Path) -> tuple[str, int]:
    """SHA-256 hex digest and size of a file, read in pieces."""
    with open(path, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256")
        return digest.hexdigest(), handle.tell()


class LogEntry(BaseModel):
    """One line of ``episodes.jsonl``: a finalized archive, its checksum and index entry."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    file: str = Field(description="The archive, relative to the dataset folder.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the archive bytes.")
    size: int = Field(ge=0, description="Size of the archive in bytes.")
    length: int = Field(ge=0, description="Transitions of the episode (rows - 1).")
    terminated: bool = Field(description="Whether the episode ended in a terminal state.")
    truncated: bool = Field(description="Whether the episode was cut short.")
    absent: list[str] = Field(
        default_factory=list, description="Optional fields the episode does not store."
    )


class SpillEntry(BaseModel):
    """A ``"spill"`` line: one flush of an ongoing episode, its checksum and rows."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    spill: str = Field(description="The spill, relative to the dataset folder.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the spill bytes.")
    size: int = Field(ge=0, description="Size of the spill in bytes.")
    length: int = Field(ge=0, description="Transitions flushed so far (rows - 1).")
    absent: list[str] = Field(
        default_factory=list, description="Optional fields the episode does not store."
    )


class CommitLog:
    """``episodes.jsonl``, read incrementally and appended to by the one writer.

    Only complete lines count: a reader may see a line that the writer is still
    appending, and a killed writer may leave half a line, which the next writable open
    cuts off. Lines that do not parse are skipped and listed in :attr:`problems`.

    ``row_bytes`` is the size of one row of the schema's required fields: a line whose
    length could not fit in its archive (deflate expands at most 1032-fold) is refused
    when ``strict``, before anything is sized by that length.
    """

    def __init__(self, root: Path, optional: frozenset[str], row_bytes: int = 0) -> None:
        self.path = root / LOG_NAME
        self._root = root
        self._optional = optional
        self._row_bytes = row_bytes
        self._offset = 0
        self._lines = 0
        self._fd: int | None = None
        self.entries: dict[int, LogEntry] = {}
        # the last spill line of each episode that has no "file" line (yet)
        self.spills: dict[int, SpillEntry] = {}
        self.problems: list[str] = []
        self.partial_tail = False

    @property
    def lines_read(self) -> int:
        """How many complete lines :meth:`read_new` has parsed so far."""
        return self._lines

    def read_new(self, *, strict: bool) -> None:
        """Parse the complete lines appended since the last call.

        A line naming a file outside the dataset folder raises when ``strict``; otherwise
        it becomes a problem like any other unreadable line.
        """
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n") + 1
        self.partial_tail = end < len(data)
        for raw in data[:end].split(b"\n")[:-1]:
            self._lines += 1
            self._parse(raw, strict=strict)
        self._offset += end

    def _parse(self, raw: bytes, *, strict: bool) -> None:
        where = f"{LOG_NAME} line {self._lines}"
        model: type[LogEntry | SpillEntry] = SpillEntry if raw.startswith(b'{"spill"') else LogEntry
        try:
            entry = model.model_validate_json(raw)
        except ValidationError as err:
            self.problems.append(f"{where} is not a valid entry ({err.error_count()} errors)")
            return
        file = entry.spill if isinstance(entry, SpillEntry) else entry.file
        try:
            inside(self._root, file)
        except EpisodataError as err:
            if strict:
                raise DatasetStateError(f"{where}: {err}") from err
            self.problems.append(f"{where}: {err}")
            return
        folder, _, name = file.partition("/")
        episode = parse_name(name)
        if folder != (ONGOING if isinstance(entry, SpillEntry) else EPISODES) or episode is None:
            self.problems.append(f"{where} names {file!r}, not an episode archive")
            return
        if not set(entry.absent) <= self._optional:
            required = sorted(set(entry.absent) - self._optional)
            problem = (
                f"{where} records that {file} does not store {required}, which the schema "
                "in manifest.json says are required; the manifest was edited (restore "
                "optional: true for them) or the line was"
            )
            if strict:
                raise SchemaError(problem)
            self.problems.append(problem)
            return
        if self._row_bytes and entry.length + 1 > _MAX_EXPANSION * entry.size // self._row_bytes:
            problem = (
                f"{where} records length {entry.length} for {file}, but {entry.size} bytes "
                f"cannot hold {entry.length + 1} rows of {self._row_bytes} bytes (the required "
                "fields of manifest.json's schema); the line or the manifest was edited or "
                "damaged. Run `episodata verify` on the dataset"
            )
            if strict:
                raise SchemaError(problem)
            self.problems.append(problem)
            return
        if isinstance(entry, SpillEntry):
            if episode not in self.entries:
                self.spills[episode] = entry
            return
        previous = self.entries.get(episode)
        if previous is not None and previous != entry:
            self.problems.append(f"{where} records {entry.file} again, differently")
        self.entries[episode] = entry
        self.spills.pop(episode, None)

    def append(self, episode: int, entry: LogEntry) -> None:
        """Append one line and fsync it; on failure the log is cut back to where it was."""
        self.append_many([(episode, entry)])

    def append_spill(self, episode: int, entry: SpillEntry) -> None:
        """Append one ``"spill"`` line and fsync it; on failure the log is cut back."""
        self._write((entry.model_dump_json() + "\n").encode(), 1)
        self.spills[episode] = entry

    def append_many(self, entries: Sequence[tuple[int, LogEntry]]) -> None:
        """Append one line per entry with one write and one fsync; all or none on failure."""
        data = b"".join((entry.model_dump_json() + "\n").encode() for _, entry in entries)
        self._write(data, len(entries))
        self.entries.update(entries)
        for episode, _ in entries:
            self.spills.pop(episode, None)

    def _write(self, data: bytes, lines: int) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except BaseException:
            os.ftruncate(self._fd, self._offset)
            raise
        self._offset += len(data)
        self._lines += lines

    def repair_tail(self) -> bool:
        """Cut off an incomplete last line (a killed append); whether anything was cut."""
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            return False
        with open(self.path, "rb+") as handle:
            end = size
            while end > 0:
                start = max(0, end - _TAIL_CHUNK)
                handle.seek(start)
                chunk = handle.read(end - start)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    end = start + newline + 1
                    break
                end = start
            if end == size:
                return False
            handle.truncate(end)
            handle.flush()
            os.fsync(handle.fileno())
        return True

    def close(self) -> None:
        """Close the append handle."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

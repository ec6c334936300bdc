"""Spills of ongoing episodes: written, recorded, found again and recovered.

A flush of ongoing episode N writes its rows so far in three durable steps:

1. the archive goes to the temporary ``ongoing/.episode_N.npz.<pid>.tmp``; the file and
   then the ``ongoing/`` folder are fsynced;
2. a ``"spill"`` line with the archive's SHA-256, size, length and absent fields is
   appended to ``episodes.jsonl`` and fsynced (see :mod:`episodata_npz._layout`);
3. the temporary is renamed over ``ongoing/episode_N.npz``.

So the log names every episode that was ever flushed, with the checksum of its latest
spill, before that spill can be read, and whatever stops the writer, a power loss
included, leaves the recorded bytes on disk under one of the two names: the rename needs
no fsync of its own. Readers take a spill as data only when its SHA-256 equals the episode's
last record: the file itself or, between steps 2 and 3 (a writer at work there, or
killed there), the temporary; the next writable open renames that temporary into place.
A torn, older or foreign spill is never read as rows.

**Lost episodes.** A flushed episode that has no archive in ``episodes/`` and whose
recorded spill is missing or damaged is *lost*: ``open`` succeeds and keeps the episode
in the index at its recorded length, still marked ongoing, so its id stays reserved and
no later or new episode takes it; reading, resuming or finalizing it raises
:class:`~episodata_core.errors.DatasetStateError` naming the file, and ``verify`` lists
it. A spill with no record at all (written before records existed) is decoded in full,
which checks every member's CRC-32, and recorded by the next writable open.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from episodata_core.errors import DatasetStateError
from episodata_core.location import fsync_directory, inside
from episodata_npz._archive import EpisodeArchive, EpisodeMeta, checked_meta
from episodata_npz._layout import LOG_NAME, ONGOING, SpillEntry, file_name

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    import numpy.typing as npt

    from episodata_core.schema import FieldSpec
    from episodata_npz._layout import CommitLog

__all__ = [
    "DecodedSpill",
    "FoundSpill",
    "decode_spill",
    "find_spill",
    "recover_spills",
    "write_spill",
]


def write_spill(
    root: Path, log: CommitLog, episode: int, data: bytes, meta: EpisodeMeta, absent: list[str]
) -> None:
    """Make ``data`` the durable spill of ``episode``, recorded first (steps 1 to 3 above)."""
    where = f"{ONGOING}/{file_name(episode)}"
    target = root / where
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    folder = target.parent
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_directory(folder)
        entry = SpillEntry(
            spill=where,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            length=meta.length,
            absent=absent,
        )
        log.append_spill(episode, entry)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    # no folder fsync: a rename lost to a power cut is redone by the next writable open
    os.replace(temporary, target)


@dataclass(frozen=True)
class FoundSpill:
    """What :func:`find_spill` found for one episode."""

    data: bytes | None  # bytes to decode; None when unchanged or when nothing fits
    signature: tuple[int, int, int] | None  # (inode, size, mtime) of ongoing/episode_N.npz
    source: Path | None = None  # where ``data`` was read: the spill or a temporary
    problem: str | None = None  # why nothing fits, for a lost episode
    unchanged: bool = False  # the file is the one loaded before


def find_spill(
    root: Path,
    episode: int,
    record: SpillEntry | None,
    known: tuple[int, int, int] | None = None,
) -> FoundSpill:
    """The bytes of ``episode``'s spill that match ``record``, or why there are none.

    Without a record, the file's bytes are returned as they are (the caller decodes
    them in full). ``known`` is the signature of the spill loaded before: when the file
    still has it, nothing is read.
    """
    where = f"{ONGOING}/{file_name(episode)}"
    path = inside(root, where)
    data = None
    signature = None
    try:
        handle = open(path, "rb")  # noqa: SIM115 (stat and read the same inode)
    except FileNotFoundError:
        pass
    else:
        with handle:
            status = os.fstat(handle.fileno())
            signature = (status.st_ino, status.st_size, status.st_mtime_ns)
            if known is not None and signature == known:
                return FoundSpill(None, signature, unchanged=True)
            data = handle.read()
    if record is None:
        if data is None:
            return FoundSpill(None, None, problem=f"{where} is missing")
        return FoundSpill(data, signature, path)
    if data is not None and _matches(data, record):
        return FoundSpill(data, signature, path)
    for temporary in _temporaries(root, episode):
        try:
            pending = temporary.read_bytes()
        except FileNotFoundError:
            continue  # renamed into place meanwhile
        if _matches(pending, record):
            # a writer between its log line and its rename: the signature stays that
            # of the older file, so the next refresh reads the renamed one
            return FoundSpill(pending, signature, temporary)
    rows = record.length + 1
    if data is None:
        what = "is missing"
    else:
        digest = hashlib.sha256(data).hexdigest()
        what = (
            f"has SHA-256 {digest} ({len(data)} bytes), not the {record.sha256} "
            f"({record.size} bytes) recorded when it was flushed; it is damaged or an older copy"
        )
    return FoundSpill(
        None,
        signature,
        problem=f"{where} {what}: episode {episode} was flushed with {rows} rows (recorded in "
        f"{LOG_NAME}) and never finalized, so the episode is lost; its id stays reserved. "
        "Restore the file from a backup if there is one; run `episodata verify` on the "
        "dataset to list every damaged file",
    )


@dataclass(frozen=True)
class DecodedSpill:
    """A decoded spill: its ``episode/*`` members and the rows of each stored field."""

    meta: EpisodeMeta
    rows: dict[str, npt.NDArray[Any]]


def decode_spill(
    data: bytes, episode: int, record: SpillEntry | None, specs: Mapping[str, FieldSpec]
) -> DecodedSpill:
    """Every member of a spill, checked; raises ``DatasetStateError`` naming the file."""
    where = f"{ONGOING}/{file_name(episode)}"
    required = frozenset(key for key, spec in specs.items() if not spec.optional)
    with EpisodeArchive(io.BytesIO(data), where, specs) as archive:
        meta, fields = checked_meta(archive, where, episode, ongoing=True, required=required)
        if record is not None and (meta.length != record.length or set(record.absent) & fields):
            raise DatasetStateError(
                f"{where}: holds length {meta.length} and fields {sorted(fields)}, but its "
                f"line in {LOG_NAME} records length {record.length} without "
                f"{record.absent}; the line was edited or damaged"
            )
        rows = {key: archive.read(key, meta.length + 1) for key in specs if key in fields}
    return DecodedSpill(meta, rows)


def recover_spills(
    root: Path,
    log: CommitLog,
    finalized: set[int],
    spills: Mapping[int, Path],
    specs: Mapping[str, FieldSpec],
) -> None:
    """Finish flushes a killed writer left between its log line and its rename.

    Also records spills that have no line (written before lines existed) once they
    decode in full. Runs under the writer lock, before temporaries are removed.
    """
    optional = frozenset(key for key, spec in specs.items() if spec.optional)
    for episode, record in sorted(log.spills.items()):
        if episode in finalized:
            continue
        target = root / ONGOING / file_name(episode)
        found = find_spill(root, episode, record)
        if found.source is not None and found.source != target:
            os.replace(found.source, target)  # the temporary holds what the line records
            fsync_directory(target.parent)
    for episode in sorted(spills.keys() - log.spills.keys() - finalized):
        found = find_spill(root, episode, None)
        if found.data is None:
            continue
        try:
            decoded = decode_spill(found.data, episode, None, specs)
        except DatasetStateError:
            continue  # lost; the scan reports it
        log.append_spill(
            episode,
            SpillEntry(
                spill=f"{ONGOING}/{file_name(episode)}",
                sha256=hashlib.sha256(found.data).hexdigest(),
                size=len(found.data),
                length=decoded.meta.length,
                absent=sorted(optional - decoded.rows.keys()),
            ),
        )


def _matches(data: bytes, record: SpillEntry) -> bool:
    return len(data) == record.size and hashlib.sha256(data).hexdigest() == record.sha256


def _temporaries(root: Path, episode: int) -> list[Path]:
    """Temporaries of ``write_spill`` for ``episode`` (any writer pid), plain files only."""
    pattern = re.compile(re.escape(f".{file_name(episode)}.") + r"[0-9]+\.tmp")
    try:
        entries = list(os.scandir(root / ONGOING))
    except FileNotFoundError:
        return []
    return [
        root / ONGOING / entry.name
        for entry in entries
        if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)
    ]

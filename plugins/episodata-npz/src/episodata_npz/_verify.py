"""``verify``: compare the files of a dataset folder with what was recorded at write time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from episodata_core.errors import DatasetStateError, EpisodataError, SchemaError
from episodata_npz._agreement import check_archive
from episodata_npz._archive import EpisodeArchive
from episodata_npz._layout import (
    EPISODES,
    LOG_NAME,
    ONGOING,
    CommitLog,
    LogEntry,
    SpillEntry,
    file_name,
    list_episodes,
    sha256_file,
    unexpected_names,
)
from episodata_npz._spills import decode_spill, find_spill

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from episodata_core.schema import FieldSpec

__all__ = ["verify_folder"]


def verify_folder(
    root: Path, specs: Mapping[str, FieldSpec], optional: frozenset[str], row_bytes: int = 0
) -> list[str]:
    """One line per damaged, missing, unrecorded or unexpected file; empty when intact.

    Finalized archives are re-hashed against ``episodes.jsonl`` and their member headers
    compared with the manifest's schema and the logged length. Spills of ongoing
    episodes are re-hashed against their last ``"spill"`` line and decoded in full; a
    recorded spill that is gone is named, since its episode is lost.
    """
    try:
        # list before reading the log: archives are renamed into place before their line
        # is appended, so only a commit in flight right now can look unrecorded
        finals = list_episodes(root, EPISODES)
        spills = list_episodes(root, ONGOING)
    except EpisodataError as err:
        return [str(err)]
    log = CommitLog(root, optional, row_bytes)
    log.read_new(strict=False)
    problems = list(log.problems)
    if not log.path.is_file():
        problems.append(f"{LOG_NAME}: missing; checksums of finalized episodes are unknown")
    if log.partial_tail:
        problems.append(
            f"{LOG_NAME}: the last line is incomplete (an interrupted append; the next "
            "writable open removes it)"
        )
    problems.extend(
        f"{name}: unexpected file"
        for folder in (EPISODES, ONGOING)
        for name in unexpected_names(root, folder)
    )
    for episode, path in sorted(finals.items()):
        where = f"{EPISODES}/{file_name(episode)}"
        entry = log.entries.get(episode)
        if entry is None:
            problems.append(
                f"{where}: no checksum recorded in {LOG_NAME} (a writer was killed before "
                "recording it, or is recording it now; a writable open records it)"
            )
            continue
        digest, size = sha256_file(path)
        if digest != entry.sha256 or size != entry.size:
            problems.append(
                f"{where}: SHA-256 {digest} ({size} bytes) differs from the {entry.sha256} "
                f"({entry.size} bytes) recorded when it was written; the file is damaged"
            )
            continue
        problems.extend(_check_headers(path, where, specs, entry))
    problems.extend(
        f"{log.entries[episode].file}: recorded in {LOG_NAME} but missing"
        for episode in sorted(log.entries.keys() - finals.keys())
    )
    # a spill next to its archive is an obsolete leftover
    for episode in sorted((spills.keys() | log.spills.keys()) - finals.keys() - log.entries.keys()):
        problems.extend(_check_spill(root, episode, log.spills.get(episode), specs))
    return problems


def _check_headers(
    path: Path, where: str, specs: Mapping[str, FieldSpec], entry: LogEntry
) -> list[str]:
    try:
        with EpisodeArchive(path, where, specs) as archive:
            check_archive(archive, where, specs, length=entry.length, recorded=LOG_NAME)
    except FileNotFoundError:
        return [f"{where}: vanished while it was checked"]
    except (DatasetStateError, SchemaError) as err:
        return [str(err)]
    return []


def _check_spill(
    root: Path, episode: int, record: SpillEntry | None, specs: Mapping[str, FieldSpec]
) -> list[str]:
    where = f"{ONGOING}/{file_name(episode)}"
    found = find_spill(root, episode, record)
    if found.data is None:
        if not (root / where).exists() and (root / EPISODES / file_name(episode)).exists():
            return []  # finalized while we looked
        return [str(found.problem)]
    problems = []
    if record is None:
        problems.append(
            f"{where}: no checksum recorded in {LOG_NAME} (written by an older version; a "
            "writable open records it)"
        )
    elif found.source is not None and found.source.name != file_name(episode):
        problems.append(
            f"{where}: its last flush is recorded but still under {found.source.name} (a "
            "writer is between the two steps, or was killed there; a writable open finishes it)"
        )
    try:
        decode_spill(found.data, episode, record, specs)
    except DatasetStateError as err:
        problems.append(str(err))
    return problems

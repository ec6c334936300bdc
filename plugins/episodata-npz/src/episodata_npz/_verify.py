"""``verify``: compare the files of a dataset folder with what was recorded at write time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from episodata_core.errors import DatasetStateError, EpisodataError
from episodata_npz._archive import EpisodeArchive
from episodata_npz._layout import (
    EPISODES,
    LOG_NAME,
    ONGOING,
    CommitLog,
    file_name,
    list_episodes,
    sha256_file,
    unexpected_names,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from episodata_core.schema import FieldSpec

__all__ = ["verify_folder"]


def verify_folder(
    root: Path, specs: Mapping[str, FieldSpec], optional: frozenset[str]
) -> list[str]:
    """One line per damaged, missing, unrecorded or unexpected file; empty when intact.

    Finalized archives are re-hashed against ``episodes.jsonl``; spills of ongoing
    episodes, which are rewritten at every flush and so have no recorded checksum, are
    decoded in full, which checks each member's CRC-32.
    """
    try:
        # list before reading the log: archives are renamed into place before their line
        # is appended, so only a commit in flight right now can look unrecorded
        finals = list_episodes(root, EPISODES)
        spills = list_episodes(root, ONGOING)
    except EpisodataError as err:
        return [str(err)]
    log = CommitLog(root, optional)
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
    problems.extend(
        f"{log.entries[episode].file}: recorded in {LOG_NAME} but missing"
        for episode in sorted(log.entries.keys() - finals.keys())
    )
    for episode, path in sorted(spills.items()):
        if episode not in finals:  # a spill next to its archive is an obsolete leftover
            problems.extend(_check_spill(path, f"{ONGOING}/{file_name(episode)}", episode, specs))
    return problems


def _check_spill(path: Path, where: str, episode: int, specs: Mapping[str, FieldSpec]) -> list[str]:
    try:
        with EpisodeArchive(path, where, specs) as archive:
            meta = archive.meta()
            if meta.id != episode or not meta.ongoing:
                return [f"{where}: its members say episode {meta.id}, ongoing={meta.ongoing}"]
            for key in sorted(archive.fields):
                archive.read(key, meta.length + 1)
    except FileNotFoundError:
        return []  # finalized while we looked
    except DatasetStateError as err:
        return [str(err)]
    return []

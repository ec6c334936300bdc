"""Reading a dataset folder into an index: listings, recovery after a killed writer.

Every entry point here only reads, except :meth:`Scanner.recover`, which runs under the
writer lock. A listing can race the writer (a spill removed as its archive appears), so
:meth:`Scanner.scan` retries until it sees every episode id below the highest one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from episodata_core.errors import DatasetStateError
from episodata_core.location import fsync_directory
from episodata_npz._archive import EpisodeArchive, EpisodeMeta
from episodata_npz._buffers import Growable
from episodata_npz._index import Ongoing
from episodata_npz._layout import (
    EPISODES,
    ONGOING,
    CommitLog,
    LogEntry,
    file_name,
    list_episodes,
    remove_temporaries,
    sha256_file,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    import numpy as np
    import numpy.typing as npt

    from episodata_core.schema import FieldSpec

__all__ = ["Finalized", "Listing", "Scanner"]

_ATTEMPTS = 5
_PAUSE_S = 0.02


@dataclass(frozen=True)
class Finalized:
    """The index entry of a finalized episode."""

    length: int
    terminated: bool
    truncated: bool
    fields: frozenset[str]


@dataclass
class Listing:
    """What a scan found that the backend does not know yet; ids ``[0, top)`` all exist."""

    top: int
    finalized: dict[int, Finalized] = field(default_factory=dict)
    ongoing: dict[int, Ongoing] = field(default_factory=dict)


class Scanner:
    """Reads archives, spills and the commit log of one dataset folder."""

    def __init__(self, root: Path, specs: Mapping[str, FieldSpec], log: CommitLog) -> None:
        self._root = root
        self._specs = specs
        self._log = log
        self._optional = frozenset(key for key, spec in specs.items() if spec.optional)
        self._required = frozenset(specs) - self._optional

    def recover(self) -> None:
        """Finish or discard what a killed writer left; needs the writer lock."""
        remove_temporaries(self._root)
        (self._root / ONGOING).mkdir(exist_ok=True)
        self._log.repair_tail()
        finals = list_episodes(self._root, EPISODES)
        for episode, spill in list_episodes(self._root, ONGOING).items():
            if episode in finals:  # the writer died between the commit and removing the spill
                spill.unlink()
        self._log.read_new(strict=True)
        for episode in sorted(finals.keys() - self._log.entries.keys()):
            # renamed into place but not logged: the archive was fsynced before its
            # rename, so hashing it now records exactly what was written
            self._log.append(episode, self._entry_from_archive(episode, finals[episode]))
        fsync_directory(self._root / ONGOING)

    def scan(
        self, known: int, ongoing: npt.NDArray[np.bool_], loaded: Mapping[int, Ongoing]
    ) -> Listing:
        """New finalized episodes and new or changed spills, given ``known`` indexed ids.

        ``ongoing`` flags the known ids that are ongoing and ``loaded`` holds their rows;
        a spill whose file did not change since it was loaded is not read again.
        """
        missing: list[int] = []
        for attempt in range(_ATTEMPTS):
            if attempt:
                time.sleep(_PAUSE_S)
            self._log.read_new(strict=True)
            finals = list_episodes(self._root, EPISODES)
            # a logged archive that has gone stays indexed, so reads and verify name it
            finalized = finals.keys() | self._log.entries.keys()
            spills = {
                e: p for e, p in list_episodes(self._root, ONGOING).items() if e not in finalized
            }
            top = max([known - 1, *finalized, *spills], default=-1) + 1
            missing = [e for e in range(top) if e not in finalized and e not in spills]
            if missing:
                continue
            listing = Listing(top)
            if not self._load_spills(spills, loaded, listing):
                continue
            for episode in sorted(finalized):
                if episode >= known or ongoing[episode]:
                    listing.finalized[episode] = self._finalized(episode, finals.get(episode))
            return listing
        raise DatasetStateError(
            f"{self._root}: episode {missing[0]} has neither {EPISODES}/{file_name(missing[0])} "
            f"nor {ONGOING}/{file_name(missing[0])}, but later episodes exist; files were "
            "removed from the dataset folder"
        )

    def _load_spills(
        self, spills: Mapping[int, Path], loaded: Mapping[int, Ongoing], listing: Listing
    ) -> bool:
        """Decode the spills that changed into ``listing``; False when one vanished."""
        for episode, path in sorted(spills.items()):
            where = f"{ONGOING}/{file_name(episode)}"
            try:
                handle = open(path, "rb")  # noqa: SIM115 (stat and read the same inode)
            except FileNotFoundError:
                return False  # finalized meanwhile; the next listing shows its archive
            with handle:
                status = os.fstat(handle.fileno())
                signature = (status.st_ino, status.st_size, status.st_mtime_ns)
                known = loaded.get(episode)
                if known is not None and known.signature == signature:
                    continue
                with EpisodeArchive(handle, where, self._specs) as archive:
                    meta, fields = self._checked_meta(archive, where, episode, ongoing=True)
                    buffers = {
                        key: Growable.wrap(archive.read(key, meta.length + 1))
                        for key in self._specs
                        if key in fields
                    }
            num_rows = meta.length + 1
            listing.ongoing[episode] = Ongoing(buffers, num_rows, num_rows, signature)
        return True

    def _finalized(self, episode: int, path: Path | None) -> Finalized:
        entry = self._log.entries.get(episode)
        if entry is not None:
            fields = frozenset(self._specs.keys() - set(entry.absent))
            return Finalized(entry.length, entry.terminated, entry.truncated, fields)
        # committed but not logged yet (the writer is between the two steps, or died there)
        assert path is not None, "an unlogged episode is known from its archive"
        meta, fields = self._read_meta(path, episode)
        return Finalized(meta.length, meta.terminated, meta.truncated, fields)

    def _entry_from_archive(self, episode: int, path: Path) -> LogEntry:
        meta, fields = self._read_meta(path, episode)
        digest, size = sha256_file(path)
        return LogEntry(
            file=f"{EPISODES}/{file_name(episode)}",
            sha256=digest,
            size=size,
            length=meta.length,
            terminated=meta.terminated,
            truncated=meta.truncated,
            absent=sorted(self._optional - fields),
        )

    def _read_meta(self, path: Path, episode: int) -> tuple[EpisodeMeta, frozenset[str]]:
        where = f"{EPISODES}/{file_name(episode)}"
        with EpisodeArchive(path, where, self._specs) as archive:
            return self._checked_meta(archive, where, episode, ongoing=False)

    def _checked_meta(
        self, archive: EpisodeArchive, where: str, episode: int, *, ongoing: bool
    ) -> tuple[EpisodeMeta, frozenset[str]]:
        """The archive's ``episode/*`` members and fields, which must match its name."""
        meta = archive.meta()
        fields = archive.fields
        if meta.id != episode or meta.ongoing != ongoing or not self._required <= fields:
            raise DatasetStateError(
                f"{where}: its members say episode {meta.id}, ongoing={meta.ongoing}, fields "
                f"{sorted(fields)}; expected episode {episode}, ongoing={ongoing} and every "
                "required field. The file is damaged or was renamed"
            )
        return meta, fields

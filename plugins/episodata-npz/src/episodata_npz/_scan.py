"""Reading a dataset folder into an index: listings, recovery after a killed writer.

Every entry point here only reads, except :meth:`Scanner.recover`, which runs under the
writer lock. A listing can race the writer (a spill removed as its archive appears, a
spill renamed after its log line), so :meth:`Scanner.scan` retries until it sees every
episode id below the highest one and every recorded spill; what is still missing after
the retries is reported lost (see :mod:`episodata_npz._spills`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from episodata_core.authoring import Growable
from episodata_core.errors import DatasetStateError, SchemaError
from episodata_core.location import fsync_directory
from episodata_npz._agreement import check_archive
from episodata_npz._archive import EpisodeArchive, EpisodeMeta, checked_meta
from episodata_npz._index import Ongoing
from episodata_npz._layout import (
    EPISODES,
    LOG_NAME,
    ONGOING,
    CommitLog,
    LogEntry,
    file_name,
    list_episodes,
    remove_temporaries,
    sha256_file,
)
from episodata_npz._spills import decode_spill, find_spill, recover_spills

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from pathlib import Path

    import numpy as np
    import numpy.typing as npt

    from episodata_core.schema import FieldSpec

__all__ = ["Finalized", "Listing", "Lost", "Scanner"]

_ATTEMPTS = 5
_PAUSE_S = 0.02
_RACES_PER_ATTEMPT = 100  # bounds listings that each lost a race with the writer
_SAMPLES = 3  # archives tried by check_schema before it gives up on unreadable ones
_OWN = "its 'episode/length' member"


@dataclass(frozen=True)
class Finalized:
    """The index entry of a finalized episode."""

    length: int
    terminated: bool
    truncated: bool
    fields: frozenset[str]


@dataclass(frozen=True)
class Lost:
    """A flushed ongoing episode whose spill is missing or damaged."""

    length: int  # as recorded at its last flush (0 when nothing was recorded)
    fields: frozenset[str]
    message: str  # names the file and what is wrong with it


@dataclass
class Listing:
    """What a scan found that the backend does not know yet; ids ``[0, top)`` all exist."""

    top: int
    finalized: dict[int, Finalized] = field(default_factory=dict)
    ongoing: dict[int, Ongoing] = field(default_factory=dict)
    lost: dict[int, Lost] = field(default_factory=dict)


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
        (self._root / ONGOING).mkdir(exist_ok=True)
        self._log.repair_tail()
        self._log.read_new(strict=True)
        finals = list_episodes(self._root, EPISODES)
        spills = list_episodes(self._root, ONGOING)
        for episode, spill in spills.items():
            if episode in finals:  # the writer died between the commit and removing the spill
                spill.unlink()
        finalized = finals.keys() | self._log.entries.keys()
        # before temporaries go: a flush killed after its log line has its bytes in one
        recover_spills(self._root, self._log, finalized, spills, self._specs)
        remove_temporaries(self._root)
        for episode in sorted(finals.keys() - self._log.entries.keys()):
            # renamed into place but not logged: the archive was fsynced before its
            # rename, so hashing it now records exactly what was written
            self._log.append(episode, self._entry_from_archive(episode, finals[episode]))
        fsync_directory(self._root / ONGOING)

    def check_schema(self) -> None:
        """Compare the newest readable archives with the manifest, then with the log.

        Raises ``SchemaError`` when every archive tried (up to three finalized ones, or
        spills when there are none) disagrees with the manifest, or when the first one
        that agrees disagrees with its log line. One that agrees clears the manifest:
        others that do not are damaged, and reads and ``verify`` report them. The log
        is read after the archives, so that an edited manifest is named as such rather
        than as log lines whose lengths do not fit.
        """
        finals = list_episodes(self._root, EPISODES)
        spills = list_episodes(self._root, ONGOING)
        candidates = [(EPISODES, e, finals[e]) for e in sorted(finals, reverse=True)]
        if not candidates:
            candidates = [(ONGOING, e, spills[e]) for e in sorted(spills, reverse=True)]
        disagreement: SchemaError | None = None
        sample = None
        for folder, episode, path in candidates[:_SAMPLES]:
            where = f"{folder}/{file_name(episode)}"
            try:
                with EpisodeArchive(path, where, self._specs) as archive:
                    length = archive.meta().length
                    check_archive(archive, where, self._specs, length=length, recorded=_OWN)
            except SchemaError as err:
                disagreement = disagreement or err
                continue
            except (DatasetStateError, FileNotFoundError):
                continue
            sample = (folder, episode, path, where)
            break
        if sample is None and disagreement is not None:
            raise disagreement
        self._log.read_new(strict=True)
        if sample is None or sample[0] != EPISODES or sample[1] not in self._log.entries:
            return
        _, episode, path, where = sample
        entry = self._log.entries[episode]
        try:
            with EpisodeArchive(path, where, self._specs) as archive:
                check_archive(archive, where, self._specs, length=entry.length, recorded=LOG_NAME)
        except (DatasetStateError, FileNotFoundError):
            pass  # changed since; reads report it

    def scan(
        self,
        known: int,
        ongoing: npt.NDArray[np.bool_],
        loaded: Mapping[int, Ongoing],
        lost: Collection[int] = (),
    ) -> Listing:
        """New finalized episodes and new or changed spills, given ``known`` indexed ids.

        ``ongoing`` flags the known ids that are ongoing or ``lost``, and ``loaded``
        holds the rows of the others; a spill whose file did not change since it was
        loaded is not read again, and an episode already found lost is not waited for.
        """
        missing: list[int] = []
        # a listing that raced the writer is tried again; only attempts in which the
        # writer logged nothing new count against _ATTEMPTS, since a busy writer that
        # finalizes between every listing and its load is progress, not damage
        stalled = 0
        for attempt in range(_ATTEMPTS * _RACES_PER_ATTEMPT):
            if stalled >= _ATTEMPTS:
                break
            if attempt:
                time.sleep(_PAUSE_S)
            final = stalled == _ATTEMPTS - 1
            logged = self._log.lines_read
            self._log.read_new(strict=True)
            # spills are listed before archives: a spill is removed only after its
            # archive is in place, so an episode is never in neither listing
            listed = list_episodes(self._root, ONGOING)
            finals = list_episodes(self._root, EPISODES)
            # a logged archive that has gone stays indexed, so reads and verify name it
            finalized = finals.keys() | self._log.entries.keys()
            spills = (listed.keys() | self._log.spills.keys()) - finalized
            top = max([known - 1, *finalized, *spills], default=-1) + 1
            missing = [e for e in range(top) if e not in finalized and e not in spills]
            if missing:
                stalled += 1
                continue
            listing = Listing(top)
            if not self._load_spills(sorted(spills), loaded, lost, listing, final=final):
                self._log.read_new(strict=True)
                stalled += self._log.lines_read == logged
                continue
            for episode in sorted(finalized):
                if episode >= known or ongoing[episode]:
                    listing.finalized[episode] = self._finalized(episode, finals.get(episode))
            return listing
        if not missing:
            raise DatasetStateError(
                f"{self._root}: the writer changed the dataset during each of "
                f"{_ATTEMPTS * _RACES_PER_ATTEMPT} listings; call refresh() again"
            )
        raise DatasetStateError(
            f"{self._root}: episode {missing[0]} has neither {EPISODES}/{file_name(missing[0])} "
            f"nor {ONGOING}/{file_name(missing[0])} nor a line in {LOG_NAME}, but later "
            "episodes exist; files were removed from the dataset folder"
        )

    def _load_spills(
        self,
        spills: list[int],
        loaded: Mapping[int, Ongoing],
        lost: Collection[int],
        listing: Listing,
        *,
        final: bool,
    ) -> bool:
        """Decode the spills that changed into ``listing``; False to list again.

        A spill that is missing or does not match its record may be one the writer is
        finalizing or renaming right now: the caller lists again, and only the last
        attempt reports it lost.
        """
        for episode in spills:
            record = self._log.spills.get(episode)
            known = loaded.get(episode)
            signature = known.signature if known else None
            found = find_spill(self._root, episode, record, signature)
            if found.data is None and record is not None:
                # most often the writer recorded and renamed a newer spill after the log
                # was read: read on and look again before listing everything again
                self._log.read_new(strict=True)
                if episode in self._log.entries:
                    return False  # finalized meanwhile: list again to see its archive
                record = self._log.spills.get(episode)
                found = find_spill(self._root, episode, record, signature)
            if found.unchanged:
                continue
            if found.data is None:
                if not final and episode not in lost:
                    return False
                length = record.length if record is not None else 0
                absent = set(record.absent) if record is not None else self._optional
                fields = frozenset(self._specs.keys() - absent)
                listing.lost[episode] = Lost(length, fields, str(found.problem))
                continue
            try:
                decoded = decode_spill(found.data, episode, record, self._specs)
            except DatasetStateError as err:
                length = record.length if record is not None else 0
                listing.lost[episode] = Lost(length, frozenset(self._required), str(err))
                continue
            buffers = {key: Growable.wrap(rows) for key, rows in decoded.rows.items()}
            num_rows = decoded.meta.length + 1
            listing.ongoing[episode] = Ongoing(buffers, num_rows, num_rows, found.signature)
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
            return checked_meta(archive, where, episode, ongoing=False, required=self._required)

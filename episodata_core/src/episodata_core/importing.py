"""Helpers for importer authors: warnings, report parts, source records, dependency checks.

The d4rl, lewm and minari importers use these; a third-party importer may too. Nothing
here imports an optional library at module level: :func:`require_module` imports by name
when it is called.

Examples
--------
>>> from episodata_core.importing import WarningLog
>>> log = WarningLog("'tiny.hdf5'", package="acme_importer")
>>> log.add("nan_reward", "2 NaN rewards; imported as they are", 2)
>>> log.add("nan_reward", "1 NaN reward; imported as it is")
>>> log.records[0].count
3
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from episodata_core._batching import nbytes_of
from episodata_core.errors import EpisodataImportWarning, FormatError, MissingDependencyError
from episodata_core.transfer import FieldReport, FlagCounts, ImportWarningRecord

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt

    from episodata_core.dataset import Dataset
    from episodata_core.schema import DatasetSchema

__all__ = [
    "PendingEpisodes",
    "WarningLog",
    "field_reports",
    "file_sha256",
    "flag_counts",
    "require_module",
    "source_record",
]

_CORE_PACKAGES = frozenset({"episodata", "episodata_core"})
_BLOCK = 8 << 20  # bytes hashed per read


@dataclass
class WarningLog:
    """The *warn* items of one import (formats.md §0.2), collected before the first write.

    Parameters
    ----------
    source
        How messages name the source, e.g. ``repr(path)``.
    package
        The importer's top-level package. Its frames, like episodata's, are skipped so
        that the warnings point at the user's import call.
    noun
        What the source is, in the strict error: ``"file"``, ``"dataset"``.
    """

    source: str
    package: str | None = None
    noun: str = "file"
    records: list[ImportWarningRecord] = field(default_factory=list)

    def add(self, code: str, message: str, count: int = 1) -> None:
        """Record one kind of oddity; a repeated code adds to its count, keeping its message."""
        for record in self.records:
            if record.code == code:
                record.count += count
                return
        self.records.append(ImportWarningRecord(code=code, message=message, count=count))

    def finish(self, *, strict: bool) -> None:
        """Raise :class:`FormatError` under ``strict``, else emit each code once.

        Call it after the last check and before the first write, so that a strict import
        leaves the destination untouched.

        Raises
        ------
        FormatError
            Under ``strict`` when anything was recorded; the message lists every code.
        """
        if not self.records:
            return
        if strict:
            listed = "; ".join(f"{r.code} (x{r.count}): {r.message}" for r in self.records)
            raise FormatError(
                f"{self.source}: strict=True rejects the {self.noun}: {listed}. Pass "
                "strict=False to import it anyway; the report lists these warnings"
            )
        internal = _CORE_PACKAGES | ({self.package} if self.package else set())
        level = _caller_stacklevel(internal)
        for record in self.records:
            warnings.warn(
                f"{self.source}: {record.message} [{record.code}]",
                EpisodataImportWarning,
                stacklevel=level,
            )


@dataclass
class PendingEpisodes:
    """Bulk episodes that go to :meth:`Dataset.add_episodes` together, ``max_bytes`` at a time.

    A durable commit costs about as much for many episodes as for one, so an importer
    that writes each episode alone spends its time waiting for the disk. Episodes are
    written once their arrays reach ``max_bytes``, which also bounds what a backend
    holds while it writes them. Add the episodes of one read window, then call
    :meth:`write` before reading the next, so that no view keeps the old window alive.

    Examples
    --------
    >>> pending = PendingEpisodes(dataset, max_bytes=64 << 20)
    >>> for episode in window_episodes:
    ...     pending.add(episode)
    >>> ids = pending.write()
    """

    dataset: Dataset
    max_bytes: int = 64 << 20
    _episodes: list[Mapping[str, Any]] = field(default_factory=list, repr=False)
    _bytes: int = field(default=0, repr=False)

    def add(self, episode: Mapping[str, Any]) -> None:
        """Queue a bulk episode; writes every queued one once they reach ``max_bytes``."""
        self._episodes.append(episode)
        self._bytes += nbytes_of(episode)
        if self._bytes >= self.max_bytes:
            self.write()

    def write(self) -> list[int]:
        """Write the queued episodes with one ``add_episodes`` call; returns their ids."""
        episodes, self._episodes, self._bytes = self._episodes, [], 0
        return self.dataset.add_episodes(episodes) if episodes else []


def _caller_stacklevel(internal: frozenset[str]) -> int:
    """The stacklevel, seen from our caller, of the first frame outside ``internal``."""
    frame = inspect.currentframe()
    level = 1
    while frame is not None:
        package = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if level > 1 and package not in internal:
            # level counts this function as 1; warnings.warn, called one frame up, does not
            return level - 1
        frame = frame.f_back
        level += 1
    return 1


def flag_counts(
    terminated: npt.NDArray[np.bool_],
    truncated: npt.NDArray[np.bool_],
    unflagged: npt.NDArray[np.bool_] | None = None,
) -> FlagCounts:
    """Count the end flags of the imported episodes.

    Parameters
    ----------
    terminated, truncated
        ``[E]`` bool, one entry per imported episode.
    unflagged
        ``[E]`` bool, the episodes that ended with neither flag in the source; by default
        those with neither flag here.

    Returns
    -------
    FlagCounts
        ``terminated`` and ``truncated`` include ``both``.
    """
    if unflagged is None:
        unflagged = ~(terminated | truncated)
    return FlagCounts(
        terminated=int(terminated.sum()),
        truncated=int(truncated.sum()),
        both=int((terminated & truncated).sum()),
        unflagged_end=int(unflagged.sum()),
    )


def field_reports(schema: DatasetSchema, source_keys: Mapping[str, str]) -> dict[str, FieldReport]:
    """``{qualified key: FieldReport}`` for every field of ``schema``.

    ``source_keys`` maps a qualified key to the source's name for it; a field it lacks
    gets ``source_key=""``.
    """
    return {
        spec.qualified_key: FieldReport(
            role=spec.role,
            dtype=spec.dtype,
            shape=spec.shape,
            source_key=source_keys.get(spec.qualified_key, ""),
        )
        for spec in schema
    }


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of the file at ``path``, read in 8 MiB blocks."""
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            hasher.update(block)
    return hasher.hexdigest()


def source_record(
    path: str | os.PathLike[str], *, hash_source: bool, file: str | None = None, **extras: Any
) -> dict[str, Any]:
    """The ``source`` entry of an import record: ``{file, bytes, sha256, **extras}``.

    Parameters
    ----------
    path
        The file that ``bytes`` and ``sha256`` describe.
    hash_source
        Compute ``sha256``; otherwise it is None (hashing reads the whole file).
    file
        The name recorded as ``file``; by default the base name of ``path``.
    **extras
        Importer-specific entries, recorded after the three above.
    """
    return {
        "file": os.path.basename(path) if file is None else file,
        "bytes": os.path.getsize(path),
        "sha256": file_sha256(path) if hash_source else None,
        **extras,
    }


def require_module(
    name: str, *, feature: str, install: str, distribution: str | None = None
) -> ModuleType:
    """Import the module ``name`` and return it, or say how to install it.

    Parameters
    ----------
    name
        The module to import, e.g. ``"h5py"``, ``"PIL.Image"``.
    feature
        What needs it, as the start of a sentence that ends "with <distribution>", e.g.
        ``"the d4rl importer reads HDF5 files"``.
    install
        The command that installs it, e.g. ``'pip install "episodata[d4rl]"'``.
    distribution
        The name it is installed under, when that is not ``name`` (``"Pillow"``).

    Raises
    ------
    MissingDependencyError
        When the import fails (also an :class:`ImportError`); the cause is chained.

    Examples
    --------
    >>> h5py = require_module(  # doctest: +SKIP
    ...     "h5py", feature="the acme importer reads HDF5 files", install="pip install h5py"
    ... )
    """
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise MissingDependencyError(
            f"{feature} with {distribution or name}, which is not installed: {install}"
        ) from err

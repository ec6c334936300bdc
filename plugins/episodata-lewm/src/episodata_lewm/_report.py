"""Report, warning and source-record helpers of the LeWM importer (no h5py here).

The D4RL importer carries a twin of this module; both would move to the core if a third
HDF5 importer needed them.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field

from episodata_core.errors import EpisodataImportWarning, FormatError, MissingDependencyError
from episodata_core.transfer import FieldReport, FlagCounts, ImportReport, ImportWarningRecord

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from episodata_core.schema import DatasetSchema

__all__ = [
    "LeWMReport",
    "WarningLog",
    "field_reports",
    "flag_counts",
    "require_h5py",
    "source_record",
]

_INSTALL = 'pip install "episodata[lewm]"'
_INTERNAL_PACKAGES = frozenset({"episodata", "episodata_core", "episodata_lewm"})


class LeWMReport(ImportReport):
    """:class:`ImportReport` plus end reasons and finite last-row actions (formats.md §2.4)."""

    end_reasons: dict[str, int] = Field(
        default_factory=dict, description="Imported episodes by end_reason."
    )
    dangling_actions: int = Field(
        default=0,
        description="Episodes whose last-row action (taken after the last observation) is "
        "finite; it is dropped.",
    )

    def summary(self) -> str:
        """The core summary plus end reasons and dangling actions."""
        reasons = ", ".join(f"{k} {v}" for k, v in self.end_reasons.items())
        lines = [super().summary()]
        if reasons:
            lines.append(f"end reasons: {reasons}")
        if self.dangling_actions:
            lines.append(f"dangling last-row actions dropped: {self.dangling_actions}")
        return "\n".join(lines)


def require_h5py() -> None:
    """Raise :class:`MissingDependencyError` with the install command if h5py is missing."""
    try:
        import h5py  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError(
            f"the lewm importer reads HDF5 files with h5py (and Blosc pixels with hdf5plugin); h5py is not installed: {_INSTALL}"
        ) from err


@dataclass
class WarningLog:
    """The *warn* items of one import (formats.md §0.2), collected before the first write."""

    source: str
    records: list[ImportWarningRecord] = field(default_factory=list)

    def add(self, code: str, message: str, count: int = 1) -> None:
        """Record one kind of oddity; a repeated code adds to its count."""
        for record in self.records:
            if record.code == code:
                record.count += count
                return
        self.records.append(ImportWarningRecord(code=code, message=message, count=count))

    def finish(self, *, strict: bool) -> None:
        """Raise :class:`FormatError` under ``strict``, else emit each code once."""
        if not self.records:
            return
        if strict:
            listed = "; ".join(f"{r.code} (x{r.count}): {r.message}" for r in self.records)
            raise FormatError(
                f"{self.source}: strict=True rejects the file: {listed}. Pass strict=False to "
                "import it anyway; the report lists these warnings"
            )
        level = _caller_stacklevel()
        for record in self.records:
            warnings.warn(
                f"{self.source}: {record.message} [{record.code}]",
                EpisodataImportWarning,
                stacklevel=level,
            )


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside episodata: the user's import call."""
    frame = inspect.currentframe()
    level = 1
    while frame is not None:
        package = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if level > 1 and package not in _INTERNAL_PACKAGES:
            return level - 1
        frame = frame.f_back
        level += 1
    return 1


def flag_counts(
    terminated: npt.NDArray[np.bool_],
    truncated: npt.NDArray[np.bool_],
    unflagged: npt.NDArray[np.bool_],
) -> FlagCounts:
    """Counts of the flags written (``terminated`` and ``truncated`` include ``both``)."""
    return FlagCounts(
        terminated=int(terminated.sum()),
        truncated=int(truncated.sum()),
        both=int((terminated & truncated).sum()),
        unflagged_end=int(unflagged.sum()),
    )


def field_reports(schema: DatasetSchema, source_keys: dict[str, str]) -> dict[str, FieldReport]:
    """``{qualified key: FieldReport}`` for every field of ``schema``."""
    return {
        spec.qualified_key: FieldReport(
            role=spec.role,
            dtype=spec.dtype,
            shape=spec.shape,
            source_key=source_keys.get(spec.qualified_key, ""),
        )
        for spec in schema
    }


def source_record(path: str, *, hash_source: bool, **extras: Any) -> dict[str, Any]:
    """``{file, bytes, sha256, **extras}``; the hash is computed only when asked for."""
    digest = None
    if hash_source:
        hasher = hashlib.sha256()
        with open(path, "rb") as handle:
            while block := handle.read(8 << 20):
                hasher.update(block)
        digest = hasher.hexdigest()
    return {
        "file": os.path.basename(path),
        "bytes": os.path.getsize(path),
        "sha256": digest,
        **extras,
    }

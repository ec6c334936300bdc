"""Dependency checks, warnings and report helpers of the Minari importer (no h5py here).

The D4RL and LeWM importers carry twins of these helpers; with this third HDF5 importer
they are due to move to the core.
"""

from __future__ import annotations

import hashlib
import inspect
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from episodata_core.errors import EpisodataImportWarning, FormatError, MissingDependencyError
from episodata_core.transfer import FieldReport, ImportWarningRecord

if TYPE_CHECKING:
    from pathlib import Path

    from episodata_core.schema import DatasetSchema

__all__ = ["WarningLog", "field_reports", "file_sha256", "require_h5py", "require_pillow"]

_INSTALL = 'pip install "episodata[minari]"'
_INTERNAL_PACKAGES = frozenset({"episodata", "episodata_core", "episodata_minari"})


def require_h5py() -> None:
    """Raise :class:`MissingDependencyError` with the install command if h5py is missing."""
    try:
        import h5py  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError(
            f"the minari importer reads main_data.hdf5 with h5py, which is not installed: "
            f"{_INSTALL}"
        ) from err


def require_pillow(where: str) -> None:
    """Raise :class:`MissingDependencyError` if Pillow, the JPEG decoder, is missing."""
    try:
        import PIL.Image  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError(
            f"{where}: decode_images=True decodes the JPEG-encoded images with Pillow, which is "
            "not installed: pip install Pillow"
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
                f"{self.source}: strict=True rejects the dataset: {listed}. Pass strict=False "
                "to import it anyway; the report lists these warnings"
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


def file_sha256(path: Path) -> str:
    """The hex sha256 of the file at ``path``, read in 8 MiB blocks."""
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(8 << 20):
            hasher.update(block)
    return hasher.hexdigest()

"""Helpers for exporter plugins: a folder is written aside and published whole.

An exporter builds its output in ``<destination>.partial`` and renames it into place only
when it is complete, so that an interrupted or failed export never leaves something at
``destination`` that looks finished.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from episodata_core import location
from episodata_core.errors import DatasetStateError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["StagedFolder", "stage_folder"]


@dataclass(frozen=True)
class StagedFolder:
    """Where an export goes (``out``) and where it is built first (``partial``)."""

    out: Path
    partial: Path

    @contextlib.contextmanager
    def writing(self) -> Iterator[Path]:
        """Create ``partial`` and yield it; publish it at ``out`` if the block succeeds.

        On any exception, Ctrl-C included, ``partial`` is removed and ``out`` is left as
        it was.
        """
        self.partial.mkdir(parents=True)
        try:
            yield self.partial
            self._publish()
        except BaseException:
            shutil.rmtree(self.partial, ignore_errors=True)
            raise

    def _publish(self) -> None:
        out = self.out
        if out.exists() or out.is_symlink():
            # only reached with overwrite=True (stage_folder checked before any write)
            old = out.with_name(f"{out.name}.replaced-{os.getpid()}")
            os.rename(out, old)
            os.rename(self.partial, out)
            _remove(old)
        else:
            os.rename(self.partial, out)
        location.fsync_directory(out.parent)


def stage_folder(destination: str | os.PathLike[str], *, overwrite: bool) -> StagedFolder:
    """Check that an export may write ``destination``, before anything is written.

    Raises
    ------
    DatasetStateError
        ``destination`` exists and ``overwrite`` is false, or an interrupted export left
        ``<destination>.partial`` behind (removed instead when ``overwrite`` is true).
    """
    out = Path(location.normalize(destination))
    partial = out.with_name(out.name + ".partial")
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise DatasetStateError(
            f"the export destination {str(out)!r} already exists; choose a new folder or pass "
            "overwrite=True to replace it"
        )
    if partial.exists() or partial.is_symlink():
        if not overwrite:
            raise DatasetStateError(
                f"{str(partial)!r} exists, left by an interrupted export; delete it or pass "
                "overwrite=True"
            )
        _remove(partial)
    return StagedFolder(out, partial)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink()

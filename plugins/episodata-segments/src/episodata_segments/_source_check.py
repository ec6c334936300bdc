"""V7: segment members against the original stable-worldmodel ``.h5`` rows.

With ``source_files={label: path}``, each written member is compared with the swm rows
``[g + s, g + s + K]`` of the same column (g = the episode's ``source_row_offset``), and
``action`` with ``[g + s, g + s + K - 1]`` (one row later for action-in files). The
comparison is NaN-aware, so the source's NaN reward at s = 0 matches the reset fill.
h5py is imported here, inside the check, and only when ``source_files`` is given.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import FormatError, IntegrityError, MissingDependencyError

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy.typing as npt

    from episodata_segments._layout import LabelLayout
    from episodata_segments._segment import SegmentCut

__all__ = ["SourceFile"]


class SourceFile:
    """An open swm ``.h5`` file of one label, for V7."""

    def __init__(self, path: str, label: str, action_alignment: str) -> None:
        try:
            import h5py
        except ImportError as err:
            raise MissingDependencyError(
                f"source_files needs h5py to compare segments with {path!r}: pip install "
                '"episodata[lewm]"'
            ) from err
        # registers the Blosc filter the LeWM files need; harmless when absent
        with contextlib.suppress(ImportError):
            import hdf5plugin  # noqa: F401
        self._h5py: Any = h5py
        self._file: Any = h5py.File(path, "r")
        self.path = path
        self.label = label
        self.shift = 1 if action_alignment == "in" else 0

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def _rows(self, column: str, first: int, stop: int) -> npt.NDArray[Any]:
        dataset = self._file[column]
        try:
            if self._h5py.check_string_dtype(dataset.dtype) is not None:
                return np.asarray(dataset.asstr()[first:stop])
            return np.asarray(dataset[first:stop])
        except OSError as err:
            raise FormatError(
                f"V7: cannot read column {column!r} of {self.path!r} ({err}); if it is "
                'Blosc-compressed, install hdf5plugin: pip install "episodata[lewm]"'
            ) from err

    def check(
        self, loaded: Mapping[str, npt.NDArray[Any]], layout: LabelLayout, cut: SegmentCut
    ) -> None:
        """Compare every member that has a column of the same name in the file."""
        if cut.source_row_start is None:
            raise FormatError(
                f"V7 for label {self.label!r}: episode {cut.episode} has no source_row_offset "
                "provenance, so its rows in the source file are unknown; leave out "
                "source_files or export a dataset imported by the 'lewm' importer"
            )
        first = cut.source_row_start
        offset = layout.offset
        for member in layout.members:
            if member.name not in self._file or member.kind == "step":
                continue
            if member.role == "action":
                start = first + self.shift
                source = self._rows(member.name, start, start + offset)
            else:
                source = self._rows(member.name, first, first + offset + 1)
            value = loaded[member.name]
            if source.size != value.size:
                raise IntegrityError(
                    f"validation V7 failed for label {self.label!r}, {cut.describe()}: column "
                    f"{member.name!r} of {self.path!r} gives {source.shape}, the member is "
                    f"{value.shape}"
                )
            source = source.reshape(value.shape)
            if value.dtype.kind in "fc":
                equal = np.array_equal(value, source.astype(value.dtype), equal_nan=True)
            elif value.dtype.kind == "b":
                equal = np.array_equal(value, source.astype(bool))
            else:
                equal = np.array_equal(value, source)
            if not equal:
                raise IntegrityError(
                    f"validation V7 failed for label {self.label!r}, {cut.describe()}: member "
                    f"{member.name!r} differs from rows {first}.. of {self.path!r}; the "
                    "archive was not published"
                )

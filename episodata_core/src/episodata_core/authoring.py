"""Helpers that plugins share, and the declaration of what a plugin may import.

A plugin (in ``plugins/``, ``contrib/`` or a third party's distribution) imports from the
core only the modules of :data:`PLUGIN_SURFACE`: the contract (``protocols``,
``commands``, ``schema``, ``errors``), the objects a plugin is handed or returns
(``dataset``, ``views``, ``writers``, ``transfer``, ...) and this module. Every other core
module is private and may change in any release; a test of the core checks that the
built-in plugins keep to the surface.

The helpers here are the blocks that every backend or importer would otherwise write
again: :func:`coerce_options` (an ``Options`` model from whatever model the core passed),
:class:`Growable` (rows that grow by doubling) and :func:`check_rows` /
:func:`check_fields` (the fields and row counts of a block of rows), and the progress
bars of long work (:func:`progress_bar` over known items, :func:`episode_progress` over
the episodes written to a dataset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from episodata_core._progress import episode_progress, progress_bar
from episodata_core.errors import EpisodataError, SchemaError

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    import numpy.typing as npt
    from pydantic import BaseModel

    from episodata_core.protocols import Rows
    from episodata_core.schema import FieldSpec

__all__ = [
    "PLUGIN_SURFACE",
    "Growable",
    "check_fields",
    "check_rows",
    "coerce_options",
    "episode_progress",
    "progress_bar",
]

PLUGIN_SURFACE: tuple[str, ...] = (
    "episodata_core",
    "episodata_core.authoring",
    "episodata_core.bulk",  # bulk writes of executors and datasinks
    "episodata_core.commands",
    "episodata_core.dataset",
    "episodata_core.errors",
    "episodata_core.exporting",
    "episodata_core.generations",  # format generations a backend may read
    "episodata_core.importing",
    "episodata_core.location",
    "episodata_core.manifest",
    "episodata_core.older",  # shared pieces of the readers of older generations
    "episodata_core.pipeline",  # the executor contract (Step, ImportRequest, ImportTarget)
    "episodata_core.protocols",
    "episodata_core.registry",
    "episodata_core.sampling.workers",
    "episodata_core.schema",
    "episodata_core.selection",  # Selection and the 0.2 reads by field key
    "episodata_core.stats",
    "episodata_core.testing",
    "episodata_core.transfer",
    "episodata_core.views",
    "episodata_core.writers",
)
"""The core modules a plugin may import (``episodata_core.testing`` in its tests only)."""

_M = TypeVar("_M", bound="BaseModel")


def coerce_options(options: BaseModel, model: type[_M]) -> _M:
    """Return ``options`` as an instance of the plugin's ``model``.

    The core validates options with the plugin's own ``Options`` model, so this is
    usually ``options`` itself; a caller may also pass an equivalent model (a subclass,
    or one a pipeline built), which is re-validated by its aliases.

    Examples
    --------
    >>> from pydantic import BaseModel
    >>> class Options(BaseModel):
    ...     level: int = 1
    >>> coerce_options(Options(level=3), Options).level
    3
    """
    if isinstance(options, model):
        return options
    return model.model_validate(options.model_dump(by_alias=True))


class Growable:
    """Rows of one shape and dtype with spare capacity at the end; appends are amortized O(1).

    ``data`` is ``[capacity, *shape]`` and its first ``size`` rows are filled; capacity
    doubles when full. Unused capacity comes from ``np.empty``, whose pages the operating
    system backs with memory only once they are written. Reading the filled rows is a
    slice (:meth:`view`), so an ongoing episode read between steps is never concatenated.

    Parameters
    ----------
    shape
        Shape of one row (``()`` for a column of scalars).
    dtype
        dtype of the rows.
    capacity
        Rows to allocate up front (at least 1).
    """

    __slots__ = ("data", "size")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any], capacity: int = 16) -> None:
        self.data: npt.NDArray[Any] = np.empty((max(capacity, 1), *shape), dtype=dtype)
        self.size = 0

    @classmethod
    def wrap(cls, rows: npt.NDArray[Any]) -> Growable:
        """A full buffer around ``rows`` (``[n, *shape]``): no copy until the first append.

        ``rows`` may be read-only: the first append copies it into a writable buffer.
        """
        grow = cls.__new__(cls)
        grow.data, grow.size = rows, len(rows)
        return grow

    @classmethod
    def copy_of(cls, rows: npt.NDArray[Any], capacity: int = 16) -> Growable:
        """A buffer holding a copy of ``rows`` (``[n, *shape]``), room for ``capacity`` rows."""
        grow = cls(rows.shape[1:], rows.dtype, max(capacity, len(rows)))
        grow.extend(rows)
        return grow

    def __len__(self) -> int:
        return self.size

    def view(self) -> npt.NDArray[Any]:
        """The filled rows, ``[size, *shape]`` (a view; stale after the next growth)."""
        return self.data[: self.size]

    @property
    def nbytes(self) -> int:
        """Bytes of the filled rows."""
        return int(self.view().nbytes)

    def _reserve(self, extra: int) -> int:
        start = self.size
        needed = start + extra
        if needed > len(self.data) or not self.data.flags.writeable:
            grown = np.empty(
                (max(needed, 2 * len(self.data), 1), *self.data.shape[1:]), self.data.dtype
            )
            grown[:start] = self.data[:start]
            self.data = grown
        self.size = needed
        return start

    def extend(self, block: npt.NDArray[Any]) -> int:
        """Append ``block`` (``[n, *shape]``); returns the row where it starts."""
        start = self._reserve(len(block))
        self.data[start : self.size] = block
        return start

    def extend_zeros(self, count: int) -> int:
        """Append ``count`` zero rows; returns the row where they start."""
        start = self._reserve(count)
        self.data[start : self.size] = 0
        return start

    def append(self, row: Any) -> None:
        """Append one row (a scalar, or a sequence of the row shape)."""
        start = self._reserve(1)
        self.data[start] = row

    def resize(self, size: int) -> None:
        """Grow the filled part to ``size`` rows (the new rows are zero), or shrink it."""
        if size > self.size:
            self.extend_zeros(size - self.size)
        else:
            self.size = size

    def truncate(self, size: int) -> None:
        """Forget the rows from ``size`` on (nothing happens if there are fewer)."""
        self.size = min(self.size, size)


def check_rows(
    rows: Rows,
    specs: Mapping[str, FieldSpec],
    where: str,
    *,
    error: type[EpisodataError] = SchemaError,
) -> int:
    """Check that ``rows`` has every required field, no unknown one, and one row count.

    Parameters
    ----------
    rows
        ``{key: [n, *shape]}`` rows of one episode, as a backend receives them.
    specs
        The schema's fields by key (an optional field may be absent from ``rows``).
    where
        What the rows are, for the message (``"episode 3"``).
    error
        The class raised (a backend may report a damaged store with its own).

    Returns
    -------
    int
        ``n``, the number of rows of every field.

    Raises
    ------
    SchemaError
        (or ``error``) naming the unknown and missing fields, or each field's row count.
    """
    unknown = rows.keys() - specs.keys()
    missing = {key for key, spec in specs.items() if not spec.optional} - rows.keys()
    if unknown or missing:
        raise error(
            f"{where}: rows have unknown fields {sorted(unknown)} and lack required "
            f"fields {sorted(missing)}"
        )
    counts = {len(block) for block in rows.values()}
    if len(counts) > 1:
        raise error(f"{where}: fields have different row counts {sorted(counts)}")
    return counts.pop() if counts else 0


def check_fields(
    given: Collection[str],
    expected: Collection[str],
    where: str,
    *,
    error: type[EpisodataError] = SchemaError,
) -> None:
    """Check that the fields of appended rows are the ongoing episode's fields.

    An ongoing episode keeps the fields it started with (an optional field is present
    for the whole episode or absent for all of it).

    Raises
    ------
    SchemaError
        (or ``error``) listing both sets of fields.
    """
    if set(given) != set(expected):
        raise error(
            f"{where}: rows for {sorted(given)} do not match the episode's fields "
            f"{sorted(expected)}"
        )

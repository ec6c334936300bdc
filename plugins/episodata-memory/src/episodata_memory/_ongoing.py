"""The rows of one ongoing episode: a buffer per field, all of one length.

A step-written episode grows one row at a time, and the per-row cost is what bounds
recording in memory. The fields share one row count and one capacity, so an append
checks the capacity once for all of them. A step's exact values (``append_values``) are
assigned into their row by a plain index; a one-row block goes through a
``[capacity, 1, *shape]`` view of each buffer, which NumPy indexes about twice as fast
as it assigns the equivalent one-row slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from episodata_core.errors import SchemaError

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy.typing as npt

    from episodata_core.protocols import Rows

__all__ = ["OngoingRows"]

_FIRST_CAPACITY = 64


class OngoingRows:
    """Rows ``[0, size)`` of every field of one ongoing episode, with spare capacity.

    Capacity doubles when full. An append that raises (a block of the wrong shape)
    leaves ``size`` as it was: rows past ``size`` are never read, so the episode is
    unchanged.
    """

    __slots__ = ("_single", "buffers", "capacity", "size")

    def __init__(self, rows: Rows) -> None:
        count = int(next(iter(rows.values())).shape[0])
        self.capacity = max(_FIRST_CAPACITY, count)
        self.buffers: dict[str, npt.NDArray[Any]] = {}
        self._single: dict[str, npt.NDArray[Any]] = {}
        for key, block in rows.items():
            data = np.empty((self.capacity, *block.shape[1:]), dtype=block.dtype)
            data[:count] = block
            self._keep(key, data)
        self.size = count

    def _keep(self, key: str, data: npt.NDArray[Any]) -> None:
        self.buffers[key] = data
        # row i of this view is the [1, *shape] block data[i : i + 1]
        self._single[key] = data.reshape(data.shape[0], 1, *data.shape[1:])

    def append(self, rows: Rows) -> int:
        """Append ``rows`` (the episode's fields, ``[n, *shape]`` each); returns ``n``."""
        size = self.size
        count = len(next(iter(rows.values())))
        stop = size + count
        if stop > self.capacity:
            self._grow(stop)
        # a one-row block would broadcast over the others' rows: refuse it first
        if count != 1 and any(len(block) != count for block in rows.values()):
            raise self._misfit(rows)
        try:
            if count == 1:
                single = self._single
                for key, block in rows.items():
                    single[key][size] = block
            else:
                buffers = self.buffers
                for key, block in rows.items():
                    buffers[key][size:stop] = block
        except ValueError:
            # NumPy refused a block (wrong length or row shape); nothing counts yet
            raise self._misfit(rows) from None
        self.size = stop
        return count

    def append_values(self, values: Mapping[str, Any]) -> None:
        """Append one row: ``values[key]`` is the field's row itself (no leading axis)."""
        size = self.size
        if size == self.capacity:
            self._grow(size + 1)
        buffers = self.buffers
        try:
            for key, value in values.items():
                buffers[key][size] = value
        except ValueError:
            raise self._misfit({k: np.asarray(v)[None] for k, v in values.items()}) from None
        self.size = size + 1

    def _misfit(self, rows: Rows) -> SchemaError:
        got = {key: tuple(np.shape(block)) for key, block in rows.items()}
        want = {key: ("n", *data.shape[1:]) for key, data in self.buffers.items()}
        return SchemaError(
            f"rows {got} do not fit the episode's fields {want}: every block needs the "
            "field's row shape and one row count n shared by all fields"
        )

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * self.capacity)
        for key, old in list(self.buffers.items()):
            data = np.empty((capacity, *old.shape[1:]), dtype=old.dtype)
            data[: self.size] = old[: self.size]
            self._keep(key, data)
        self.capacity = capacity

    def view(self, key: str) -> npt.NDArray[Any]:
        """The filled rows of one field (a view; stale after the next growth)."""
        return self.buffers[key][: self.size]

    def views(self) -> dict[str, npt.NDArray[Any]]:
        """The filled rows of every field."""
        size = self.size
        return {key: data[:size] for key, data in self.buffers.items()}

    @property
    def nbytes(self) -> int:
        """Bytes of the filled rows of every field."""
        return sum(int(self.view(key).nbytes) for key in self.buffers)

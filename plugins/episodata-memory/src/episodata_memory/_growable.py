"""A NumPy array that grows by doubling, for amortized O(1) appends."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


class Growable:
    """Rows of one shape and dtype with spare capacity at the end.

    Capacity doubles when full. Unused capacity comes from ``np.empty``, whose pages the
    operating system only backs with memory once they are written.
    """

    __slots__ = ("data", "size")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any], capacity: int) -> None:
        self.data: npt.NDArray[Any] = np.empty((max(capacity, 1), *shape), dtype=dtype)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def view(self) -> npt.NDArray[Any]:
        """The filled rows (a view; stale after the next growth)."""
        return self.data[: self.size]

    @property
    def nbytes(self) -> int:
        """Bytes of the filled rows."""
        return int(self.view().nbytes)

    def _reserve(self, extra: int) -> int:
        start = self.size
        needed = start + extra
        if needed > len(self.data):
            grown = np.empty(
                (max(needed, 2 * len(self.data)), *self.data.shape[1:]), self.data.dtype
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

    def append_one(self, value: Any) -> None:
        """Append a single row."""
        start = self._reserve(1)
        self.data[start] = value

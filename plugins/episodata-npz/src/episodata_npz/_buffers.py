"""In-memory helpers: growable rows for ongoing episodes and an LRU of decoded fields."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt


class Growable:
    """Rows of one shape and dtype with spare capacity at the end; capacity doubles.

    Appending is amortized O(1) per row and reading the filled rows is a slice, so an
    ongoing episode that is read between steps is never concatenated again.
    """

    __slots__ = ("data", "size")

    def __init__(self, data: npt.NDArray[Any], size: int) -> None:
        self.data = data
        self.size = size

    @classmethod
    def empty(cls, shape: tuple[int, ...], dtype: np.dtype[Any], capacity: int) -> Growable:
        """An empty buffer with room for ``capacity`` rows of ``shape``."""
        return cls(np.empty((max(capacity, 1), *shape), dtype=dtype), 0)

    @classmethod
    def wrap(cls, rows: npt.NDArray[Any]) -> Growable:
        """A full buffer around ``rows`` (no copy until the first append)."""
        return cls(rows, len(rows))

    def __len__(self) -> int:
        return self.size

    def view(self) -> npt.NDArray[Any]:
        """The filled rows (a view; stale after the next growth)."""
        return self.data[: self.size]

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

    def extend(self, block: npt.NDArray[Any]) -> None:
        """Append ``block`` (``[n, *shape]``)."""
        start = self._reserve(len(block))
        self.data[start : self.size] = block

    def append_one(self, value: Any) -> None:
        """Append a single row."""
        start = self._reserve(1)
        self.data[start] = value


class DecodedCache:
    """Decoded fields of finalized episodes, least recently used first out.

    Finalized episode files never change, so a cached array stays valid for the life
    of the backend. Entries are read-only so that no caller can alter a cached copy.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, str], npt.NDArray[Any]] = OrderedDict()
        self.nbytes = 0

    def get(self, episode: int, key: str) -> npt.NDArray[Any] | None:
        """The cached array, or ``None``."""
        found = self._entries.get((episode, key))
        if found is not None:
            self._entries.move_to_end((episode, key))
        return found

    def put(self, episode: int, key: str, array: npt.NDArray[Any]) -> None:
        """Keep ``array`` unless it alone exceeds the budget; evict the oldest as needed."""
        if array.nbytes > self._max_bytes or (episode, key) in self._entries:
            return
        array.flags.writeable = False
        self._entries[(episode, key)] = array
        self.nbytes += array.nbytes
        while self.nbytes > self._max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.nbytes -= evicted.nbytes

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self.nbytes = 0

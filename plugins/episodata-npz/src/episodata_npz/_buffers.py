"""An LRU of decoded fields (growable rows are :class:`episodata_core.authoring.Growable`)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy.typing as npt


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
